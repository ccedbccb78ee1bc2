"""Clips on 2 real gloo ranks: GRPO on Charades rows, plain, with T-GRPO (whose shuffled-frame completions sample
from (seed, step, prompt)) and with AdamW's state split over the ranks (sharding stage 1), gives the weights one
process gives on the same global batch."""
import json

import numpy as np
import pytest

from dp_worker import train_each_and_dump
from forked_ranks import spawn_ranks
from test_video import write_clip


@pytest.fixture(scope="module")
def video_ranks(tmp_path_factory, tiny_model_dir):
    out = tmp_path_factory.mktemp("video_ranks")
    clips = [write_clip(out / f"v{i}.mp4", count=8 + 4 * i, fps=4) for i in range(2)]
    rows = [{"video": clips[i % 2], "duration": 2.0 + i % 2, "timestamp": [0.25 * i, 1.5 + 0.25 * i],
             "sentence": f"event {i}"} for i in range(4)]
    data = out / "charades.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows))

    def job(name, per_device, **kw):
        settings = dict(model_name_or_path=tiny_model_dir, output_dir=str(out / name / "run"), data_path=str(data),
                        num_generations=2, per_device_train_batch_size=per_device,
                        reward_funcs=["reward_helpers:short_reward", "temporal_iou"], max_completion_length=6,
                        learning_rate=5e-3, max_steps=2, save_steps=100, use_visualdl=False, disable_tqdm=True,
                        seed=4, beta=0.0, temperature=1.5, video_min_pixels=56 * 56, video_max_pixels=56 * 56, **kw)
        return settings, str(out / name)

    t_grpo = dict(temporal_grpo=True, temporal_grpo_ratio=1.0)
    jobs = [job("plain", 2), job("t_grpo", 2, **t_grpo), job("stage1", 2, sharding="stage1")]
    spawn_ranks(train_each_and_dump, args=(jobs,))
    train_each_and_dump([job("plain_one", 4), job("t_grpo_one", 4, **t_grpo)])
    return out


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name, one", [("plain", "plain_one"), ("t_grpo", "t_grpo_one"), ("stage1", "plain_one")])
def test_two_ranks_train_on_clips_as_one_process(video_ranks, name, one):
    reference = video_ranks / one
    one = np.load(reference / "rank0.npz")
    for rank in range(2):
        got = np.load(video_ranks / name / f"rank{rank}.npz")
        for key in one.files:
            np.testing.assert_allclose(got[key], one[key], rtol=1e-4, atol=1e-4, err_msg=f"rank {rank}: {key}")
    np.testing.assert_allclose(np.load(video_ranks / name / "rank0_rewards.npy"),
                               np.load(reference / "rank0_rewards.npy"), rtol=1e-5)


def test_the_bonus_changed_the_run(video_ranks):
    """T-GRPO's run is not the plain one: its rewards carry the bonus (the option reaches the ranks)."""
    plain = np.load(video_ranks / "plain" / "rank0_rewards.npy")
    bonus = np.load(video_ranks / "t_grpo" / "rank0_rewards.npy")
    assert (bonus > plain + 1e-3).any()
