"""Qwen3-VL through paddle_r1: tiny checkpoint -> loader -> rollout / log-probs (DeepStack repeated per completion)
-> GRPO steps, LoRA, gradient checkpointing, resume -> save_pretrained in the published layout (reloaded here and,
when the reference environment exists, by transformers). Its logits against transformers: tests/test_parity.py."""
import json
import os
import shutil
import subprocess

import numpy as np
import paddle
import pytest

from paddle_r1.config.jobs import GRPOConfig
from paddle_r1.errors import ConfigError
from paddle_r1.generation.generator import build_prompt_batch
from paddle_r1.models.loading import load_model, load_models, model_family
from paddle_r1.testing.tiny import make_tiny_model
from paddle_r1.trainer.grpo import GRPOTrainer
from model_checks import (assert_completion_logprobs_match_forward, assert_one_token_step_decodes_as_layers)

PROCESSOR_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.json", "preprocessor_config.json")
# transformers 4.57 (the parity reference) in its own environment, by default a venv beside the checkout
# (tests/fixtures/make_reference.py says how to make it); the reload check is skipped without it
REFERENCE_PYTHON = os.environ.get("PADDLE_R1_QWEN3_REFERENCE_PYTHON", os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "refenv-4.57", "bin", "python"))


@pytest.fixture(scope="module")
def qwen3_dir(tmp_path_factory):
    return make_tiny_model(str(tmp_path_factory.mktemp("tiny") / "qwen3_vl"), family="qwen3_vl")


@pytest.fixture(scope="module")
def qwen3(qwen3_dir):
    loaded = load_models(qwen3_dir, beta=0.0)
    return loaded.policy, loaded.processor


def test_family_processor_and_coordinates(qwen3, qwen3_dir):
    model, processor = qwen3
    assert model_family(qwen3_dir) == "qwen3_vl" == model.config.model_type
    assert processor.image_processor.patch_size == 16 and processor.image_processor.merge_size == 2
    assert type(processor).__name__ == "Qwen3VLProcessor"


def test_its_rms_norms_take_the_fast_path_where_the_fused_kernel_is_missing(qwen3):
    """On CPU (no fused RMSNorm kernel) the decoder's norms and each head's query and key norms are ``FastRMSNorm``
    (paddleformers' unfused path spent a profiled step's largest share in ``pow`` and its gradient); the logits
    stay transformers' (tests/test_parity.py)."""
    from paddle_r1.models.rms_norm import FastRMSNorm

    model, _ = qwen3
    text = model.model.language_model
    norms = [text.norm] + [n for layer in text.layers for n in (layer.input_layernorm, layer.post_attention_layernorm,
                                                                layer.self_attn.q_norm, layer.self_attn.k_norm)]
    assert {type(n) for n in norms} == {FastRMSNorm}


def test_its_attention_gives_paddleformers_logits_and_gradients(qwen3, rec_samples):
    """paddle_r1's Qwen3-VL text attention (the qkv product rotated whole, heads moved densely, each head's query and
    key normalised first) against paddleformers' own forward and rotary layer: logits and the qkv and query-norm
    gradients over prompts with images (M-RoPE's axes differ) and left padding."""
    from paddleformers.transformers.qwen3_vl.modeling import (Qwen3VLTextAttention as Theirs,
                                                              Qwen3VLTextRotaryEmbedding as TheirRotary)

    from paddle_r1.models.qwen3_vl import Qwen3VLRotaryTables, Qwen3VLTextAttention

    model, processor = qwen3
    text = model.model.language_model
    prompt, _ = build_prompt_batch(rec_samples[:3], processor, "{Question}")
    inputs = dict(input_ids=prompt.input_ids, attention_mask=prompt.attention_mask,
                  pixel_values=prompt.pixel_values, image_grid_thw=prompt.image_grid_thw)

    def use(rotary, attention):
        text.rotary_emb.__class__ = rotary
        for layer in text.layers:
            layer.self_attn.__class__ = attention

    results = []
    try:
        for classes in ((Qwen3VLRotaryTables, Qwen3VLTextAttention), (TheirRotary, Theirs)):
            use(*classes)
            model.model.rope_deltas = None
            logits = model(**inputs).logits
            (logits * prompt.attention_mask.unsqueeze(-1).astype(logits.dtype)).sum().backward()
            attention = text.layers[0].self_attn
            results.append([logits.numpy(), attention.qkv_proj.weight.grad.numpy().copy(),
                            attention.q_norm.weight.grad.numpy().copy()])
            model.clear_gradients()
    finally:
        use(Qwen3VLRotaryTables, Qwen3VLTextAttention)
    (ours, our_qkv, our_norm), (theirs, their_qkv, their_norm) = results
    np.testing.assert_allclose(ours, theirs, atol=1e-5)
    np.testing.assert_allclose(our_qkv, their_qkv, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(our_norm, their_norm, rtol=1e-4, atol=1e-5)


def test_completion_logprobs_match_its_forward(qwen3, rec_samples):
    """DeepStack features repeated with the prompt's embeddings for its completions, as the forward applies them."""
    assert_completion_logprobs_match_forward(*qwen3, rec_samples)


def test_the_one_token_step_decodes_as_its_layers(qwen3, rec_samples):
    """Qwen3-VL's decoder takes the one-token step: each head's query and key RMS-normalised before the rotation (its
    interleaved M-RoPE tables from its own rotary layer)."""
    model, processor = qwen3
    assert_one_token_step_decodes_as_layers(model, build_prompt_batch(rec_samples[:2], processor, "{Question}")[0])


def test_the_trainer_says_which_decode_step_auto_took(qwen3_dir, rec_samples, tmp_path, capsys):
    config = GRPOConfig(model_name_or_path=qwen3_dir, output_dir=str(tmp_path), num_generations=2,
                        max_completion_length=4, max_steps=1, beta=0.0, use_visualdl=False)
    GRPOTrainer(config, samples=rec_samples)
    assert "rollout engine: one_token\n" in capsys.readouterr().out


def test_deepstack_moves_the_logits(qwen3, rec_samples):
    """Without DeepStack the image tokens' logits differ: the features are really fed to the decoder."""
    from paddle_r1.models.forward import embed_inputs

    model, processor = qwen3
    prompt, _ = build_prompt_batch(rec_samples[:1], processor, "{Question}")
    embeds = embed_inputs(model, prompt.input_ids, prompt.pixel_values, prompt.image_grid_thw)
    assert embeds.deepstack.shape[0] == len(model.config.vision_config.deepstack_visual_indexes)
    with paddle.no_grad():
        model.model.rope_deltas = None
        full = model(input_ids=prompt.input_ids, attention_mask=prompt.attention_mask,
                     pixel_values=prompt.pixel_values, image_grid_thw=prompt.image_grid_thw).logits
        model.model.rope_deltas = None
        plain = model(input_ids=prompt.input_ids, inputs_embeds=embeds.embeds, attention_mask=prompt.attention_mask,
                      image_grid_thw=prompt.image_grid_thw).logits
    assert float((full - plain).abs().max()) > 1e-4


def test_save_pretrained_published_layout(qwen3, qwen3_dir, rec_samples, tmp_path):
    model, processor = qwen3
    saved = str(tmp_path / "saved")
    model.save_pretrained(saved)
    for name in PROCESSOR_FILES:
        shutil.copy(os.path.join(qwen3_dir, name), saved)
    config = json.load(open(os.path.join(saved, "config.json")))
    assert config["model_type"] == "qwen3_vl" and config["text_config"]["hidden_size"] == 64
    reloaded = load_model(saved)
    reloaded.eval()
    prompt, _ = build_prompt_batch(rec_samples[:2], processor, "{Question}")
    with paddle.no_grad():
        for m in (model, reloaded):
            m.model.rope_deltas = None
        want, got = (m(input_ids=prompt.input_ids, attention_mask=prompt.attention_mask,
                       pixel_values=prompt.pixel_values, image_grid_thw=prompt.image_grid_thw).logits.numpy()
                     for m in (model, reloaded))
    np.testing.assert_array_equal(got, want)
    if not os.path.exists(REFERENCE_PYTHON):
        pytest.skip(f"needs transformers 4.57 in its own environment: {REFERENCE_PYTHON} (python3 -m venv "
                    "../refenv-4.57 && ../refenv-4.57/bin/pip install torch==2.13.0 transformers==4.57.1 safetensors "
                    "pillow numpy), or PADDLE_R1_QWEN3_REFERENCE_PYTHON naming another")
    script = ("import sys, torch, transformers\n"
              "m, info = transformers.Qwen3VLForConditionalGeneration.from_pretrained(sys.argv[1], "
              "output_loading_info=True)\n"
              "assert not any(info.values()), info\nprint('loaded')\n")
    done = subprocess.run([REFERENCE_PYTHON, "-c", script, saved], capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert done.returncode == 0 and "loaded" in done.stdout, done.stderr[-2000:]


@pytest.mark.parametrize("extra", [dict(), dict(lora=True, gradient_checkpointing=True, freeze_vision=True)],
                         ids=["full", "lora-recompute-frozen-vision"])
def test_grpo_steps_and_exact_resume(qwen3_dir, rec_samples, tmp_path, extra):
    def run(out, **kw):
        config = GRPOConfig(model_name_or_path=qwen3_dir, output_dir=str(out), num_generations=2,
                            per_device_train_batch_size=4, max_completion_length=6, learning_rate=5e-3, save_steps=1,
                            reward_funcs=["reward_helpers:short_reward", "iou"], use_visualdl=False, disable_tqdm=True,
                            seed=7, beta=0.04, **extra, **kw)
        trainer = GRPOTrainer(config, samples=rec_samples)
        assert trainer.coord_system == "rel_1000"
        result = trainer.train()
        return result, {k: v.numpy().copy() for k, v in trainer.policy.state_dict().items()}

    straight, weights = run(tmp_path / "straight", max_steps=2)
    assert straight["history"][0]["grad_norm"] > 0
    resumed, resumed_weights = run(tmp_path / "resumed", max_steps=2,
                                   resume_from_checkpoint=str(tmp_path / "straight" / "checkpoint-1"))
    assert [h["loss"] for h in resumed["history"]][-1] == pytest.approx(straight["history"][-1]["loss"], rel=1e-5)
    for key, value in weights.items():
        np.testing.assert_allclose(resumed_weights[key], value, rtol=1e-5, atol=1e-6, err_msg=key)


def test_moe_refused_with_the_reason(tmp_path, capsys):
    folder = tmp_path / "moe"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen3_vl_moe"}))
    with pytest.raises(ConfigError, match="qwen3_vl_moe .* is not supported yet: .*paddlefleet"):
        load_model(str(folder))
    from paddle_r1.cli import main

    assert main(["make-tiny-model", str(tmp_path / "tiny3"), "--family", "qwen3_vl"]) == 0
    assert model_family(str(tmp_path / "tiny3")) == "qwen3_vl"
