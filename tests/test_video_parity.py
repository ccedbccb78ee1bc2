"""Video prompts through paddle_r1 against transformers 4.51.3 on the checkpoints transformers wrote (Qwen2-VL,
Qwen2.5-VL): the processor batch paddle_r1 builds from the frames, the prompt's logits through the rollout's path,
the greedy cached decode after the clip, and the first completion token's log-prob. Qwen3-VL against transformers
5.3.0: its processor sampled, sized and time-stamped the clip's source frames; paddle_r1 reads the same frames.

The golden files (tests/fixtures/parity/<family>/{inputs,reference}_<case>.npz) come from
tests/fixtures/make_video_reference.py, run in its own environment. Negative controls: the same comparison fails when
Qwen2.5-VL's ``second_per_grid_ts`` is dropped (time positions as if the clip were sampled at 2 fps) and when the
video's positions are flattened to text positions; for Qwen3-VL, when the frames' times are written from a wrong
clock, when the positions are flattened and when the clip's DeepStack features are dropped.
"""
import os

import numpy as np
import paddle
import pytest
from PIL import Image

from paddle_r1.algorithms.logprobs import completion_logprobs
from paddle_r1.data.video import Clip
from paddle_r1.generation.encoding import encode_prompts
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



# ---- Qwen3-VL against transformers 5.3.0: frames sampled, sized and stamped with their times by paddle_r1 ----------

QWEN3 = os.path.join(FIXTURES, "qwen3_vl")
QWEN3_CASES = ("video", "video_image", "video_budget")
QWEN3_LOGITS = ("video", "video_image")  # the cases whose frames reach the model unresampled


def qwen3_case(name: str, folder: str, clock: float = 1.0):
    """The Qwen3-VL model and processor, the golden files, and paddle_r1's batch of the clip's source frames,
    written as a folder of PNG frames (lossless) and read at the clip's fps; ``clock``: the frames' times stated
    from a clock that many times as fast (the negative control)."""
    from paddle_r1.data.video import VideoSampling
    from paddle_r1.generation.generator import load_sample_videos

    if "qwen3_vl" not in _loaded:
        checkpoint = os.path.join(QWEN3, "checkpoint")
        _loaded["qwen3_vl"] = load_model(checkpoint).eval(), load_processor(checkpoint)
    model, processor = _loaded["qwen3_vl"]
    inputs = dict(np.load(os.path.join(QWEN3, f"inputs_{name}.npz")))
    os.makedirs(folder, exist_ok=True)
    for i, picture in enumerate(inputs["frames"]):
        Image.fromarray(picture).save(os.path.join(folder, f"{i:03d}.png"))
    clips = load_sample_videos({"videos": [folder]}, VideoSampling(frames_fps=float(inputs["fps"])), processor)
    for clip in clips:
        clip.source_fps *= clock
    images = [Image.fromarray(inputs["image"])] if "image" in inputs else []
    batch, _ = encode_prompts([str(inputs["text"])], [images], processor, [clips])
    return model, processor, batch, inputs


@pytest.mark.parametrize("name", QWEN3_CASES)
def test_qwen3_vl_processor_batch_matches_transformers(name, tmp_path):
    """transformers' processor sampled the source frames itself (2 fps, an odd count padded with the last frame),
    sized them within the clip budget and wrote each frame pair's time as text: paddle_r1's batch from the same
    frames holds the same tokens, grid and pixels."""
    _, processor, batch, inputs = qwen3_case(name, str(tmp_path / "frames"))
    np.testing.assert_array_equal(batch.input_ids.numpy(), inputs["input_ids"])
    np.testing.assert_array_equal(batch.video_grid_thw.numpy(), inputs["video_grid_thw"])
    text = processor.tokenizer.decode(batch.input_ids[0].tolist())
    assert text.count(" seconds>") == int(inputs["video_grid_thw"][0, 0])
    if name in QWEN3_LOGITS:  # unresampled: the same values
        np.testing.assert_allclose(batch.pixel_values_videos.numpy(), inputs["pixel_values_videos"], atol=1e-5)
    else:  # Pillow's bicubic and torchvision's differ by rounding, not by where they sample
        diff = np.abs(batch.pixel_values_videos.numpy() - inputs["pixel_values_videos"])
        print(f"qwen3_vl {name}: resized frames' pixel values, |diff| mean {diff.mean():.2e}, max {diff.max():.2e}")
        assert diff.max() <= 2 / 255 + 1e-6  # at most one level of 255 apart (the values span -1 to 1)
    if "image" in inputs:
        np.testing.assert_allclose(batch.pixel_values.numpy(), inputs["pixel_values"], atol=1e-5)


@pytest.mark.parametrize("name", QWEN3_LOGITS)
def test_qwen3_vl_logits_and_logprobs_match_transformers(name, tmp_path):
    """The prompt's logits, the greedy cached decode after the clip (Qwen3-VL decodes through its own layers), and
    two fixed completions' log-probs (the policy's forward over prompt + completion, DeepStack on the video
    tokens)."""
    from paddle_r1.generation.rollout import Rollout

    model, _, batch, _ = qwen3_case(name, str(tmp_path / "frames"))
    reference = dict(np.load(os.path.join(QWEN3, f"reference_{name}.npz")))
    err = rel_err(prompt_logits(model, batch), reference["logits"])
    print(f"qwen3_vl {name}: max relative error of the logits {err:.2e}")
    assert err <= MAX_REL_ERR
    want = reference["tokens"]
    rollout = sample_completions(model, batch, 2, SamplingParams(len(want), temperature=0.0),
                                 eos_token_ids=[model.config.text_config.eos_token_id],
                                 pad_token_id=model.config.text_config.pad_token_id)
    for row in rollout.completion_ids.numpy():
        np.testing.assert_array_equal(row, want)
    ids = paddle.to_tensor(reference["completion_ids"])
    fixed = Rollout(prompt=batch, num_generations=2, completion_ids=ids,
                    completion_mask=paddle.ones_like(ids, dtype="int32"), truncated=paddle.zeros([2], "bool"))
    logp = completion_logprobs(model, fixed, chunk_size=64).numpy()
    gap = float(np.abs(logp - reference["completion_logprobs"]).max())
    print(f"qwen3_vl {name}: max |log-prob - transformers'| {gap:.2e}")
    assert gap <= 1e-4


def test_qwen3_vl_negative_controls_are_caught(tmp_path):
    """Each of these moves the logits far beyond the tolerance: the frame pairs' times written from a clock twice as
    fast (same tokens count, other digits), the vision positions flattened to text positions, and the clip's
    DeepStack features dropped."""
    reference = dict(np.load(os.path.join(QWEN3, "reference_video.npz")))
    model, _, batch, inputs = qwen3_case("video", str(tmp_path / "wrong_clock"), clock=2.0)
    assert batch.input_ids.shape == list(inputs["input_ids"].shape)
    assert not np.array_equal(batch.input_ids.numpy(), inputs["input_ids"])
    gaps = {"times from a wrong clock": rel_err(prompt_logits(model, batch), reference["logits"])}
    model, _, batch, _ = qwen3_case("video", str(tmp_path / "frames"))
    flat = (paddle.cumsum(batch.attention_mask, axis=-1) - 1).unsqueeze(0).expand([3, -1, -1])
    gaps["text positions"] = rel_err(prompt_logits(model, batch, positions=flat), reference["logits"])
    embeds = batch.embeddings(model)
    with paddle.no_grad():
        out = model(inputs_embeds=embeds.embeds, attention_mask=batch.attention_mask,
                    position_ids=batch.positions(model)[0])
    gaps["no DeepStack"] = rel_err(out.logits[0].numpy(), reference["logits"])
    print("qwen3_vl negative controls, max relative error of the logits:",
          {k: f"{v:.2e}" for k, v in gaps.items()})
    assert all(gap > 100 * MAX_REL_ERR for gap in gaps.values()), gaps
