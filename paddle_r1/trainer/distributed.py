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


GRADIENT_BUCKET_BYTES = 32 << 20


def gradient_buckets(grads: list, bucket_bytes: int = GRADIENT_BUCKET_BYTES) -> list[list]:
    """``grads`` in order, split into runs of one dtype of at most ``bucket_bytes`` each (a larger tensor alone)."""
    buckets, current, size = [], [], 0
    for grad in grads:
        nbytes = grad.numel().item() * grad.element_size()
        if current and (size + nbytes > bucket_bytes or grad.dtype != current[0].dtype):
            buckets.append(current)
            current, size = [], 0
        current.append(grad)
        size += nbytes
    return buckets + ([current] if current else [])


@paddle.no_grad()
def average_gradients(parameters, world_size: int, bucket_bytes: int = GRADIENT_BUCKET_BYTES) -> None:
    """Each gradient replaced by its mean over ranks, one bucket at a time: a bucket's gradients are packed into
    one buffer, all-reduced and unpacked before the next bucket is packed, so the extra memory is one bucket
    (32 MB), not a second copy of every gradient (Paddle's ``fused_allreduce_gradients`` packs all buckets
    first). The reduction runs after the backward pass: ``paddle.DataParallel``'s overlapping reducer does not
    support the PyLayer that recompute (chunked log-probs, gradient checkpointing) is built on."""
    if world_size == 1:
        return
    grads = [p.grad for p in parameters if p.grad is not None]
    for bucket in gradient_buckets(grads, bucket_bytes):
        flat = paddle.concat([g.reshape([-1]) for g in bucket])
        flat.scale_(1.0 / world_size)
        dist.all_reduce(flat)
        offset = 0
        for grad in bucket:
            size = grad.numel().item()
            grad.set_value(flat[offset:offset + size].reshape(grad.shape))
            offset += size


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
