"""Data parallel and stage-1 sharding on CPU: 2 processes over gloo equal one process over the same global batch;
the overlapping gradient reducer equals averaging each gradient after the backward."""
import json
import os

import numpy as np
import paddle
import paddle.distributed as dist
import pytest

from dp_worker import reduce_and_dump, train_and_dump


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


def _reducer_counts(double) -> list[dict]:
    return [json.load(open(double / f"rank{r}_reducer.json")) for r in (0, 1)]


@pytest.mark.timeout(600)
def test_two_ranks_equal_one_process_over_the_same_global_batch(tmp_path, single, tiny_model_dir, rec_jsonl):
    double = _two_ranks(tmp_path, tiny_model_dir, rec_jsonl)
    _assert_same_training(double, single, tiny_model_dir)
    assert os.listdir(double / "run" / "checkpoint-2").count("optimizer.pdopt") == 1
    # the tiny model's gradients fit one 32 MB bucket, launched from the backward in both steps; the LM head's
    # is reduced after it
    for counts in _reducer_counts(double):
        assert counts == {"buckets": 2, "after_backward": 1, "launched_in_backward": 2, "late_gradients": 0}


# gradient accumulation (only the last micro-batch's backward launches buckets), the LM head in recomputed
# log-prob chunks (4 tokens; a rank has 3 x 6), every decoder and vision block recomputed, and small buckets so
# that there are many to launch while the backward runs
ACCUMULATING = dict(gradient_accumulation_steps=2, logprob_chunk_size=4, gradient_checkpointing=True)


@pytest.fixture(scope="module")
def single_accumulating(tmp_path_factory, tiny_model_dir, rec_jsonl):
    out = tmp_path_factory.mktemp("single_accumulating")
    train_and_dump(_settings(tiny_model_dir, rec_jsonl, out / "run", prompts=2, **ACCUMULATING), str(out))
    return out


@pytest.mark.timeout(600)
def test_gradients_reduced_during_the_backward_train_as_one_process(tmp_path, single_accumulating, tiny_model_dir,
                                                                     rec_jsonl):
    double = _two_ranks(tmp_path, tiny_model_dir, rec_jsonl, bucket_bytes=4096, **ACCUMULATING)
    _assert_same_training(double, single_accumulating, tiny_model_dir)
    for counts in _reducer_counts(double):
        # every bucket but the LM head's was launched from a hook of the last backward, in both steps, and no
        # gradient arrived after its bucket left
        assert counts["buckets"] > 20 and counts["after_backward"] == 1, counts
        assert counts["launched_in_backward"] == 2 * (counts["buckets"] - 1), counts
        assert counts["late_gradients"] == 0, counts


@pytest.mark.timeout(300)
def test_late_and_missing_gradients_are_reduced_like_after_the_backward(tmp_path):
    """The reducer against averaging each finished gradient after the backward, on a small model whose ranks
    differ (``dp_worker.reduce_and_dump``): a layer not declared repeated runs in 3 recomputed chunks on rank 0
    and once on rank 1, a layer has a gradient on rank 0 only, one has none anywhere."""
    dist.spawn(reduce_and_dump, args=(str(tmp_path),), nprocs=2, backend="gloo")
    ranks = [json.load(open(tmp_path / f"rank{r}_reducer.json")) for r in (0, 1)]
    for rank, report in enumerate(ranks):
        first, second = report["steps"]
        # step 1: the shared layer's bucket left after its first chunk; its other two chunks (weight and bias
        # each) were kept aside and averaged on their own: equal up to rounding, nothing lost
        assert first["late_gradients"] == (4 if rank == 0 else 0)
        assert first["bitwise_differ"] in ([], ["shared.weight", "shared.bias"]) and first["max_abs_diff"] < 1e-5
        # a gradient on one rank only is averaged with zeros on the other; none anywhere stays none
        for step in (first, second):
            assert step["missing"] == [] and step["none"] == ["unused.weight", "unused.bias"]
        # both ranks then leave the repeated and the gradient-less buckets for after the backward, and step 2
        # is exact, though rank 1 (no vision gradient) launches fewer buckets from its backward than rank 0
        assert first["after_backward"] == second["after_backward"] == sorted(
            f"{layer}.{p}" for layer in ("head", "shared", "unused") for p in ("weight", "bias"))
        assert second["bitwise_differ"] == [] and second["late_gradients"] == first["late_gradients"]
    launched = [r["steps"][1]["launched_in_backward"] - r["steps"][0]["launched_in_backward"] for r in ranks]
    assert launched == [5, 2], launched


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


@pytest.mark.timeout(600)
def test_stage1_undoes_a_non_finite_update_on_every_rank(tmp_path, tiny_model_dir, rec_jsonl):
    """Each rank updates only its share of the weights and broadcasts it: the verdict on the new weights is agreed
    over ranks, each owner puts back its weights and AdamW state, and the restored weights are broadcast again
    (learning_rate 1e39: finite loss and gradient norm, an infinite update)."""
    double = _two_ranks(tmp_path, tiny_model_dir, rec_jsonl, sharding="stage1", learning_rate=1e39, eval_steps=0,
                        max_skipped_steps=5)
    from paddle_r1.models.loading import load_model

    initial = {k: v.numpy() for k, v in load_model(tiny_model_dir).state_dict().items()}
    for rank in (0, 1):
        assert np.isfinite(np.load(double / f"rank{rank}_grad_norms.npy")).all()
        np.testing.assert_array_equal(np.load(double / f"rank{rank}_skipped.npy"), [1, 2])
        weights = np.load(double / f"rank{rank}.npz")
        for key, value in initial.items():
            np.testing.assert_array_equal(weights[key], value, err_msg=f"rank {rank}: {key}")
    # each rank's share of the AdamW state is as before any step: zero moments, beta powers not yet multiplied
    checkpoint = double / "run" / "checkpoint-2"
    for rank in (0, 1):
        state = paddle.load(str(checkpoint / f"optimizer.shard{rank}.pdopt"))
        assert _moments(state) and all(not np.asarray(v).any() for v in _moments(state).values())
        powers = [float(np.asarray(v)) for k, v in state.items() if k.endswith("_beta1_pow_acc_0")]
        assert powers and set(powers) == {float(np.float32(0.9))}, rank  # adam_beta1, in float32
