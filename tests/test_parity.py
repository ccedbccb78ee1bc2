"""Paddle models against Hugging Face transformers (PyTorch, CPU, float32) on the same inputs: 4.51.3 for
Qwen2-VL and Qwen2.5-VL, 4.57.1 for Qwen3-VL.

The golden files in tests/fixtures/parity/<family>/ come from tests/fixtures/make_reference.py, run in its
own environment: a tiny checkpoint in the published layout (bfloat16 weights), transformers' processor
output for a prompt with one image (Qwen3-VL also a text-only and a two-image prompt), the prompt's logits and
the greedy completion. Here the checkpoint is loaded through paddle_r1's loader exactly as a downloaded one.
"""
import os

import numpy as np
import paddle
import pytest

from paddle_r1.models.forward import embed_inputs, rope_positions
from paddle_r1.models.loading import load_model, load_processor, model_family
from paddle_r1.generation.rollout import PromptBatch, SamplingParams, sample_completions

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "parity")
# (family, case): the case names the fixture files' suffix ("" for the one-image prompt)
CASES = [("qwen2_vl", ""), ("qwen2_5_vl", ""), ("qwen3_vl", ""), ("qwen3_vl", "text"), ("qwen3_vl", "two_images")]
MAX_REL_ERR = 1e-5
_models = {}


def rel_err(got, want) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


@pytest.fixture(scope="module", params=CASES, ids=lambda c: "-".join(filter(None, c)))
def case(request):
    family, name = request.param
    folder = os.path.join(FIXTURES, family)
    checkpoint = os.path.join(folder, "checkpoint")
    suffix = f"_{name}" if name else ""
    inputs = dict(np.load(os.path.join(folder, f"inputs{suffix}.npz")))
    reference = dict(np.load(os.path.join(folder, f"reference{suffix}.npz")))
    if family not in _models:  # one load per family for all its cases
        _models[family] = load_model(checkpoint)
        _models[family].eval()
    return family, checkpoint, _models[family], inputs, reference


def _optional(inputs, key):
    return paddle.to_tensor(inputs[key]) if key in inputs else None


def _batch(inputs) -> PromptBatch:
    return PromptBatch(input_ids=paddle.to_tensor(inputs["input_ids"]),
                       attention_mask=paddle.to_tensor(inputs["attention_mask"]),
                       pixel_values=_optional(inputs, "pixel_values"),
                       image_grid_thw=_optional(inputs, "image_grid_thw"))


def test_family_from_config(case):
    family, checkpoint, model, _, _ = case
    assert model_family(checkpoint) == family == model.config.model_type


@paddle.no_grad()
def test_logits_match_transformers(case):
    family, _, model, inputs, reference = case
    batch = _batch(inputs)
    model.model.rope_deltas = None
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                   pixel_values=batch.pixel_values, image_grid_thw=batch.image_grid_thw).logits[0].numpy()
    assert logits.shape == reference["logits"].shape
    err = rel_err(logits, reference["logits"])
    print(f"{family} {int(batch.image_grid_thw is not None and batch.image_grid_thw.shape[0])} image(s): "
          f"max relative error of the logits {err:.2e}")
    assert err <= MAX_REL_ERR


@paddle.no_grad()
def test_rollout_path_logits_match_transformers(case):
    """The pieces rollout and log-probs use: embeddings computed once, explicit M-RoPE positions."""
    _, _, model, inputs, reference = case
    batch = _batch(inputs)
    embeds = embed_inputs(model, batch.input_ids, batch.pixel_values, batch.image_grid_thw)
    positions, _ = rope_positions(model, batch.input_ids, batch.attention_mask, batch.image_grid_thw)
    logits = model(**embeds.model_inputs(), attention_mask=batch.attention_mask, position_ids=positions).logits[0]
    assert rel_err(logits.numpy(), reference["logits"]) <= MAX_REL_ERR


def test_greedy_tokens_match_transformers(case):
    _, _, model, inputs, reference = case
    want = reference["tokens"]  # transformers' generate stops after an EOS, as the rollout does
    rollout = sample_completions(model, _batch(inputs), 1, SamplingParams(len(want), temperature=0.0),
                                 eos_token_ids=[model.config.eos_token_id], pad_token_id=model.config.pad_token_id)
    np.testing.assert_array_equal(rollout.completion_ids.numpy()[0], want)


@paddle.no_grad()
def test_paddleformers_generate_matches_transformers(case):
    """The generation glue the Paddle models inherit from paddleformers' Qwen2.5-VL."""
    _, _, model, inputs, reference = case
    batch = _batch(inputs)
    model.model.rope_deltas = None
    tokens, _ = model.generate(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                               pixel_values=batch.pixel_values, image_grid_thw=batch.image_grid_thw,
                               max_new_tokens=len(reference["tokens"]), decode_strategy="greedy_search")
    np.testing.assert_array_equal(tokens.numpy()[0], reference["tokens"])


def test_processor_matches_transformers(case):
    """paddleformers' processor, loaded from the folder, turns the same image and text into the same inputs."""
    _, checkpoint, _, inputs, _ = case
    processor = load_processor(checkpoint)
    images = [inputs[key] for key in ("image", "image1") if key in inputs]
    got = processor(text=[str(inputs["text"])], images=images or None, return_tensors="pd")
    np.testing.assert_array_equal(got["input_ids"].numpy(), inputs["input_ids"])
    if images:
        np.testing.assert_array_equal(got["image_grid_thw"].numpy(), inputs["image_grid_thw"])
        np.testing.assert_allclose(got["pixel_values"].numpy(), inputs["pixel_values"], atol=1e-5)
