"""Data parallel and stage-1 sharding on CPU: 2 processes over gloo equal one process over the same global batch."""
import os

import numpy as np
import paddle
import paddle.distributed as dist
import pytest

from dp_worker import train_and_dump


def _settings(model_dir, data, out, prompts, **extra):
    return {**dict(model_name_or_path=model_dir, data_path=data, output_dir=str(out),
                   reward_funcs=["reward_helpers:short_reward", "iou"], num_generations=3,
                   per_device_train_batch_size=3 * prompts, max_completion_length=6, learning_rate=5e-3, max_steps=2,
                   save_steps=100, use_visualdl=False, disable_tqdm=True, seed=11, beta=0.02, loss_type="grpo",
                   max_grad_norm=0.5, eval_steps=2, eval_data_path=data, eval_sample_num=5,
                   eval_reward="reward_helpers:short_reward"), **extra}


@pytest.fixture(scope="module")
def single(tmp_path_factory, tiny_model_dir, rec_jsonl):
    """One process over the global batch of 2 prompts: the run both 2-rank runs must equal."""
    out = tmp_path_factory.mktemp("single")
    train_and_dump(_settings(tiny_model_dir, rec_jsonl, out / "run", prompts=2), str(out))
    return out


def _two_ranks(tmp_path, tiny_model_dir, rec_jsonl, **extra):
    dist.spawn(train_and_dump, args=(_settings(tiny_model_dir, rec_jsonl, tmp_path / "run", prompts=1, **extra),
                                     str(tmp_path)), nprocs=2, backend="gloo")
    return tmp_path


def _assert_same_training(double, single, tiny_model_dir):
    one = np.load(single / "rank0.npz")
    rank0, rank1 = np.load(double / "rank0.npz"), np.load(double / "rank1.npz")
    from paddle_r1.models.loading import load_model

    initial = {k: v.numpy() for k, v in load_model(tiny_model_dir).state_dict().items()}
    moved = max(float(np.abs(one[k] - initial[k]).max()) for k in one.files)
    assert moved > 5e-3  # two Adam steps at lr 5e-3: the comparison below is far tighter than the change
    for key in one.files:
        np.testing.assert_array_equal(rank0[key], rank1[key], err_msg=f"ranks differ: {key}")
        # float tolerance: summation order differs (padding, all-reduce); Adam's 1/sqrt(v) magnifies it for
        # near-zero gradients, so a few elements differ by ~1e-5 on a 5e-3 step
        np.testing.assert_allclose(rank0[key], one[key], rtol=1e-4, atol=5e-5, err_msg=key)
    # the rewards, gradient norms and held-out scores (each rank answering its own slice of the held-out set)
    # logged by rank 0 cover both ranks: they equal the single process's
    for name in ("rewards", "grad_norms", "eval_scores"):
        np.testing.assert_allclose(np.load(double / f"rank0_{name}.npy"), np.load(single / f"rank0_{name}.npy"),
                                   rtol=1e-4, err_msg=name)
    assert (np.load(single / "rank0_grad_norms.npy") > 0.5).any()  # clipping (max_grad_norm 0.5) was exercised
    assert os.path.isdir(double / "run" / "checkpoint-2") and os.path.isfile(double / "run" / "metrics.jsonl")


@pytest.mark.timeout(600)
def test_two_ranks_equal_one_process_over_the_same_global_batch(tmp_path, single, tiny_model_dir, rec_jsonl):
    double = _two_ranks(tmp_path, tiny_model_dir, rec_jsonl)
    _assert_same_training(double, single, tiny_model_dir)
    assert os.listdir(double / "run" / "checkpoint-2").count("optimizer.pdopt") == 1


def _moments(state: dict) -> dict:
    return {k: np.asarray(v) for k, v in state.items() if k.endswith(("_moment1_0", "_moment2_0"))}


@pytest.mark.timeout(600)
def test_stage1_sharding_splits_the_optimizer_state_and_trains_the_same(tmp_path, single, tiny_model_dir,
                                                                        rec_jsonl):
    double = _two_ranks(tmp_path, tiny_model_dir, rec_jsonl, sharding="stage1")
    _assert_same_training(double, single, tiny_model_dir)

    checkpoint = double / "run" / "checkpoint-2"
    assert not (checkpoint / "optimizer.pdopt").exists()
    shards = [_moments(paddle.load(str(checkpoint / f"optimizer.shard{r}.pdopt"))) for r in (0, 1)]
    full = _moments(paddle.load(str(single / "run" / "checkpoint-2" / "optimizer.pdopt")))
    # each rank holds the moments of its own weights only: disjoint shares that together are the whole state
    assert shards[0] and shards[1] and not set(shards[0]) & set(shards[1])
    assert set(shards[0]) | set(shards[1]) == set(full)
    sizes = [sum(v.size for v in shard.values()) for shard in shards]
    assert max(sizes) < 0.75 * sum(sizes), sizes  # split roughly evenly, not all on one rank
    # the merged shards are the single process's state (read back as a resume on any number of ranks reads it)
    from paddle_r1.trainer.checkpoint import read_optimizer_state

    merged = _moments(read_optimizer_state(str(checkpoint)))
    for key, value in full.items():
        np.testing.assert_allclose(merged[key], value, rtol=1e-3, atol=1e-7, err_msg=key)


@pytest.mark.timeout(600)
def test_one_process_resumes_a_sharded_checkpoint(tmp_path, single, tiny_model_dir, rec_jsonl):
    double = _two_ranks(tmp_path, tiny_model_dir, rec_jsonl, sharding="stage1", save_steps=1)
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    train_and_dump(_settings(tiny_model_dir, rec_jsonl, double / "run", prompts=2, sharding="stage1",
                             resume_from_checkpoint=str(double / "run" / "checkpoint-1")), str(resumed))
    one = np.load(single / "rank0.npz")
    after = np.load(resumed / "rank0.npz")
    for key in one.files:  # step 2 from the merged shards of step 1 == the single process's step 2
        np.testing.assert_allclose(after[key], one[key], rtol=1e-4, atol=5e-5, err_msg=key)
