"""Data parallel over ranks (``python -m paddle.distributed.launch``, or ``paddle.distributed.spawn``).

Each rank generates its own completions (whole groups, or parts of groups: ``sampler.rank_share``), whose rewards
are gathered for the advantages (``groups``); gradients are averaged across ranks with
bucketed all-reduces (``GradientReducer``), launched during the step's last backward pass as buckets fill and
finished before the optimizer step, so every rank applies the same update. Metrics are combined over ranks in
``step_metrics``.
"""
from __future__ import annotations

import collections
import contextlib
import functools
import logging
import math
import os
from typing import Optional

import numpy as np
import paddle
import paddle.distributed as dist

from .rank_watch import RankWatch, die_with_parent

logger = logging.getLogger(__name__)
_watch: Optional[RankWatch] = None  # this process's check-ins at the job's store, once it joined a job of many ranks


def init_distributed(fleet_strategy=None, collective_timeout: float = 1800.0,
                     heartbeat_timeout: float = 60.0) -> tuple[int, int]:
    """(rank, world_size); joins the process group when the launcher started several ranks, through fleet
    when ``fleet_strategy(world_size)`` gives a strategy (sharding needs fleet's communicate groups). A rank of
    many ends with its launcher, and checks in before each collective (``rank_watch``)."""
    global _watch
    world = int(os.environ.get("PADDLE_TRAINERS_NUM", "1"))
    if world == 1:
        return 0, 1
    die_with_parent()
    if fleet_strategy is not None:
        from paddle.distributed import fleet

        fleet.init(is_collective=True, strategy=fleet_strategy(world))
    elif not dist.is_initialized():
        dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    if _watch is None or (_watch.rank, _watch.world_size) != (rank, world):
        _watch = RankWatch(rank, world, collective_timeout, heartbeat_timeout)
    _watch.collective_timeout, _watch.dead_after = collective_timeout, heartbeat_timeout
    return rank, world


def phase(name: str) -> None:
    """What this rank is doing now (named by the others when it is late)."""
    if _watch is not None:
        _watch.phase(name)


def explain_failure(error: Exception) -> Exception:
    """What to raise for an error that ended a step: ``RankWatch.explain`` (another rank stopped) in a job of many
    ranks, else the error itself."""
    return _watch.explain(error) if _watch is not None else error


def _check_in(where: str) -> None:
    """Before a collective of several ranks: wait at the job's store until every rank has come (``RankWatch``)."""
    if _watch is not None:
        _watch.arrive(where)


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


def decided_by_main(fn, rank: int, world_size: int):
    """``fn()`` run on rank 0 alone, its result, or the exception it raised, handed to every rank: for a decision
    all ranks must share that reads files (the checkpoint to resume from: verified once, not hashed by every rank,
    and no rank can come to another answer). Every rank raises when ``fn`` did, so none waits for the others."""
    if world_size == 1:
        return fn()
    outcome = [None, None]
    if rank == 0:
        try:
            outcome = [fn(), None]
        except Exception as e:  # noqa: BLE001 -- raised again below, on every rank
            outcome = [None, e]
    _check_in("the decision rank 0 makes for all (its files read, hashed)")  # rank 0 may take a minute
    dist.broadcast_object_list(outcome, src=0)
    result, error = outcome
    if error is not None:
        raise error
    return result


GRADIENT_BUCKET_BYTES = 32 << 20


def gradient_buckets(tensors: list, bucket_bytes: int = GRADIENT_BUCKET_BYTES) -> list[list[int]]:
    """Positions of ``tensors`` in order, split into runs of one dtype of at most ``bucket_bytes`` each (a larger
    tensor alone). Sizes come from the shapes, so parameters can be bucketed before they have gradients."""
    buckets, current, size, dtype = [], [], 0, None
    for i, tensor in enumerate(tensors):
        nbytes = math.prod(tensor.shape) * tensor.element_size()
        if current and (size + nbytes > bucket_bytes or tensor.dtype != dtype):
            buckets.append(current)
            current, size = [], 0
        current.append(i)
        size += nbytes
        dtype = tensor.dtype
    return buckets + ([current] if current else [])


class GradientReducer:
    """Averages gradients over ranks, launching each bucket's all-reduce during the step's last backward pass as
    soon as all its parameters have their gradient, so communication overlaps the rest of the backward.

    ``paddle.DataParallel``'s reducer does the same but does not support the PyLayer that recompute (chunked
    log-probs, gradient checkpointing) is built on; this one only hooks the parameters. How it stays correct:

    - Buckets are fixed once from the parameters (reverse registration order, close to the order gradients
      arrive; one dtype, at most ``bucket_bytes``), so they are the same on every rank. During the backward they
      are launched strictly in bucket order, the rest at the end of that backward (``final_backward``), so every
      rank issues the same all-reduces in the same order even when gradients arrive in another order or not at
      all; a parameter without a gradient on this rank (a vision tower that saw no image) adds zeros, and gets a
      gradient afterwards only if some rank had one (as one process over the whole batch would).
    - A parameter's backward hook runs after each accumulation into ``.grad``; with a reentrant recompute every
      recomputed block runs its own backward, so a parameter used in several of them (the LM head, once per
      log-prob chunk, and the input embedding when tied to it) gets several. Those (``repeated``) are reduced at
      ``reduce()``, after the backward. Anything else that receives a gradient after its bucket was launched is
      caught by a gradient hook: the late part is kept aside (the bucket reduces what came before it) and
      averaged on its own at ``reduce()``, so nothing is lost. A bucket with a parameter seen receiving its
      gradient twice, or receiving none on any rank (it would hold back every later bucket), is reduced after the
      backward from the next step on (all ranks agree: it is decided on reduced flags).
    - Earlier micro-batches of a step only accumulate: the hooks act inside ``final_backward`` alone.

    At most ``max_in_flight`` buckets are in flight; launching one more first finishes the oldest (waits for it,
    copies it back into the gradients), so the extra memory is two buckets, not a second copy of every gradient.
    ``launched_in_backward`` counts the buckets launched from a hook (for tests), ``late_gradients`` the
    contributions diverted after their bucket was launched.

    The all-reduces are ``sync_op=False`` (as fleet's own overlapping buffers issue them): on NCCL they run on the
    communication stream while the backward goes on, and ``wait`` orders the copy-back after them. Gloo (CPU)
    finishes one before returning, so on CPU the order and the results are tested, not the overlap.
    """

    max_in_flight = 2

    def __init__(self, named_parameters, world_size: int, repeated=(), bucket_bytes: int = GRADIENT_BUCKET_BYTES):
        named_parameters = list(named_parameters)
        self.names = [name for name, _ in named_parameters]
        self.parameters = [param for _, param in named_parameters]
        self.world_size = world_size
        repeated_ids = {id(p) for p in repeated}
        newest_first = list(reversed(range(len(self.parameters))))
        self.buckets, self.after_backward = [], set()  # after_backward: reduced in reduce(), not in hooks
        for after in (False, True):  # buckets for the backward first, then the repeated parameters'
            group = [i for i in newest_first if (id(self.parameters[i]) in repeated_ids) == after]
            for bucket in gradient_buckets([self.parameters[i] for i in group], bucket_bytes):
                if after:
                    self.after_backward.add(len(self.buckets))
                self.buckets.append([group[j] for j in bucket])
        self.bucket_of = {i: b for b, bucket in enumerate(self.buckets) for i in bucket}
        self.launched_in_backward = 0
        self.late_gradients = 0
        for i, param in enumerate(self.parameters):
            param._register_backward_hook(functools.partial(self._on_gradient, i))
            param.register_hook(functools.partial(self._divert_if_launched, i))
        self._reset()

    def _reset(self) -> None:
        self._armed = False
        self._had_final_backward = False
        self._fired = [0] * len(self.parameters)
        self._missing = [len(bucket) for bucket in self.buckets]  # parameters yet to get their gradient
        self._in_backward = [b for b in range(len(self.buckets)) if b not in self.after_backward]
        self._next = 0  # position in _in_backward of the next bucket to launch
        self._launched = [False] * len(self.buckets)
        self._in_flight: collections.deque = collections.deque()
        self._late: dict[int, paddle.Tensor] = {}  # gradient that arrived after its bucket was launched
        self._unowned: dict[int, paddle.Tensor] = {}  # reduced values of parameters without a local gradient

    @contextlib.contextmanager
    def final_backward(self):
        """Around the step's last ``loss.backward()``: buckets are launched as they fill; on leaving, every bucket
        meant for the backward is launched (before any other collective, which could otherwise pair with a
        bucket another rank launched)."""
        self._armed = self._had_final_backward = True
        try:
            yield
        finally:
            self._armed = False
        self._launch_in_order(until_ready=False)

    @paddle.no_grad()
    def _on_gradient(self, i: int, *_) -> None:
        """Backward hook: ``.grad`` of parameter ``i`` has just been accumulated."""
        if not self._armed:
            return
        self._fired[i] += 1
        if self._fired[i] == 1:
            self._missing[self.bucket_of[i]] -= 1
            self._launch_in_order(until_ready=True)

    @paddle.no_grad()
    def _divert_if_launched(self, i: int, grad: paddle.Tensor):
        """Gradient hook, before accumulation: a gradient for a bucket already launched is kept aside (the
        accumulation gets zeros) to be averaged in ``reduce()``."""
        if not self._launched[self.bucket_of[i]]:
            return None
        self.late_gradients += 1
        self._late[i] = self._late[i] + grad if i in self._late else grad.clone()
        return paddle.zeros_like(grad)

    def _launch_in_order(self, until_ready: bool) -> None:
        while self._next < len(self._in_backward):
            bucket = self._in_backward[self._next]
            if until_ready and self._missing[bucket]:
                return
            self._launch(bucket)
            self.launched_in_backward += until_ready
            self._next += 1

    def _launch(self, b: int) -> None:
        if len(self._in_flight) >= self.max_in_flight:
            self._finish(*self._in_flight.popleft())
        params = [self.parameters[i] for i in self.buckets[b]]
        flat = paddle.concat([(p.grad if p.grad is not None else paddle.zeros(p.shape, p.dtype)).reshape([-1])
                              for p in params])
        flat.scale_(1.0 / self.world_size)
        self._launched[b] = True
        self._in_flight.append((b, flat, dist.all_reduce(flat, sync_op=False)))

    def _finish(self, b: int, flat: paddle.Tensor, task) -> None:
        task.wait()
        offset = 0
        for i in self.buckets[b]:
            param = self.parameters[i]
            size = math.prod(param.shape)
            value = flat[offset:offset + size].reshape(param.shape)
            if param.grad is not None:
                param.grad.set_value(value)
            else:
                self._unowned[i] = value.clone()
            offset += size

    @paddle.no_grad()
    def reduce(self) -> None:
        """Every gradient replaced by its mean over ranks (before the optimizer step): the buckets left for after
        the backward, the late contributions, then everything copied back."""
        self._launch_in_order(until_ready=False)  # no final_backward (nothing to overlap): all of them now
        # what each rank saw, per parameter: a gradient, a late one, one in the final backward, more than one
        seen = np.array([[p.grad is not None, i in self._late, self._fired[i] > 0, self._fired[i] > 1]
                         for i, p in enumerate(self.parameters)], dtype="float32").reshape([-1, 4])
        seen = paddle.to_tensor(seen)
        dist.all_reduce(seen)
        has_grad, late, fired, repeated = (seen.numpy() > 0).T
        for b in range(len(self.buckets)):
            if not self._launched[b]:
                self._launch(b)
        late_means = {}
        for i in np.flatnonzero(late):
            param = self.parameters[i]
            mean = self._late[i] if i in self._late else paddle.zeros(param.shape, param.dtype)
            mean.scale_(1.0 / self.world_size)
            dist.all_reduce(mean)
            late_means[i] = mean
        while self._in_flight:
            self._finish(*self._in_flight.popleft())
        for i, value in self._unowned.items():
            if has_grad[i]:
                self.parameters[i]._copy_gradient_from(value)
        for i, mean in late_means.items():
            self.parameters[i].grad.add_(mean)
        if self._had_final_backward:
            self._leave_for_after_backward(repeated, ~fired)
        self._reset()

    def _leave_for_after_backward(self, repeated, absent) -> None:
        """Buckets whose parameters, on some rank, got a gradient more than once in the final backward (it may
        arrive after the bucket's launch) or on no rank (it would hold back every later bucket) are reduced after
        the backward from the next step on. Decided on reduced flags, so every rank agrees."""
        why = []
        for b, bucket in enumerate(self.buckets):
            if b in self.after_backward or not any(repeated[i] or absent[i] for i in bucket):
                continue
            self.after_backward.add(b)
            why += [f"{self.names[i]} ({'more than once' if repeated[i] else 'none'})"
                    for i in bucket if repeated[i] or absent[i]]
        if why and dist.get_rank() == 0:
            logger.warning("gradient all-reduce: buckets reduced after the backward from now on; gradients in the "
                           "last backward pass: %s", ", ".join(why))


def sum_across_ranks(value: float, world_size: int, where: str = "a sum over ranks") -> float:
    return sums_across_ranks([value], world_size, where)[0]


def sums_across_ranks(values: list[float], world_size: int, where: str = "sums over ranks") -> list[float]:
    """Each of ``values`` summed over the ranks, all in one float64 all-reduce."""
    if world_size == 1:
        return list(values)
    _check_in(where)
    tensor = paddle.to_tensor(values, dtype="float64")
    dist.all_reduce(tensor)
    return tensor.numpy().tolist()


def gather_objects(obj, world_size: int, where: str) -> list:
    """Every rank's ``obj`` (picklable; of any size), in rank order."""
    if world_size == 1:
        return [obj]
    _check_in(where)
    gathered: list = []
    dist.all_gather_object(gathered, obj)
    return gathered


def barrier(world_size: int, where: str = "a barrier") -> None:
    if world_size > 1:
        _check_in(where)
        dist.barrier()
