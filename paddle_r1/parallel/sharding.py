"""Where the optimizer's memory lives across ranks, chosen by the config key ``sharding``.

``""``      every rank holds the gradients and AdamW state of every trainable weight; gradients are
            all-reduced bucket by bucket, launched during the step's last backward pass and finished before the
            step (data parallel; ``distributed.GradientReducer``).
``stage1``  each rank keeps the AdamW moments (and, for bf16, the fp32 master weights) of its share of the
            weights only: fleet's ``DygraphShardingOptimizer`` reduces each gradient to the rank that owns the
            weight, the owner updates it and broadcasts the new value. Runs on any backend (tested on CPU/gloo).
``stage2``  also gradients: a rank keeps the gradients of its share only
            (``paddle.distributed.sharding.group_sharded_parallel``, level ``os_g``). Paddle runs it on GPU/XPU
            only; the training forward goes through its wrapper layer so its reduce hooks are set each step.

Parameter sharding (stage 3) is not offered: Paddle's stage-3 wrapper prefetches each layer's weights in the
order its first forward recorded, and the rollout's KV-cached decode calls the layers in another order.

With gradients split over ranks, the global gradient norm is summed over them: ``clip_by_global_norm`` is
paddle's ``ClipGradByGlobalNorm`` for that case, and it returns the norm the step logs.

Checkpoints: under stage 1 and stage 2 each rank saves its optimizer's ``state_dict()`` as
``optimizer.shard<rank>.pdopt`` (``checkpoints.training_state.save_optimizer``). Both Paddle wrappers return their inner
optimizer's state, this rank's share: for stage 2 that is what Paddle's ``save_group_sharded_model`` writes, but it
writes one ``model.pdopt`` that every rank overwrites. A resume gives ``set_state_dict`` the share of the weights this
rank keeps under the new run's layout (``optimizer_state.stepping_optimizer_and_owned_weights``, read by
``checkpoints.training_state.read_optimizer_state``), after wrapping: Paddle's note asks for the state before
``group_sharded_parallel``, but stage 2's wrapping then replaces restored float32 master weights with casts of the
bfloat16 weights (``GroupShardedOptimizerStage2._generate_master_params``). Stage 2's save and resume have not
been run (GPU/XPU only); stage 1's, and the share selection both use, are tested on CPU.

Every stage guards its optimizer step (``step_guard``): the weights this rank's step wrote are checked for NaN and
infinity, the verdict is agreed over ranks, and a step that wrote any is undone on every rank.

float16's loss scaler (``paddle.amp.GradScaler``) skips a step whose gradients hold inf/NaN and lowers its scale. Every
rank must see the same verdict, or some step while others skip and their scales part: replicated ranks unscale the
same all-reduced gradients; stage 1 agrees on it after unscaling (``ShardedStateUpdate.unscale``); stage 2's
``GroupShardedScaler`` all-reduces it itself. A step counts as applied only when the optimizer really stepped.
"""
from __future__ import annotations

import contextlib
import functools
import math

import paddle

from .distributed import GRADIENT_BUCKET_BYTES, GradientReducer, sum_across_ranks
from .. import memory
from .step_guard import StepSnapshot, copy_bytes, finite_flags

def fleet_strategy(world_size: int):
    """A fleet strategy whose only parallel axis is sharding over all ranks (needed by the stage-1 optimizer)."""
    from paddle.distributed import fleet

    strategy = fleet.DistributedStrategy()
    strategy.hybrid_configs = {"dp_degree": 1, "mp_degree": 1, "pp_degree": 1, "sharding_degree": world_size}
    return strategy


@paddle.no_grad()
def clip_by_global_norm(parameters, max_norm: float, world_size: int = 1) -> float:
    """g <- g * max_norm / max(||g||, max_norm), ||g|| over the gradients of ``parameters`` on all ranks
    (each rank passes its own share; with ``world_size`` 1 the norm is local). Returns ||g|| before clipping."""
    grads = [p.grad for p in parameters if p.grad is not None]
    # x * x, not x ** 2 (Paddle's generic power kernel), and one read of the device for all parameters
    per_grad = [(g * g).sum() for g in (g.astype("float32") for g in grads)]
    squares = float(paddle.stack(per_grad).astype("float64").sum()) if per_grad else 0.0
    norm = math.sqrt(sum_across_ranks(squares, world_size))
    if max_norm > 0 and norm > max_norm:
        for g in grads:
            g.scale_(max_norm / norm)
    return norm


class Update:
    """What every update shares: the optimizer, the trainable weights, clipping and the guarded step."""

    shards_optimizer_state = False

    def __init__(self, optimizer, policy: paddle.nn.Layer, max_grad_norm: float, world_size: int):
        self.optimizer = optimizer
        self.parameters = [p for p in policy.parameters() if not p.stop_gradient]
        self.max_grad_norm = max_grad_norm
        self.world_size = world_size
        self.weights_restored = False  # the last step wrote a non-finite weight and was undone
        self.weights_broken = False  # the last step wrote a non-finite weight and undo_non_finite is off

    def stepped_parameters(self) -> list:
        """The weights this rank's optimizer step writes (and a restore must put back)."""
        return self.parameters

    def resync_parameters(self) -> None:
        """After a restore: bring every rank's copy of the weights back in line (only stage 1 needs it)."""

    @functools.cached_property
    def snapshot(self) -> StepSnapshot:
        return StepSnapshot(self.optimizer, self.stepped_parameters())

    undo_non_finite = True  # keep a host copy to put a bad step back (``choose_undo``)
    no_undo_reason = ""  # why there is no copy, for the message that stops the run

    def choose_undo(self, setting) -> str:
        """Set ``undo_non_finite`` from the config key ``undo_non_finite_updates`` (true, false, or "auto": the rule
        of ``memory.undo_copy_kept`` on every rank, agreed over ranks, since under stage 1 the shares differ and a
        rank that restores while another stops would hang). Call once the optimizer state exists (it is most of the
        copy). Returns the line the log shows."""
        size = copy_bytes(self.optimizer, self.stepped_parameters())
        over = sum_across_ranks(float(not memory.undo_copy_kept(setting, size)), self.world_size,
                                "the update guard's choice of a host copy")
        self.undo_non_finite = over == 0
        gib = size / memory.GIB
        self.no_undo_reason = "undo_non_finite_updates is false" if setting is False else (
            f"undo_non_finite_updates is auto and the host copy ({gib:.2f} GiB on this rank) is over its "
            f"{memory.UNDO_COPY_BUDGET_GIB:g} GiB budget")
        if self.undo_non_finite:
            return (f"update guard: a step that writes NaN/inf is undone from a host copy of {gib:.2f} GiB per rank "
                    f"(undo_non_finite_updates {str(setting).lower()})")
        return f"update guard: a step that writes NaN/inf stops the run ({self.no_undo_reason})"

    def _guarded_step(self, scaler) -> bool:
        """The optimizer step (through float16's ``scaler`` when there is one), undone on every rank (weights and
        optimizer state) when a weight it wrote is not finite on any rank; whether it was kept. Without
        ``undo_non_finite`` (``choose_undo``) no copy is taken and such a step leaves ``weights_broken`` set (the run
        must stop)."""
        if self.undo_non_finite:
            self.snapshot.take()
        if scaler is not None:
            scaler.step(self.optimizer)
        else:
            self.optimizer.step()
        written = self.stepped_parameters()
        finite = sum_across_ranks(float(not finite_flags(written).all()), self.world_size,
                                  "the check of the updated weights") == 0
        if not finite and self.undo_non_finite:
            self.snapshot.restore()
            self.resync_parameters()
        self.weights_restored = not finite and self.undo_non_finite
        self.weights_broken = not finite and not self.undo_non_finite
        return finite and not (scaler is not None and scaler_skipped(scaler))

    def wrap(self, forward: paddle.nn.Layer) -> paddle.nn.Layer:
        """The training forward as the trainer calls it (only stage 2 wraps it)."""
        return forward

    def final_backward(self):
        """A context around the step's last ``backward``: where the update reduces gradients during it."""
        return contextlib.nullcontext()

    def wrap_scaler(self, scaler):
        """float16's loss scaler as this update needs it (as it is, but for stage 2's)."""
        return scaler

    def unscale(self, scaler) -> None:
        """The gradients divided by the loss scale, ``scaler`` noting whether any is inf/NaN (replicated: every rank
        unscales the same all-reduced gradients, so all note the same)."""
        scaler.unscale_(self.optimizer)

    def _clip_and_step(self, parameters, world_size: int, finite_loss: bool, scaler) -> tuple[float, bool]:
        self.weights_restored = False
        if scaler is not None:
            self.unscale(scaler)
        norm = clip_by_global_norm(parameters, self.max_grad_norm, world_size)
        applied = finite_loss and math.isfinite(norm) and self._guarded_step(scaler)
        if scaler is not None:
            # step() skips the update itself when unscale_ found inf/NaN (the norm is not finite then), and only
            # step() records that for update(): without it an overflow would never lower the scale (Paddle 3.3.1)
            if finite_loss and not math.isfinite(norm):
                scaler.step(self.optimizer)
            scaler.update()  # an overflow lowers the scale
        return norm, applied

    def clear_grad(self) -> None:
        self.optimizer.clear_grad()


class ReplicatedUpdate(Update):
    """No sharding: gradients all-reduced (overlapping the last backward), clipped by their global norm, full
    optimizer on every rank."""

    bucket_bytes = GRADIENT_BUCKET_BYTES  # a class attribute, so a test can make buckets small

    def __init__(self, optimizer, policy: paddle.nn.Layer, max_grad_norm: float, world_size: int):
        super().__init__(optimizer, policy, max_grad_norm, world_size)
        # the LM head (and the embedding when tied to it: the same parameter) runs once per log-prob chunk, each
        # chunk its own recompute backward, so its gradient is only whole after the backward
        head = getattr(policy, "lm_head", None)
        self.reducer = GradientReducer(
            [(n, p) for n, p in policy.named_parameters() if not p.stop_gradient], world_size,
            repeated=head.parameters() if head is not None else (), bucket_bytes=self.bucket_bytes) \
            if world_size > 1 else None

    def final_backward(self):
        return self.reducer.final_backward() if self.reducer is not None else contextlib.nullcontext()

    def step(self, finite_loss: bool = True, scaler=None) -> tuple[float, bool]:
        """Sync gradients, clip, update, unless the loss or the gradient norm is not finite, and undo an update that
        wrote a non-finite weight; (the gradient norm before clipping, whether the update was applied). The norm is
        the same on every rank, so all skip together. ``scaler``: float16's ``paddle.amp.GradScaler``; gradients are
        unscaled before the norm."""
        if self.reducer is not None:
            self.reducer.reduce()
        return self._clip_and_step(self.parameters, 1, finite_loss, scaler)


class ShardedStateUpdate(Update):
    """Stage 1: each rank holds the optimizer state of its share of the weights."""

    shards_optimizer_state = True

    def __init__(self, optimizer, policy, max_grad_norm, world_size):
        from paddle.distributed import fleet
        from paddle.distributed.fleet.meta_optimizers.dygraph_optimizer.dygraph_sharding_optimizer import \
            DygraphShardingOptimizer

        super().__init__(optimizer, policy, max_grad_norm, world_size)
        self.hcg = fleet.get_hybrid_communicate_group()
        self.optimizer = DygraphShardingOptimizer(optimizer, self.hcg)

    def unscale(self, scaler) -> None:
        """Each rank's gradients differ (the owner holds a weight's reduced gradient, the others their own), so whether
        any is inf/NaN is agreed over ranks here, after unscaling: else one rank steps while another skips, and only
        the second lowers its scale. Not fleet's ``distributed_scaler``: it replaces the scaler's ``_unscale``, which
        ``GradScaler.unscale_`` does not call (it calls the base class's, ``super()._unscale``; Paddle 3.3.1), and
        calling the replacement instead leaves the optimizer marked not unscaled, so ``step()`` would unscale again."""
        super().unscale(scaler)
        overflow = sum_across_ranks(float(bool(scaler._found_inf)), self.world_size,
                                    "the check for overflowing gradients") > 0
        scaler._found_inf = paddle.to_tensor([overflow])  # what step() reads: skip, and tell update()

    def stepped_parameters(self) -> list:
        return self.optimizer.filter_parameters(self.parameters, self.hcg)

    def resync_parameters(self) -> None:
        """Each owner restored its own weights; the others still hold what the undone step broadcast."""
        self.optimizer._sharding_sync_parameters()

    def step(self, finite_loss: bool = True, scaler=None) -> tuple[float, bool]:
        self.optimizer.reduce_gradients(self.parameters, self.hcg)  # each gradient, averaged, to its owner
        # the norm is summed over ranks, so all agree; the step updates the owned weights, then broadcasts them
        return self._clip_and_step(self.stepped_parameters(), self.world_size, finite_loss, scaler)


class ShardedGradientsUpdate(Update):
    """Stage 2 (GPU/XPU): Paddle's group-sharded wrapper reduces gradients in backward hooks and clips with a
    norm over all ranks (the optimizer must carry ``ClipGradByGlobalNorm``); the norm itself is not exposed,
    so the step logs NaN for it and only a non-finite loss or update skips the step. The wrapper's step broadcasts
    every weight from its owner, so each rank checks and restores all of them itself."""

    shards_optimizer_state = True

    def wrap(self, forward: paddle.nn.Layer) -> paddle.nn.Layer:
        """The training forward inside Paddle's wrapper (its reduce hooks are set on each forward)."""
        from paddle.distributed.sharding import group_sharded_parallel

        forward, self.optimizer, _ = group_sharded_parallel(forward, self.optimizer, level="os_g")
        return forward

    def wrap_scaler(self, scaler):
        """Paddle's group-sharded scaler: unscales this rank's gradient shard and agrees on inf/NaN over ranks (what
        ``group_sharded_parallel(..., scaler=)`` returns)."""
        if scaler is None:
            return None
        from paddle.distributed.fleet.meta_parallel.sharding.group_sharded_utils import GroupShardedScaler

        return GroupShardedScaler(scaler)

    def step(self, finite_loss: bool = True, scaler=None) -> tuple[float, bool]:
        self.weights_restored = False
        applied = finite_loss and self._guarded_step(scaler)
        if scaler is not None:
            scaler.update()
        return float("nan"), applied


def scaler_skipped(scaler) -> bool:
    """Whether ``scaler``'s last ``step`` skipped the optimizer (its gradients held inf/NaN): what its ``update()``
    reads to lower the scale, which Paddle 3.3.1 keeps only in this attribute (as it keeps an unscale's verdict only
    in ``_found_inf``). A scaler Paddle turned off (on CPU, or for another amp dtype) only calls the optimizer's
    step and never sets it: it skipped nothing."""
    return scaler.is_enable() and bool(scaler._cache_found_inf)


def optimizer_clips(stage: str, world_size: int) -> bool:
    """Whether the optimizer itself must carry the gradient clip (stage 2); otherwise the update clips."""
    return stage == "stage2" and world_size > 1


UPDATES = {  # the config key sharding's names (SHARDING_STAGES) -> the update over ranks
    "": ReplicatedUpdate, "stage1": ShardedStateUpdate, "stage2": ShardedGradientsUpdate}


def build_update(stage: str, optimizer, policy, max_grad_norm: float, world_size: int) -> Update:
    """The update for ``stage``; on a single process every stage is the plain update. The trainer calls its training
    forward through ``update.wrap`` (stage 2 wraps it so Paddle's hooks see every training forward). Whether a step
    that writes a non-finite weight is undone is set once the optimizer state exists (``Update.choose_undo``)."""
    return UPDATES["" if world_size == 1 else stage](optimizer, policy, max_grad_norm, world_size)
