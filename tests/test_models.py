"""Qwen2-VL next to Qwen2.5-VL: tiny checkpoint -> loader -> rollout -> save_pretrained -> reload; Qwen3-VL is
tests/test_qwen3_vl.py."""
import json
import os
import shutil

import numpy as np
import paddle
import pytest
from safetensors import safe_open

from paddle_r1.models.loading import load_model, load_models, model_family
from paddle_r1.testing.tiny import make_tiny_model
from model_checks import assert_completion_logprobs_match_forward, tied_copy
from paddle_r1.generation.generator import build_prompt_batch
from paddle_r1.generation.rollout import SamplingParams, sample_completions

PROCESSOR_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.json", "preprocessor_config.json")


@pytest.fixture(scope="module")
def qwen2_vl_dir(tmp_path_factory):
    return make_tiny_model(str(tmp_path_factory.mktemp("tiny") / "qwen2_vl"), family="qwen2_vl")


@pytest.fixture(scope="module")
def qwen2_vl(qwen2_vl_dir):
    loaded = load_models(qwen2_vl_dir, beta=0.0)
    return loaded.policy, loaded.processor


def _weight_names(folder):
    names = set()
    for name in os.listdir(folder):
        if name.endswith(".safetensors"):
            with safe_open(os.path.join(folder, name), "np") as f:
                names |= set(f.keys())
    return names


@paddle.no_grad()
def _logits(model, prompt):
    model.model.rope_deltas = None
    return model(input_ids=prompt.input_ids, attention_mask=prompt.attention_mask,
                 pixel_values=prompt.pixel_values, image_grid_thw=prompt.image_grid_thw).logits.numpy()


def test_qwen2_vl_published_layout(qwen2_vl_dir):
    config = json.load(open(os.path.join(qwen2_vl_dir, "config.json")))
    assert config["model_type"] == "qwen2_vl" and "text_config" not in config
    vision = config["vision_config"]
    assert vision["embed_dim"] == 32 and vision["hidden_size"] == config["hidden_size"]  # merger output = LLM width
    names = _weight_names(qwen2_vl_dir)
    assert {"visual.blocks.0.mlp.fc1.weight", "visual.blocks.0.norm1.bias", "visual.merger.ln_q.bias",
            "model.layers.0.self_attn.q_proj.weight", "lm_head.weight"} <= names
    assert not any("gate_proj" in n for n in names if n.startswith("visual."))
    preprocessor = json.load(open(os.path.join(qwen2_vl_dir, "preprocessor_config.json")))
    assert preprocessor["processor_class"] == "Qwen2VLProcessor"


def test_qwen2_vl_loads_with_its_processor(qwen2_vl, qwen2_vl_dir):
    model, processor = qwen2_vl
    assert type(model).__name__ == "Qwen2VLForConditionalGeneration" and model.config.model_type == "qwen2_vl"
    assert type(processor).__name__ == "Qwen2VLProcessor" and processor.tokenizer.padding_side == "left"
    with safe_open(os.path.join(qwen2_vl_dir, "model.safetensors"), "np") as f:
        fc1 = f.get_tensor("visual.blocks.1.mlp.fc1.weight")
    np.testing.assert_array_equal(model.visual.blocks[1].mlp.fc1.weight.numpy(), fc1.T)  # Paddle keeps [in, out]


def test_qwen2_vl_takes_the_one_token_decode_step(qwen2_vl, rec_samples):
    """Qwen2-VL's text decoder is Qwen2.5-VL's and gets paddle_r1's fast paths (attention, RMSNorm, SwiGLU) and so
    the one-token decode step; both engines sample the same tokens."""
    from paddle_r1.generation.decoder import supports
    from paddle_r1.models.rms_norm import FastRMSNorm
    from paddle_r1.models.text_attention import FastTextAttention

    model, processor = qwen2_vl
    text = model.model.language_model
    assert type(text.layers[0].self_attn) is FastTextAttention and type(text.norm) is FastRMSNorm
    assert supports(model)
    prompt, _ = build_prompt_batch(rec_samples[:2], processor, "{Question} Answer with a box.")
    uniforms = paddle.to_tensor(np.random.default_rng(3).random([prompt.size * 2, 8]).astype("float32"))
    eos, pad = processor.tokenizer.eos_token_id, processor.tokenizer.pad_token_id
    one_token, layers = (sample_completions(model, prompt, 2, SamplingParams(8, temperature=1.0, engine=engine), [eos],
                                            pad, uniforms=uniforms).completion_ids.numpy()
                         for engine in ("one_token", "layers"))
    np.testing.assert_array_equal(one_token, layers)


def test_qwen2_vl_cached_greedy_equals_uncached(qwen2_vl, rec_samples):
    model, processor = qwen2_vl
    prompt, _ = build_prompt_batch(rec_samples[:3], processor, "{Question} Answer with a box.")
    assert len({int(m.sum()) for m in prompt.attention_mask}) > 1  # left padding is exercised
    eos, pad = processor.tokenizer.eos_token_id, processor.tokenizer.pad_token_id
    steps = 8
    rollout = sample_completions(model, prompt, 2, SamplingParams(steps, temperature=0.0), [eos], pad)

    ids, mask = prompt.input_ids, prompt.attention_mask
    reference = []
    for _ in range(steps):  # the whole sequence through the model's own forward at every step
        model.model.rope_deltas = None
        with paddle.no_grad():
            token = model(input_ids=ids, attention_mask=mask, pixel_values=prompt.pixel_values,
                          image_grid_thw=prompt.image_grid_thw).logits[:, -1].argmax(-1)
        reference.append(token.numpy())
        ids = paddle.concat([ids, token.unsqueeze(1).astype(ids.dtype)], axis=1)
        mask = paddle.concat([mask, paddle.ones([ids.shape[0], 1], dtype=mask.dtype)], axis=1)
    reference = np.stack(reference, axis=1)
    got = rollout.completion_ids.numpy()
    for row in range(got.shape[0]):
        n = int(rollout.completion_mask[row].sum())
        np.testing.assert_array_equal(got[row, :n], reference[row // 2, :n])


@paddle.no_grad()
def test_qwen2_vl_completion_logprobs_match_its_forward(qwen2_vl, rec_samples):
    assert_completion_logprobs_match_forward(*qwen2_vl, rec_samples)


def test_qwen2_vl_save_pretrained_round_trip(qwen2_vl, qwen2_vl_dir, rec_samples, tmp_path):
    model, processor = qwen2_vl
    saved = str(tmp_path / "saved")
    model.save_pretrained(saved)
    for name in PROCESSOR_FILES:
        shutil.copy(os.path.join(qwen2_vl_dir, name), saved)
    assert _weight_names(saved) == _weight_names(qwen2_vl_dir)  # the published names, nothing else
    config = json.load(open(os.path.join(saved, "config.json")))
    assert config["model_type"] == "qwen2_vl" and "text_config" not in config  # flat, as published
    assert config["hidden_size"] == 64 and config["vision_config"]["embed_dim"] == 32
    reloaded = load_model(saved)
    reloaded.eval()
    prompt, _ = build_prompt_batch(rec_samples[:2], processor, "{Question}")
    np.testing.assert_array_equal(_logits(reloaded, prompt), _logits(model, prompt))


def test_qwen2_vl_tied_embeddings_like_the_2b(qwen2_vl_dir, tmp_path):
    """Qwen2-VL-2B ties lm_head to the embeddings; its checkpoint needs no lm_head.weight."""
    tied = str(tmp_path / "tied")
    weights = tied_copy(qwen2_vl_dir, tied)
    model = load_model(tied)
    embeddings = weights["model.embed_tokens.weight"]
    np.testing.assert_array_equal(model.lm_head.weight.numpy(), embeddings)


def test_family_from_config_json_not_folder_name(qwen2_vl_dir, tmp_path):
    odd = tmp_path / "Qwen2.5-VL-3B-Instruct-finetuned"  # a misleading name: config.json decides
    os.symlink(qwen2_vl_dir, odd)
    assert model_family(str(odd)) == "qwen2_vl"
    assert type(load_model(str(odd))).__name__ == "Qwen2VLForConditionalGeneration"


def test_qwen2_vl_grpo_steps_then_eval(qwen2_vl_dir, rec_samples, tmp_path):
    """The training loop and the eval runner take a Qwen2-VL folder as they take a Qwen2.5-VL one; its
    boxes are read in 0-1000 units."""
    from paddle_r1.config.jobs import GRPOConfig
    from paddle_r1.evaluation.inputs import EvalOptions, read_benchmarks
    from paddle_r1.evaluation.runner import Evaluator
    from paddle_r1.evaluation.tasks import TASKS
    from paddle_r1.trainer.grpo import GRPOTrainer

    config = GRPOConfig(model_name_or_path=qwen2_vl_dir, output_dir=str(tmp_path / "run"), num_generations=2,
                        per_device_train_batch_size=4, max_completion_length=6, max_steps=2, learning_rate=5e-3,
                        reward_funcs=["reward_helpers:short_reward", "iou"], use_visualdl=False, disable_tqdm=True)
    trainer = GRPOTrainer(config, samples=rec_samples)
    assert trainer.coord_system == "rel_1000"
    result = trainer.train()
    assert result["history"][0]["grad_norm"] > 0
    assert model_family(result["checkpoint"]) == "qwen2_vl"

    data_root = tmp_path / "bench"
    data_root.mkdir()
    rows = [{**{k: v for k, v in s.items() if k not in ("images", "reward_method")}, "image": s["images"][0]}
            for s in rec_samples[:3]]
    (data_root / "refcoco_val.json").write_text(json.dumps(rows))
    options = EvalOptions(data_root=str(data_root), image_root=None, batch_size=2, max_new_tokens=4)
    evaluator = Evaluator(result["checkpoint"], options)
    summary = evaluator.evaluate(read_benchmarks({"refcoco_val": TASKS["rec"]}, options)[0])
    assert summary["total"] == 3 and evaluator.coord_system == "rel_1000"
