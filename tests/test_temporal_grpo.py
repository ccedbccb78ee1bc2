"""T-GRPO (Video-R1): each video prompt also answered on shuffled frames; a group whose ordered accuracy p is at least
mu times its shuffled accuracy p~ gets alpha on its correct completions (accuracy > 0.1)."""
import json

import numpy as np
import pytest

from test_video import charades_samples, write_clip

from paddle_r1.algorithms.temporal_bonus import temporal_bonus
from paddle_r1.config.jobs import GRPOConfig
from paddle_r1.data.video import VideoSampling, read_clip, shuffled_frames
from paddle_r1.errors import ConfigError


def video_r1_rule(accuracy: np.ndarray, shuffled: np.ndarray, ratio=0.8, bonus=0.3) -> np.ndarray:
    """Video-R1's lines (src/r1-v/src/open_r1/trainer/grpo_trainer.py, T-GRPO) on one prompt's completions, in numpy:
    acc_mean >= 0.8 * shuffled_acc_mean -> the accuracy column's entries above 0.1 get + 0.3."""
    out = accuracy.copy()
    if accuracy.mean() >= ratio * shuffled.mean():
        out[accuracy > 0.1] += bonus
    return out


@pytest.mark.parametrize("accuracy, shuffled", [
    ([1.0, 0.0, 0.5, 0.05], [0.5, 0.5]),  # p 0.3875 < 0.8 x 0.5: no bonus
    ([1.0, 0.0, 0.5, 0.05], [0.5, 0.0]),  # p >= 0.8 x 0.25: 1.0 and 0.5 get it, 0.05 not (not above 0.1)
    ([0.0, 0.0, 0.0, 0.0], [0.0, 0.0]),  # p 0 >= 0: earned, but no completion is correct
    ([0.2, 0.1, 0.11, 1.0], [1.0, 1.0]),  # 0.1 is not above 0.1
])
def test_the_bonus_is_video_r1s(accuracy, shuffled):
    accuracy, shuffled = np.array(accuracy), np.array(shuffled)
    scores = np.stack([accuracy, np.ones(4)], axis=1)
    rewards = scores @ np.array([2.0, 1.0])
    ordered, earned = temporal_bonus(scores, rewards, np.array([shuffled.mean()]), 4, 0.8, 0.3, 2.0)
    want = video_r1_rule(accuracy, shuffled)
    np.testing.assert_allclose(scores[:, 0], want)
    np.testing.assert_allclose(rewards, 2.0 * want + 1.0)  # the weighted sum of the columns, bonus included
    assert ordered == pytest.approx([accuracy.mean()]) and earned.tolist() == [accuracy.mean() >= 0.8 * shuffled.mean()]


def test_rows_without_a_clip_and_missing_scores():
    """A prompt without a clip (p~ NaN) is left as it is; an accuracy that does not apply (NaN) counts as 0."""
    scores = np.array([[1.0], [np.nan], [1.0], [1.0]])
    rewards = np.array([1.0, 0.0, 1.0, 1.0])
    ordered, earned = temporal_bonus(scores, rewards, np.array([np.nan, 0.0]), 2, 0.8, 0.3, 1.0)
    np.testing.assert_allclose(rewards, [1.0, 0.0, 1.3, 1.3])
    assert ordered.tolist() == [1.0] and earned.tolist() == [True]


def test_shuffled_frames_are_the_clips_frames_in_another_order(tmp_path):
    clip = read_clip(write_clip(tmp_path / "a.mp4", count=16, fps=8), VideoSampling(min_pixels=56 * 56,
                                                                                   max_pixels=56 * 56))
    shuffled = shuffled_frames(clip, np.random.default_rng(0))
    levels = [int(f[..., 0].mean()) for f in clip.frames]
    moved = [int(f[..., 0].mean()) for f in shuffled.frames]
    assert sorted(moved) == sorted(levels) and moved != levels
    assert (shuffled.fps, shuffled.duration, shuffled.indices) == (clip.fps, clip.duration, clip.indices)


def test_config_rules(tiny_model_dir, tmp_path):
    common = dict(model_name_or_path=tiny_model_dir, output_dir=str(tmp_path), temporal_grpo=True)
    assert GRPOConfig(**common, num_generations=4).shuffled_generations == 2
    assert GRPOConfig(**common, num_generations=4, temporal_grpo_generations=3).shuffled_generations == 3
    with pytest.raises(ConfigError, match="whole groups"):
        GRPOConfig(**common, num_generations=4, per_device_train_batch_size=2)
    with pytest.raises(ConfigError, match="dynamic_sampling"):
        GRPOConfig(**common, num_generations=4, dynamic_sampling=True)


def run(tiny_model_dir, tmp_path, name, prompts=4, **keys) -> tuple[list[dict], dict]:
    from paddle_r1.trainer.grpo import GRPOTrainer

    out = tmp_path / name
    config = GRPOConfig(model_name_or_path=tiny_model_dir, output_dir=str(out), num_generations=4,
                        reward_funcs=["reward_helpers:short_reward"], reward_weights=[2.0],
                        per_device_train_batch_size=4 * prompts, max_completion_length=6, max_steps=1, save_steps=100,
                        use_visualdl=False, disable_tqdm=True, seed=5, beta=0.0, video_min_pixels=56 * 56,
                        video_max_pixels=56 * 56, **keys)
    GRPOTrainer(config, samples=charades_samples(tmp_path, count=prompts)).train()
    rows = [json.loads(line) for line in open(out / "completions.jsonl")]
    return rows, json.loads(open(out / "metrics.jsonl").readline())


def test_a_run_adds_the_bonus_to_the_groups_that_earn_it(tiny_model_dir, tmp_path):
    """The same step with and without T-GRPO (mu 1: a group earns it when its ordered completions score at least
    its shuffled ones): the completions are the same, a group's rewards move by w_0 x alpha (2 x 0.3) or not at
    all, both happen, and the logged figures are the groups'; a higher mu leaves fewer groups earning it."""
    plain, _ = run(tiny_model_dir, tmp_path, "plain")
    rows, metrics = run(tiny_model_dir, tmp_path, "t_grpo", temporal_grpo=True, temporal_grpo_ratio=1.0)
    assert [r["completion"] for r in rows] == [r["completion"] for r in plain]
    moved = [round(r["reward"] - p["reward"], 6) for r, p in zip(rows, plain)]
    groups = [set(moved[i:i + 4]) for i in range(0, len(moved), 4)]
    assert all(len(g) == 1 for g in groups) and {min(g) for g in groups} == {0.0, 0.6}, moved
    earned = [m == 0.6 for m in moved[::4]]
    assert metrics["temporal/bonus_groups"] == pytest.approx(np.mean(earned))
    accuracy = [p["reward/reward_helpers:short_reward"] for p in plain]
    assert metrics["temporal/ordered_accuracy"] == pytest.approx(np.mean(accuracy), abs=1e-6)
    assert 0 < metrics["temporal/shuffled_accuracy"] <= 1
    stricter, _ = run(tiny_model_dir, tmp_path, "stricter", temporal_grpo=True, temporal_grpo_ratio=1.01)
    earned_stricter = [round(r["reward"] - p["reward"], 6) == 0.6 for r, p in zip(stricter[::4], plain[::4])]
    assert sum(earned_stricter) < sum(earned) and all(e for e, s in zip(earned, earned_stricter) if s)
