"""Data parallel over ranks (``python -m paddle.distributed.launch``, or ``paddle.distributed.spawn``).

Each rank generates all G completions of its own prompts; gradients are averaged across ranks with
bucketed all-reduces before the optimizer step, so every rank applies the same update. Metrics are
averaged (maxima taken for ``*/max`` keys) so rank 0 logs numbers for the whole global batch.
"""
from __future__ import annotations

import contextlib
import os

import numpy as np
import paddle
import paddle.distributed as dist


def init_distributed(fleet_strategy=None) -> tuple[int, int]:
    """(rank, world_size); joins the process group when the launcher started several ranks, through fleet
    when ``fleet_strategy(world_size)`` gives a strategy (sharding needs fleet's communicate groups)."""
    world = int(os.environ.get("PADDLE_TRAINERS_NUM", "1"))
    if world > 1 and fleet_strategy is not None:
        from paddle.distributed import fleet

        fleet.init(is_collective=True, strategy=fleet_strategy(world))
    elif world > 1 and not dist.is_initialized():
        dist.init_parallel_env()
    return (dist.get_rank(), dist.get_world_size()) if world > 1 else (0, 1)


@contextlib.contextmanager
def replica_io(world_size: int):
    """Read and write checkpoints as a lone process would: in data parallel every rank holds a full replica.

    paddleformers' ``from_pretrained`` / ``save_pretrained`` go through paddle's flex-checkpoint code, which,
    when ``paddle.distributed.get_world_size() > 1``, splits the files across ranks and exchanges pieces
    collectively: with ``.cuda()`` (fails on a CPU/gloo group) and with all-gathers every rank must join
    (rank 0 saving alone would hang). Here each rank reads the files itself and rank 0 writes them.
    """
    if world_size == 1:
        yield
        return
    original = dist.get_world_size
    dist.get_world_size = lambda group=None: 1 if group is None else original(group)
    try:
        yield
    finally:
        dist.get_world_size = original


def in_rank_order(fn, rank: int, world_size: int):
    """``fn()`` on one rank after another: paddleformers' loader rewrites a metadata file inside the model
    folder (``flex-ckpt.auto_generated.metadata``), so ranks reading the same folder at once would race."""
    result = None
    for turn in range(world_size):
        if turn == rank:
            result = fn()
        barrier(world_size)
    return result


def average_gradients(parameters, world_size: int) -> None:
    if world_size == 1:
        return
    from paddle.distributed.fleet.utils.hybrid_parallel_util import fused_allreduce_gradients_with_group

    with_grad = [p for p in parameters if p.grad is not None]
    fused_allreduce_gradients_with_group(with_grad, None, scale=1.0 / world_size)


def sum_across_ranks(value: float, world_size: int) -> float:
    if world_size == 1:
        return value
    tensor = paddle.to_tensor([value], dtype="float64")
    dist.all_reduce(tensor)
    return float(tensor[0])


def reduce_metrics(metrics: dict, world_size: int) -> dict:
    """Mean over ranks of every metric, max for ``*/max`` keys; NaN (no score on a rank) is left out."""
    if world_size == 1:
        return metrics
    keys = sorted(metrics)
    values = np.asarray([metrics[k] for k in keys], dtype="float64")
    valid = ~np.isnan(values)
    maxima = np.array([k.endswith("/max") for k in keys])
    sums = paddle.to_tensor(np.stack([np.where(valid, values, 0.0), valid.astype("float64")]))
    dist.all_reduce(sums)
    top = paddle.to_tensor(np.where(valid & maxima, values, -np.inf))
    dist.all_reduce(top, op=dist.ReduceOp.MAX)
    total, count = sums.numpy()
    mean = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    reduced = np.where(maxima, top.numpy(), mean)
    return {k: float(v) for k, v in zip(keys, reduced)}


def barrier(world_size: int) -> None:
    if world_size > 1:
        dist.barrier()
