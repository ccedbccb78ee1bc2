"""A loss-scaler overflow on one rank of several: every rank must skip that step and lower its loss scale alike.

Each rank runs ``overflow_steps``: a small MLP in the run's dtype, trained ``STEPS`` steps through the trainer's own
update (``build_optimizer``, ``build_update``, ``wrap_scaler``) with ``paddle.amp.GradScaler``; at step
``OVERFLOW_STEP`` the last rank's backward gives one weight whose optimizer state that rank keeps an infinite gradient,
through a term whose value is 0 (``sqrt(w - w)``, of derivative 1 / 0). Under sharding that gradient is reduced to that
rank alone, so only its unscale finds the inf: the ranks must share the verdict, or some step while others skip and
their loss scales part. Each rank writes what it saw to ``<out>/rank<r>.json``; the caller compares them.

Run by ``python -m paddle_r1.selftest.overflow`` under ``paddle.distributed.launch`` (the selftest's ``ranks_overflow``
checks) or by ``paddle.distributed.spawn`` (tests/test_sharding.py).
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import types

import numpy as np

STEPS = 3
OVERFLOW_STEP = 1  # 0-based: a normal step first, so that AdamW's moments would move the weights on a wrong step
WIDTH = 16


@contextlib.contextmanager
def _gpu_place_reported():
    """Within the block, ``GradScaler``'s constructor sees a GPU place: it turns loss scaling off on CPU (Paddle
    3.3.1: "AmpScaler can only be enabled on CUDAPlace, XPUPlace and CustomPlace"), though all it runs works there
    (``check_finite_and_unscale`` has a CPU kernel; the scale update is Python)."""
    from paddle.amp import grad_scaler

    tracer = grad_scaler._dygraph_tracer
    place = types.SimpleNamespace(is_gpu_place=lambda: True)
    grad_scaler._dygraph_tracer = lambda: types.SimpleNamespace(_expected_place=place)
    try:
        yield
    finally:
        grad_scaler._dygraph_tracer = tracer


def grad_scaler(precision):
    """The scaler training makes for ``precision`` (float16 on a GPU), else the same ``GradScaler`` on CPU, where
    Paddle would make it inert: the ranks' agreement is what is checked, not float16 itself."""
    from ..models.precision import Precision

    if precision.grad_scaler:
        return precision.make_grad_scaler()
    with _gpu_place_reported():
        return Precision(precision.dtype, precision.attention, True, precision.reason).make_grad_scaler()


def _digest(parameters) -> str:
    weights = hashlib.sha256()
    for p in parameters:
        weights.update(p.astype("float32").numpy().tobytes())
    return weights.hexdigest()


def _overflow_at_owner(update, weight, loss):
    """``loss``, with ``weight``'s gradient made infinite where it is reduced to (this rank keeps its optimizer state):
    in the backward through a term of value 0 (``sqrt(w - w)``, of derivative 1 / 0), which the data-parallel
    all-reduce gives every rank and stage 2's hooks give the owner; under stage 1 right after its reduce (a float16
    sum that overflows), since gloo's reduce leaves the sum on every rank, NCCL's on the owner only."""
    import paddle

    reduce = getattr(update.optimizer, "reduce_gradients", None)
    if reduce is None:
        first = weight.flatten()[0]
        return loss + paddle.sqrt(first - first.detach()).astype("float32")

    def reduce_then_overflow(*args):
        reduce(*args)
        with paddle.no_grad():
            weight.grad[(0,) * weight.grad.ndim] = float("inf")
        del update.optimizer.reduce_gradients  # this step only

    update.optimizer.reduce_gradients = reduce_then_overflow
    return loss


def overflow_steps(stage: str, dtype: str, out: str) -> None:
    """``STEPS`` steps of the update for sharding ``stage`` on this rank, the overflow at ``OVERFLOW_STEP`` on the
    last rank; writes ``{"initial": {"scale", "weights"}, "steps": [{"applied", "scale", "weights"}, ...]}``
    (``weights``: a digest of every weight as this rank holds it)."""
    import paddle

    from ..config.jobs import GRPOConfig
    from ..parallel.optimizer_state import stepping_optimizer_and_owned_weights
    from ..models.precision import precision_for_this_device
    from ..parallel.distributed import init_distributed
    from ..trainer.optim import build_optimizer
    from ..parallel.sharding import build_update, fleet_strategy, optimizer_clips

    rank, world = init_distributed(fleet_strategy if stage else None, collective_timeout=300.0)
    precision = precision_for_this_device(dtype)
    paddle.seed(0)
    model = paddle.nn.Sequential(*[paddle.nn.Linear(WIDTH, WIDTH) for _ in range(2 * world)])
    model.to(dtype=precision.dtype)
    config = GRPOConfig(model_name_or_path="unused", dtype=precision.dtype, learning_rate=1e-2, max_grad_norm=1.0)
    optimizer, _ = build_optimizer(model.parameters(), config, STEPS, clip=optimizer_clips(stage, world))
    update = build_update(stage, optimizer, model, config.max_grad_norm, world)
    forward = update.wrap(model)  # stage 2: Paddle's wrapper, whose hooks reduce the gradients
    scaler = update.wrap_scaler(grad_scaler(precision))
    owned = stepping_optimizer_and_owned_weights(update.optimizer)[1]
    inputs = paddle.to_tensor(np.random.default_rng([1, rank]).normal(size=(4, WIDTH)).astype("float32"))

    def state() -> dict:
        return {"scale": float(np.asarray(scaler.state_dict()["scale"]).reshape(-1)[0]),
                "weights": _digest(model.parameters())}

    report = {"rank": rank, "world_size": world, "precision": precision.dtype, "initial": state(), "steps": []}
    for step in range(STEPS):
        # GradScaler.scale turns the scaler off unless Paddle's amp dtype is float16, which only an auto_cast sets
        # (and leaves set): the Qwen-VL models' forward enters auto_cast(False), whose dtype is float16; so does this
        with paddle.amp.auto_cast(enable=False, dtype="float16"):
            loss = (forward(inputs.astype(precision.dtype)).astype("float32") ** 2).mean()
        if step == OVERFLOW_STEP and rank == world - 1:
            loss = _overflow_at_owner(update, owned[0], loss)
        with update.final_backward():
            scaler.scale(loss).backward()
        _, applied = update.step(True, scaler)
        update.clear_grad()
        report["steps"].append({"applied": bool(applied), **state()})
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"rank{rank}.json"), "w", encoding="utf-8") as f:
        json.dump(report, f)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stage", default="", help="sharding: '' (data parallel), stage1 or stage2")
    parser.add_argument("--dtype", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    overflow_steps(args.stage, args.dtype, args.out)


if __name__ == "__main__":
    main()
