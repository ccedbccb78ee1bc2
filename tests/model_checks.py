"""Checks every model family passes the same way (tests/test_models.py, tests/test_qwen3_vl.py,
tests/test_paddleocr_vl.py), and the folder helpers the checkpoint tests share."""
import json
import os
import shutil

import numpy as np
import paddle
from safetensors.numpy import load_file, save_file

from paddle_r1.generation.generator import build_prompt_batch
from paddle_r1.generation.rollout import SamplingParams, sample_completions
from paddle_r1.algorithms.logprobs import completion_logprobs


def assert_completion_logprobs_match_forward(model, processor, samples) -> None:
    """Log-probs of sampled completions (prompt embedded once, repeated for G = 2) equal the model's own forward
    over prompt + completion with the image."""
    prompt, _ = build_prompt_batch(samples[:1], processor, "{Question}")
    paddle.seed(0)
    rollout = sample_completions(model, prompt, 2, SamplingParams(5, temperature=1.0),
                                 [processor.tokenizer.eos_token_id], processor.tokenizer.pad_token_id)
    got = completion_logprobs(model, rollout, chunk_size=3).numpy()
    for row in range(2):
        completion = rollout.completion_ids[row:row + 1]
        ids = paddle.concat([prompt.input_ids, completion], axis=1)
        mask = paddle.ones(ids.shape, dtype=prompt.attention_mask.dtype)
        model.model.rope_deltas = None
        logits = model(input_ids=ids, attention_mask=mask, pixel_values=prompt.pixel_values,
                       image_grid_thw=prompt.image_grid_thw).logits[0, prompt.input_ids.shape[1] - 1:-1]
        expected = paddle.take_along_axis(paddle.nn.functional.log_softmax(logits, axis=-1),
                                          completion[0].unsqueeze(-1), axis=-1).squeeze(-1).numpy()
        n = int(rollout.completion_mask[row].sum())
        np.testing.assert_allclose(got[row, :n], expected[:n], rtol=1e-4, atol=1e-5)


def assert_one_token_step_decodes_as_layers(model, prompt, g: int = 2, steps: int = 5) -> None:
    """The model takes the one-token decode step; fed the same tokens over the same prefilled ``prompt`` (each
    repeated for ``g`` completions), its logits equal the model's own layers' decode at every step, the weights
    packed from the third step; and both engines sample the same tokens from the same random numbers."""
    from paddle_r1.generation.decoder import LayerDecoder, OneTokenDecoder, make_decoder, supports
    from paddle_r1.generation.rollout import prefill
    from paddle_r1.models.forward import RepeatedPrompt, repeat_rows

    assert supports(model)
    tokens = paddle.to_tensor(np.random.default_rng(0).integers(0, 100, [prompt.size * g, steps]))
    with paddle.no_grad():
        cache, _, next_position = prefill(model, prompt)
        decoders = [make_decoder(model, RepeatedPrompt(cache, g), repeat_rows(prompt.attention_mask, g),
                                 repeat_rows(next_position, g), steps, engine, pack_after=2)
                    for engine in ("one_token", "layers")]
        assert [type(d) for d in decoders] == [OneTokenDecoder, LayerDecoder]
        for step in range(steps):
            one_token, layers = (d.step(tokens[:, step]).numpy() for d in decoders)
            np.testing.assert_allclose(one_token, layers, atol=2e-5)
    uniforms = paddle.to_tensor(np.random.default_rng(3).random([prompt.size * g, 8]).astype("float32"))
    sampled = [sample_completions(model, prompt, g, SamplingParams(8, temperature=1.0, engine=engine), [-1], 0,
                                  uniforms=uniforms).completion_ids.numpy() for engine in ("one_token", "layers")]
    np.testing.assert_array_equal(sampled[0], sampled[1])


def tied_copy(folder: str, copy: str) -> dict:
    """``folder`` copied to ``copy`` with ``tie_word_embeddings`` on and no ``lm_head.weight`` (as a tied checkpoint
    is published); returns the copy's weights."""
    shutil.copytree(folder, copy)
    with open(os.path.join(copy, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    with open(os.path.join(copy, "config.json"), "w", encoding="utf-8") as f:
        json.dump({**config, "tie_word_embeddings": True}, f)
    weights = load_file(os.path.join(copy, "model.safetensors"))
    del weights["lm_head.weight"]
    save_file(weights, os.path.join(copy, "model.safetensors"), metadata={"format": "pt"})
    return weights


def folder_weights(folder: str) -> dict:
    """Every weight of every safetensors file in ``folder``, as the Paddle tensors stored (bfloat16 included)."""
    from safetensors import safe_open

    weights = {}
    for name in sorted(f for f in os.listdir(folder) if f.endswith(".safetensors")):
        with safe_open(os.path.join(folder, name), framework="paddle") as f:
            weights.update({key: f.get_tensor(key) for key in f.keys()})
    return weights
