"""PaddleOCR-VL through paddle_r1: tiny checkpoint in the published layout -> loader -> padded batches (M-RoPE
positions per row) -> rollout (the decoder's layers) and log-probs (prompt once per group) -> GRPO and SFT steps, LoRA
-> save_pretrained in the published layout, which paddleformers' own class loads. Its logits against transformers 5:
tests/test_paddleocr_vl_parity.py."""
import json
import os

import numpy as np
import paddle
import pytest
from PIL import Image
from safetensors.numpy import load_file

from paddle_r1.generation.rollout import PromptBatch, SamplingParams, sample_completions
from paddle_r1.models.loading import load_model, load_processor, model_family
from paddle_r1.testing.tiny import make_tiny_model
from paddle_r1.algorithms.logprobs import completion_logprobs
from model_checks import (assert_completion_logprobs_match_forward, assert_one_token_step_decodes_as_layers, tied_copy)


@pytest.fixture(scope="module")
def ocr_dir(tmp_path_factory):
    return make_tiny_model(str(tmp_path_factory.mktemp("tiny") / "paddleocr_vl"), family="paddleocr_vl")


@pytest.fixture(scope="module")
def ocr(ocr_dir):
    model = load_model(ocr_dir)
    model.eval()
    return model, load_processor(ocr_dir)


def _image(seed: int, height: int, width: int) -> Image.Image:
    return Image.fromarray((np.random.default_rng(seed).random((height, width, 3)) * 255).astype("uint8"))


def _prompt_text(processor, text: str, images: int) -> str:
    content = [{"type": "image"}] * images + [{"type": "text", "text": text}]
    return processor.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                         add_generation_prompt=True)


def _batch(processor, texts, images) -> PromptBatch:
    encoded = processor(text=texts, images=images or None, padding=True, return_tensors="pd")
    return PromptBatch(encoded["input_ids"], encoded["attention_mask"], encoded.get("pixel_values"),
                       encoded.get("image_grid_thw"))


def test_family_template_and_processor(ocr, ocr_dir):
    model, processor = ocr
    assert model_family(ocr_dir) == "paddleocr_vl" == model.config.model_type
    text = _prompt_text(processor, "OCR:", 1)
    assert text == "<|begin_of_sentence|>User: <|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>OCR:\nAssistant: "
    prompt = _batch(processor, [text], [_image(0, 40, 120)])
    t, h, w = prompt.image_grid_thw.numpy()[0]
    assert t == 1 and prompt.pixel_values.shape == [h * w, 3, 14, 14]  # one frame, 14-pixel patches
    assert int((prompt.input_ids == model.config.image_token_id).sum()) == h * w // 4  # 2 x 2 merged


@paddle.no_grad()
def test_a_padded_batch_gives_each_prompt_its_own_positions_and_logits(ocr):
    """Two images of different sizes and a text-only prompt, left-padded in one batch: each row's M-RoPE positions
    and logits are those of its prompt alone (paddleformers' own positions count the padding and take row i's grid
    for row i)."""
    model, processor = ocr
    rows = [(_prompt_text(processor, "OCR:", 1), [_image(0, 40, 120)]),
            (_prompt_text(processor, "Table Recognition:", 1), [_image(1, 90, 60)]),
            (_prompt_text(processor, "OCR: the total amount of the invoice", 0), [])]
    batch = _batch(processor, [text for text, _ in rows], [image for _, images in rows for image in images])
    positions, _ = model.get_rope_index(batch.input_ids, batch.image_grid_thw, attention_mask=batch.attention_mask)
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, pixel_values=batch.pixel_values,
                   image_grid_thw=batch.image_grid_thw).logits
    for row, (text, images) in enumerate(rows):
        alone = _batch(processor, [text], images)
        length = alone.input_ids.shape[1]
        alone_positions, _ = model.get_rope_index(alone.input_ids, alone.image_grid_thw)
        np.testing.assert_array_equal(positions[:, row, -length:].numpy(), alone_positions[:, 0].numpy())
        alone_logits = model(input_ids=alone.input_ids, attention_mask=alone.attention_mask,
                             pixel_values=alone.pixel_values, image_grid_thw=alone.image_grid_thw).logits
        np.testing.assert_allclose(logits[row, -length:].numpy(), alone_logits[0].numpy(), atol=2e-5, rtol=0)
    image = (batch.input_ids[0] == model.config.image_token_id).numpy()  # one time step, several columns
    assert len(set(positions[0, 0].numpy()[image])) == 1 and len(set(positions[2, 0].numpy()[image])) > 1


def test_rollout_decodes_as_the_full_forward_and_logprobs_share_the_prompt(ocr, rec_samples):
    """The rollout's layer-by-layer decode (KV cache written in place) picks the tokens the full forward over
    prompt + completion would, and the log-probs with the prompt run once per group equal that forward's."""
    model, processor = ocr
    assert_completion_logprobs_match_forward(model, processor, rec_samples)
    prompt = _batch(processor, [_prompt_text(processor, "OCR:", 1), _prompt_text(processor, "OCR:", 0)],
                    [_image(2, 56, 140)])
    rollout = sample_completions(model, prompt, 2, SamplingParams(max_new_tokens=6, temperature=0.0), [-1], 0)
    ids = paddle.concat([paddle.repeat_interleave(prompt.input_ids, 2, 0), rollout.completion_ids], axis=1)
    mask = paddle.concat([paddle.repeat_interleave(prompt.attention_mask, 2, 0),
                          paddle.ones_like(rollout.completion_ids)], axis=1)
    pixels = paddle.concat([prompt.pixel_values, prompt.pixel_values])
    grids = paddle.concat([prompt.image_grid_thw, prompt.image_grid_thw])
    with paddle.no_grad():
        image_rows = model(input_ids=ids[:2], attention_mask=mask[:2], pixel_values=pixels, image_grid_thw=grids)
        text_rows = model(input_ids=ids[2:], attention_mask=mask[2:])
    logits = paddle.concat([image_rows.logits, text_rows.logits])[:, prompt.input_ids.shape[1] - 1:-1]
    np.testing.assert_array_equal(logits.argmax(-1).numpy(), rollout.completion_ids.numpy())
    expected = paddle.take_along_axis(paddle.nn.functional.log_softmax(logits, -1),
                                      rollout.completion_ids.unsqueeze(-1), axis=-1).squeeze(-1)
    with paddle.no_grad():
        got = completion_logprobs(model, rollout, chunk_size=4)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), atol=2e-5, rtol=0)


def _weight_names(folder: str) -> set:
    names = set()
    for file in os.listdir(folder):
        if file.endswith(".safetensors"):
            names |= set(load_file(os.path.join(folder, file)))
    return names


def test_the_one_token_step_decodes_as_its_layers(ocr):
    """ERNIE-4.5's decoder takes the one-token step: its separate query, key, value, gate and up products laid as the
    step reads them, its [3, B, L, D] rotary tables merged as its attention merges them (an image prompt and a
    text-only one, left-padded)."""
    model, processor = ocr
    assert_one_token_step_decodes_as_layers(model, _batch(
        processor, [_prompt_text(processor, "OCR:", 1), _prompt_text(processor, "OCR:", 0)], [_image(2, 56, 140)]))


def test_the_one_token_step_runs_each_projections_lora_adapters(ocr_dir):
    """With (random, non-zero) LoRA adapters on each of ERNIE-4.5's separate projections, the one-token step still
    decodes as the layers do (``LoRALinear``'s x W + (x A) B * scaling, per projection): left out, they would part."""
    from paddle_r1.models.lora import apply_lora, lora_layers

    model, processor = load_model(ocr_dir), load_processor(ocr_dir)
    model.eval()
    apply_lora(model, rank=2, alpha=4)
    rng = np.random.default_rng(0)
    adapted = lora_layers(model)
    assert {name.rsplit(".", 1)[-1] for name in adapted} >= {"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"}
    for layer in adapted.values():
        layer.lora_B.set_value(paddle.to_tensor(rng.normal(0, 1, layer.lora_B.shape), dtype=layer.lora_B.dtype))
    assert_one_token_step_decodes_as_layers(model, _batch(processor, [_prompt_text(processor, "OCR:", 0)], []))


def test_its_cpu_attention_gives_paddleformers_logits_and_gradients(ocr_dir):
    """On CPU ERNIE-4.5's attention computes as paddle_r1's Qwen attention (q, k, v laid per key/value head, rotated
    in one pass by tables merged once per forward): logits and the projections' gradients equal paddleformers' own
    forward and rotary layer, over an image prompt and a left-padded text-only one."""
    from paddleformers.transformers.paddleocr_vl.modeling import Ernie4_5Attention, PaddleOCRRotaryEmbedding

    from paddle_r1.models.paddleocr_vl import MaskedErnieAttention, PerAxisRotary

    model, processor = load_model(ocr_dir), load_processor(ocr_dir)
    prompt = _batch(processor, [_prompt_text(processor, "OCR:", 1), _prompt_text(processor, "OCR:", 0)],
                    [_image(2, 56, 140)])

    def use(rotary, attention):
        model.model.rotary_emb.__class__ = rotary
        for layer in model.model.layers:
            layer.self_attn.__class__ = attention

    results = []
    for classes in ((PerAxisRotary, MaskedErnieAttention), (PaddleOCRRotaryEmbedding, Ernie4_5Attention)):
        use(*classes)
        logits = model(input_ids=prompt.input_ids, attention_mask=prompt.attention_mask,
                       pixel_values=prompt.pixel_values, image_grid_thw=prompt.image_grid_thw).logits
        (logits * prompt.attention_mask.unsqueeze(-1).astype(logits.dtype)).sum().backward()
        attention = model.model.layers[0].self_attn
        results.append([logits.numpy()] + [p.weight.grad.numpy().copy() for p in (attention.q_proj, attention.k_proj,
                                                                                   attention.v_proj)])
        model.clear_gradients()
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)


def test_rotary_rows_merge_the_sections_as_the_attention_does(ocr):
    """``MaskedErnieAttention.rotary_rows``: positions that differ per axis (an image's), rotated by the merged rows,
    equal paddleformers' ``apply_multimodal_rotary_pos_emb`` over the per-axis tables."""
    from paddleformers.transformers.paddleocr_vl.modeling import apply_multimodal_rotary_pos_emb, rotate_half

    model, _ = ocr
    text = model.model
    attention = text.layers[0].self_attn
    positions = paddle.to_tensor(np.random.default_rng(1).integers(0, 50, [3, 2, 7]))  # [axes, B, L], all differ
    cos, sin = text.rotary_emb(paddle.zeros([1]), positions)
    query = paddle.randn([2, attention.num_heads, 7, attention.head_dim])
    want, _ = apply_multimodal_rotary_pos_emb(query, query, cos, sin, attention.rope_scaling["mrope_section"])
    merged_cos, merged_sin = attention.rotary_rows(cos, sin)
    np.testing.assert_array_equal((query * merged_cos + rotate_half(query) * merged_sin).numpy(), want.numpy())


def test_the_per_axis_tables_merge_over_the_sections_asked_for_each_time(ocr):
    """``PerAxisTables.merged`` keeps its merge for the next layer, not for other sections: asked for other
    sections it merges over those (as fresh tables would), and back again over the first."""
    from paddle_r1.models.paddleocr_vl import PerAxisTables

    model, _ = ocr
    text = model.model
    sections = list(text.layers[0].self_attn.rope_scaling["mrope_section"])
    other = sections[1:] + sections[:1]
    assert other != sections
    positions = paddle.to_tensor(np.random.default_rng(2).integers(0, 50, [3, 1, 5]))
    tables = text.rotary_emb(paddle.zeros([1]), positions)
    assert type(tables) is PerAxisTables

    def merged(tables, chosen):
        return [t.numpy() for t in tables.merged(chosen)]
    first, then, again = merged(tables, sections), merged(tables, other), merged(tables, sections)
    fresh = merged(PerAxisTables(tuple(tables)), other)
    np.testing.assert_array_equal(then[0], fresh[0])
    np.testing.assert_array_equal(then[1], fresh[1])
    np.testing.assert_array_equal(again[0], first[0])
    assert not np.array_equal(then[0], first[0])


def test_grpo_steps_save_the_published_layout_that_paddleformers_loads(ocr_dir, rec_samples, tmp_path, capsys):
    """Two GRPO steps (reference log-probs, gradients through the vision tower, merger and decoder); the checkpoint
    holds the published names and config, reloads here to the trained weights, and loads in paddleformers' own
    class (which needs the packing table the published weights carry)."""
    from paddleformers.transformers.paddleocr_vl.modeling import PaddleOCRVLForConditionalGeneration

    from paddle_r1.config.jobs import GRPOConfig
    from paddle_r1.trainer.grpo import GRPOTrainer

    config = GRPOConfig(model_name_or_path=ocr_dir, output_dir=str(tmp_path / "run"), num_generations=2,
                        per_device_train_batch_size=4, max_completion_length=6, max_steps=2, learning_rate=5e-3,
                        reward_funcs=["reward_helpers:short_reward"], question_template="{Question}",
                        use_visualdl=False, disable_tqdm=True)
    trainer = GRPOTrainer(config, samples=rec_samples)
    assert "rollout engine: one_token\n" in capsys.readouterr().out
    assert trainer.coord_system == "rel_1000"
    result = trainer.train()
    assert all(step["grad_norm"] > 0 for step in result["history"])
    saved = result["checkpoint"]
    assert _weight_names(saved) == _weight_names(ocr_dir) | {
        "visual.vision_model.embeddings.packing_position_embedding.weight"}
    config_json = json.load(open(os.path.join(saved, "config.json")))
    assert "text_config" not in config_json and config_json["hidden_size"] == 64  # flat, as published
    trained = {k: v.numpy() for k, v in trainer.policy.state_dict().items()}
    reloaded = load_model(saved).state_dict()
    assert trained.keys() == reloaded.keys()
    for name, value in reloaded.items():
        np.testing.assert_array_equal(value.numpy(), trained[name], err_msg=name)
    theirs_config = PaddleOCRVLForConditionalGeneration.config_class.from_pretrained(saved)
    theirs_config.fuse_rms_norm = theirs_config.vision_config.fuse_rms_norm = False
    theirs = PaddleOCRVLForConditionalGeneration.from_pretrained(saved, config=theirs_config, dtype="float32")
    np.testing.assert_array_equal(theirs.mlp_AR.linear_2.weight.numpy(), trained["mlp_AR.linear_2.weight"])


def test_a_tied_head_is_the_embeddings(ocr_dir, tmp_path):
    """tie_word_embeddings with no lm_head.weight in the checkpoint (transformers' default for this model): the head
    is the embeddings' parameter, so its logits are the checkpoint's and it trains with them."""
    weights = tied_copy(ocr_dir, str(tmp_path / "tied"))
    model = load_model(str(tmp_path / "tied"))
    assert model.lm_head.weight is model.model.embed_tokens.weight
    np.testing.assert_array_equal(model.lm_head.weight.numpy(), weights["model.embed_tokens.weight"])


def test_lora_adapts_only_the_decoder_and_sft_trains(ocr_dir, rec_samples, tmp_path):
    """LoRA's default targets on PaddleOCR-VL: the ERNIE decoder's seven projections per layer, nothing in the vision
    tower; then SFT steps through the same log-prob path, and the merged checkpoint reloads to the adapted model."""
    from paddle_r1.config.jobs import SFTConfig
    from paddle_r1.models.lora import apply_lora, lora_layers
    from paddle_r1.trainer.sft import SFTTrainer

    model = load_model(ocr_dir)
    apply_lora(model, rank=4, alpha=8)
    names = sorted(lora_layers(model))
    assert len(names) == 7 * model.config.num_hidden_layers and all(n.startswith("model.layers.") for n in names)

    config = SFTConfig(model_name_or_path=ocr_dir, output_dir=str(tmp_path / "sft"), per_device_train_batch_size=4,
                       max_steps=2, learning_rate=1e-2, lora=True, question_template="{Question}",
                       use_visualdl=False, disable_tqdm=True)
    result = SFTTrainer(config, samples=rec_samples).train()
    losses = [step["loss"] for step in result["history"]]
    assert losses[1] < losses[0]
    assert os.path.isdir(os.path.join(result["checkpoint"], "adapter"))
    assert model_family(result["checkpoint"]) == "paddleocr_vl"


def test_sdpa_attends_as_eager_with_padding_and_after_a_cache(ocr, ocr_dir):
    """Under sdpa (the GPU default) the decoder gets the same logits, rollout tokens, log-probs and gradients as
    under eager, for padded prompts and for queries after a KV cache (paddleformers' attention asked Paddle's sdpa for
    top-left causality over the mask)."""
    eager, processor = ocr
    sdpa = load_model(ocr_dir, attn_implementation="sdpa")
    sdpa.eval()
    padded = _batch(processor, [_prompt_text(processor, "OCR:", 1), _prompt_text(processor, "Table Recognition:", 1)],
                    [_image(3, 40, 120), _image(4, 90, 60)])
    alone = _batch(processor, [_prompt_text(processor, "OCR:", 1)], [_image(3, 40, 120)])
    with paddle.no_grad():
        args = dict(input_ids=padded.input_ids, attention_mask=padded.attention_mask,
                    pixel_values=padded.pixel_values, image_grid_thw=padded.image_grid_thw)
        np.testing.assert_allclose(sdpa(**args).logits.numpy(), eager(**args).logits.numpy(), atol=1e-5, rtol=0)
    for prompt in (padded, alone):
        params = SamplingParams(max_new_tokens=5, temperature=0.0)
        rollout = sample_completions(eager, prompt, 2, params, [-1], 0)
        assert (sample_completions(sdpa, prompt, 2, params, [-1], 0).completion_ids == rollout.completion_ids).all()
        got = {}
        for name, model in (("eager", eager), ("sdpa", sdpa)):
            model.clear_gradients()
            logprobs = completion_logprobs(model, rollout, chunk_size=4)
            logprobs.sum().backward()
            got[name] = logprobs.numpy(), model.mlp_AR.linear_2.weight.grad.numpy()
        np.testing.assert_allclose(got["sdpa"][0], got["eager"][0], atol=1e-5, rtol=0)
        np.testing.assert_allclose(got["sdpa"][1], got["eager"][1], atol=1e-5, rtol=0)
    eager.clear_gradients()


def test_gradient_checkpointing_and_frozen_vision(ocr, ocr_dir, rec_samples):
    """Recomputed decoder and vision blocks give the same log-probs and gradients; freeze_vision stops the tower and
    the merger beside it (mlp_AR), and nothing else."""
    from paddle_r1.generation.generator import build_prompt_batch

    _, processor = ocr
    prompt, _ = build_prompt_batch(rec_samples[:2], processor, "{Question}")
    plain = load_model(ocr_dir)
    rollout = sample_completions(plain, prompt, 2, SamplingParams(max_new_tokens=4, temperature=0.0), [-1], 0)
    got = {}
    for name, model in (("plain", plain), ("recompute", load_model(ocr_dir, gradient_checkpointing=True)),
                        ("frozen", load_model(ocr_dir, freeze_vision=True))):
        model.train()
        completion_logprobs(model, rollout, chunk_size=4).sum().backward()
        got[name] = {k: p.grad.numpy() for k, p in model.named_parameters() if p.grad is not None}
    assert got["recompute"].keys() == got["plain"].keys()
    for key, grad in got["plain"].items():
        np.testing.assert_allclose(got["recompute"][key], grad, atol=1e-5, rtol=1e-4, err_msg=key)
    vision = {k for k in got["plain"] if k.startswith(("visual.", "mlp_AR."))}
    assert vision and got["frozen"].keys() == got["plain"].keys() - vision


def test_a_missing_triton_is_one_line_naming_the_extra_before_any_model_loads(ocr_dir, rec_jsonl, monkeypatch, capsys):
    """paddleformers' PaddleOCR-VL module imports triton: without it the family is refused by its config alone."""
    import sys

    from paddle_r1.cli import main

    monkeypatch.setitem(sys.modules, "triton", None)  # what an import of a package that is not installed sees
    assert main(["train", "--model_name_or_path", ocr_dir, "--data_path", rec_jsonl, "--max_steps", "1"]) == 2
    error = capsys.readouterr().err
    assert "PaddleOCR-VL needs the triton package" in error and "pip install 'paddle_r1[paddleocr_vl]'" in error
    assert "Traceback" not in error


def test_a_served_string_message_reaches_paddleocr_vls_template(ocr):
    """OpenAI clients send a message's content as a string; PaddleOCR-VL's template reads only lists of parts and
    renders a string as nothing."""
    from paddle_r1.serve.chat import parse_chat_request
    from paddle_r1.serve.limits import ServeLimits

    _, processor = ocr
    body = json.dumps({"model": "ocr", "messages": [{"role": "system", "content": "Read carefully."},
                                                     {"role": "user", "content": "OCR: the total amount"}]})
    request = parse_chat_request(body.encode(), "ocr", ServeLimits())
    prompt = processor.apply_chat_template(request.messages, tokenize=False, add_generation_prompt=True)
    assert prompt == "<|begin_of_sentence|>Read carefully.\nUser: OCR: the total amount\nAssistant: "


def test_the_server_counts_a_paddleocr_vl_images_tokens_as_its_processor_expands_it(ocr):
    """The prompt bound counts each image's tokens from its size; PaddleOCR-VL's image processor has no
    ``get_number_of_image_patches`` (Qwen's do), and the count comes from its own resize."""
    from paddle_r1.serve.chat import PromptMeter

    _, processor = ocr
    meter = PromptMeter(processor, max_prompt_tokens=4096)
    for height, width in ((64, 64), (80, 100), (300, 41)):
        image = _image(0, height, width)
        grid = processor(text=[_prompt_text(processor, "x", 1)], images=[image], return_tensors="np")["image_grid_thw"]
        assert meter.image_tokens(image) == int(np.prod(grid[0])) // processor.image_processor.merge_size ** 2 > 0
