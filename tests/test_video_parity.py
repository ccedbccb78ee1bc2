"""Video prompts through paddle_r1 against transformers 4.51.3 on the checkpoints transformers wrote (Qwen2-VL,
Qwen2.5-VL): the processor batch paddle_r1 builds from the frames, the prompt's logits through the rollout's path,
the greedy cached decode after the clip, and the first completion token's log-prob.

The golden files (tests/fixtures/parity/<family>/{inputs,reference}_<case>.npz) come from
tests/fixtures/make_video_reference.py, run in its own environment. Negative controls: the same comparison fails when
Qwen2.5-VL's ``second_per_grid_ts`` is dropped (time positions as if the clip were sampled at 2 fps) and when the
video's positions are flattened to text positions.
"""
import os

import numpy as np
import paddle
import pytest
from PIL import Image

from paddle_r1.algorithms.logprobs import completion_logprobs
from paddle_r1.data.video import Clip
from paddle_r1.generation.generator import encode_prompts
from paddle_r1.generation.rollout import SamplingParams, sample_completions
from paddle_r1.models.loading import load_model, load_processor

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "parity")
CASES = [(family, case) for family in ("qwen2_vl", "qwen2_5_vl") for case in ("video", "video_image")]
MAX_REL_ERR = 1e-5
_loaded = {}


def rel_err(got, want) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


@pytest.fixture(scope="module", params=CASES, ids=lambda c: "-".join(c))
def case(request):
    return load_case(*request.param)


def load_case(family: str, name: str):
    """The family's model and processor (loaded once), the golden files, and paddle_r1's batch of the frames."""
    folder = os.path.join(FIXTURES, family)
    if family not in _loaded:
        checkpoint = os.path.join(folder, "checkpoint")
        model = load_model(checkpoint)
        model.eval()
        _loaded[family] = model, load_processor(checkpoint)
    model, processor = _loaded[family]
    inputs = dict(np.load(os.path.join(folder, f"inputs_{name}.npz")))
    reference = dict(np.load(os.path.join(folder, f"reference_{name}.npz")))
    clip = Clip(frames=inputs["frames"], fps=float(inputs["fps"]), size=(56, 56), duration=0.0)
    images = [Image.fromarray(inputs["image"])] if "image" in inputs else []
    batch, _ = encode_prompts([str(inputs["text"])], [images], processor, [[clip]])
    return family, model, batch, inputs, reference


@paddle.no_grad()
def prompt_logits(model, batch, positions=None) -> np.ndarray:
    """The prompt's logits through the rollout's pieces: embeddings once, explicit M-RoPE positions."""
    positions = batch.positions(model)[0] if positions is None else positions
    out = model(**batch.embeddings(model).model_inputs(), attention_mask=batch.attention_mask, position_ids=positions)
    return out.logits[0].numpy()


def test_processor_batch_matches_transformers(case):
    family, _, batch, inputs, _ = case
    np.testing.assert_array_equal(batch.input_ids.numpy(), inputs["input_ids"])
    np.testing.assert_array_equal(batch.video_grid_thw.numpy(), inputs["video_grid_thw"])
    np.testing.assert_allclose(batch.pixel_values_videos.numpy(), inputs["pixel_values_videos"], atol=1e-5)
    if "second_per_grid_ts" in inputs:  # Qwen2.5-VL's processor writes it; Qwen2-VL's has none
        np.testing.assert_allclose(batch.second_per_grid_ts.numpy(), inputs["second_per_grid_ts"], rtol=1e-6)
    if "image" in inputs:
        np.testing.assert_allclose(batch.pixel_values.numpy(), inputs["pixel_values"], atol=1e-5)


def test_logits_match_transformers(case):
    family, model, batch, _, reference = case
    err = rel_err(prompt_logits(model, batch), reference["logits"])
    print(f"{family}: max relative error of the logits on a video prompt {err:.2e}")
    assert err <= MAX_REL_ERR


def test_greedy_decode_after_the_clip_matches_transformers(case):
    """The cached decode's positions continue after the clip's (and the image's) largest position."""
    _, model, batch, _, reference = case
    want = reference["tokens"]
    rollout = sample_completions(model, batch, 2, SamplingParams(len(want), temperature=0.0),
                                 eos_token_ids=[model.config.eos_token_id], pad_token_id=model.config.pad_token_id)
    for row in rollout.completion_ids.numpy():
        np.testing.assert_array_equal(row, want)
    # log-probs re-embed the prompt: the first token's equals log-softmax of transformers' last prompt logits
    logp = completion_logprobs(model, rollout, chunk_size=64).numpy()
    last = reference["logits"][-1].astype("float64")
    want_logp = last[want[0]] - (last.max() + np.log(np.exp(last - last.max()).sum()))
    np.testing.assert_allclose(logp[:, 0], want_logp, atol=1e-4)


def test_dropped_time_positions_are_caught():
    """Negative controls on Qwen2.5-VL's 1-fps clip: its time positions step 4 per frame pair; without
    ``second_per_grid_ts`` they would step 2, and as plain text positions 1. Both differ from transformers'."""
    _, model, batch, _, reference = load_case("qwen2_5_vl", "video")
    seconds = batch.second_per_grid_ts
    try:
        batch.second_per_grid_ts = None
        assert rel_err(prompt_logits(model, batch), reference["logits"]) > 100 * MAX_REL_ERR
    finally:
        batch.second_per_grid_ts = seconds
    mask = batch.attention_mask
    flat = (paddle.cumsum(mask, axis=-1) - 1).unsqueeze(0).expand([3, -1, -1])
    assert rel_err(prompt_logits(model, batch, positions=flat), reference["logits"]) > 100 * MAX_REL_ERR

