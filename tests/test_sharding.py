"""Sharding: clipping by a global norm, the stages a config may name, and float16's loss scaler over ranks (an
overflow on one rank: 2 gloo ranks, and stage 2's step in one process). (2-process stage-1 training is in
test_distributed.py.)"""
import json

import numpy as np
import paddle
import pytest

from paddle_r1.config.jobs import GRPOConfig
from paddle_r1.errors import ConfigError
from paddle_r1.parallel.sharding import clip_by_global_norm


def _layer_with_grads(seed: int):
    paddle.seed(seed)
    layer = paddle.nn.Sequential(paddle.nn.Linear(6, 5), paddle.nn.Linear(5, 3))
    x = paddle.to_tensor(np.random.default_rng(seed).normal(size=(4, 6)).astype("float32"))
    (layer(x) ** 2).sum().backward()
    return layer


@pytest.mark.parametrize("max_norm", [0.05, 1e6])
def test_clip_by_global_norm_is_paddles_clip(max_norm):
    ours, theirs = _layer_with_grads(3), _layer_with_grads(3)
    expected_norm = np.sqrt(sum(float((p.grad ** 2).sum()) for p in theirs.parameters()))
    norm = clip_by_global_norm(ours.parameters(), max_norm)
    assert norm == pytest.approx(expected_norm, rel=1e-6)
    paddle.optimizer.SGD(learning_rate=1.0, parameters=ours.parameters()).step()
    paddle.optimizer.SGD(learning_rate=1.0, parameters=theirs.parameters(),
                         grad_clip=paddle.nn.ClipGradByGlobalNorm(max_norm)).step()
    for a, b in zip(ours.parameters(), theirs.parameters()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-7)


def test_unknown_stage_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match="'sharding'.*stage3"):
        GRPOConfig(model_name_or_path="m", sharding="stage3")


def test_stage2_on_cpu_is_refused_before_loading(rec_jsonl):
    from paddle_r1.trainer.grpo import GRPOTrainer

    config = GRPOConfig(model_name_or_path="/nonexistent/model", data_path=rec_jsonl, device="cpu", sharding="stage2")
    with pytest.raises(ConfigError, match="stage2.*GPU/XPU only; on CPU use stage1"):
        GRPOTrainer(config)


def test_gradients_are_reduced_in_bounded_buckets_of_one_dtype():
    import paddle

    from paddle_r1.parallel.distributed import gradient_buckets

    grads = [paddle.zeros([256], dtype="float32"), paddle.zeros([256], dtype="float32"),
             paddle.zeros([1024], dtype="float32"), paddle.zeros([8], dtype="bfloat16"), paddle.zeros([8])]
    buckets = gradient_buckets(grads, bucket_bytes=2048)
    assert buckets == [[0, 1], [2], [3], [4]]
    assert [grads[b[0]].dtype for b in buckets][2:] == [paddle.bfloat16, paddle.float32]


def test_an_overflow_on_one_rank_is_skipped_by_every_rank_at_the_same_lowered_scale(tmp_path):
    """``selftest.overflow``: 3 steps on 2 gloo ranks with a GradScaler (float32 weights: Paddle's CPU build runs its
    kernels), the middle one with an infinite gradient on rank 1 only (under stage 1 after the reduce, in its own
    share: what NCCL's reduce leaves a float16 overflow in the sum)."""
    from dp_worker import overflow_each
    from forked_ranks import spawn_ranks

    stages = ["stage1", ""]
    spawn_ranks(overflow_each, args=(stages, "float32", str(tmp_path)))
    for stage in stages:
        ranks = [json.load(open(tmp_path / (stage or "replicated") / f"rank{r}.json"))["steps"] for r in range(2)]
        assert [[s["applied"] for s in steps] for steps in ranks] == [[True, False, True]] * 2, stage
        assert [[s["scale"] for s in steps] for steps in ranks] == [[2.0**15, 2.0**14, 2.0**14]] * 2, stage
        weights = [[s["weights"] for s in steps] for steps in ranks]
        assert weights[0] == weights[1], stage  # every rank holds the same weights after every step
        assert weights[0][1] == weights[0][0] != weights[0][2], stage  # the overflowing step changed none


def test_a_step_the_scaler_skipped_is_not_reported_as_applied():
    """Stage 2's step (``scaler.step`` then the guard) in one process with a real GradScaler: its update class runs
    here with a plain AdamW; Paddle's group-sharded wrapper and scaler run on GPU/XPU only."""
    from paddle_r1.models.precision import choose_precision
    from paddle_r1.selftest.overflow import grad_scaler
    from paddle_r1.parallel.sharding import ShardedGradientsUpdate

    layer = _layer_with_grads(0)
    layer.clear_gradients()
    update = ShardedGradientsUpdate(paddle.optimizer.AdamW(parameters=layer.parameters()), layer, 1.0, 1)
    scaler = grad_scaler(choose_precision("float32", None))
    x = paddle.ones([2, 6])
    steps = []
    for overflow in (True, False):
        before = [p.numpy().copy() for p in layer.parameters()]
        with paddle.amp.auto_cast(enable=False, dtype="float16"):  # what keeps GradScaler.scale from turning it off
            loss = layer(x).sum() * (float("inf") if overflow else 1.0)
        scaler.scale(loss).backward()
        scale = float(scaler.state_dict()["scale"][0])
        _, applied = update.step(True, scaler)
        update.clear_grad()
        moved = any(not np.array_equal(a, p.numpy()) for a, p in zip(before, layer.parameters()))
        steps.append((applied, moved, float(scaler.state_dict()["scale"][0]) / scale))
    assert steps == [(False, False, 0.5), (True, True, 1.0)]
