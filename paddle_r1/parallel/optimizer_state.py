"""What the optimizer holds and where: the optimizer that steps inside Paddle's sharding wrappers, the weights whose
state this rank keeps, and that state allocated before the first step. Read by the update guard (``step_guard``),
checkpoints (a rank's share of the optimizer state) and the trainer's start-up."""
from __future__ import annotations


def allocate_optimizer_state(optimizer) -> int:
    """Create AdamW's moments (and float32 master weights) now instead of at the first ``step()``, so that a run
    whose optimizer state does not fit fails in its first minute rather than after the first rollout. Returns the
    bytes allocated. The values are what the first step would create (zeros, beta powers, a cast of the current
    weights), and the step does not create them again: training is unchanged. Under sharding only this rank's
    share is created. Paddle creates these lazily in ``step()`` through ``_create_accumulators``; this calls
    the same method early."""
    import paddle

    inner, params = stepping_optimizer_and_owned_weights(optimizer)
    before = _accumulator_bytes(inner)
    inner._create_accumulators(paddle.static.default_main_program().global_block(),
                               [p for p in params if not p.stop_gradient])
    return _accumulator_bytes(inner) - before


def stepping_optimizer(optimizer):
    """The optimizer whose ``step`` creates and updates the state: stage 2's ``GroupShardedOptimizerStage2`` steps
    its ``_optim``, stage 1's ``DygraphShardingOptimizer`` its ``_inner_opt``; each holds this rank's share only."""
    return optimizer._optim if hasattr(optimizer, "param2rank") else getattr(optimizer, "_inner_opt", optimizer)


def stepping_optimizer_and_owned_weights(optimizer):
    """The optimizer whose ``step`` creates the state, and the weights whose state this rank keeps: stage 2's
    steps on the weights ``param2rank`` gives this rank; stage 1's has already narrowed its ``_inner_opt`` to this
    rank's weights."""
    inner = stepping_optimizer(optimizer)
    if hasattr(optimizer, "param2rank"):
        return inner, [p for p in optimizer.local_params if optimizer.param2rank[p.name] == optimizer._rank]
    return inner, inner._parameter_list


def state_tensors(optimizer) -> dict:
    """The state tensors of the optimizer that steps (``stepping_optimizer``), by a name that stays the same from step
    to step: each accumulator (moments, beta powers) as ``kind/name``, each float32 master weight as ``master/name``."""
    named = {}
    for kind, per_param in optimizer._accumulators.items():
        named.update({f"{kind}/{name}": t for name, t in per_param.items()})
    named.update({f"master/{name}": t for name, t in getattr(optimizer, "_master_weights", {}).items()})
    return named


def tensor_bytes(tensors) -> int:
    return sum(int(t.numel()) * t.element_size() for t in tensors)


def _accumulator_bytes(optimizer) -> int:
    return tensor_bytes(state_tensors(optimizer).values())
