"""The text decoder's gated MLP, silu(gate) * up, as Paddle's one ``swiglu`` kernel where a backward will follow.

paddleformers 1.2.0's ``MLP`` with fused gate/up weights takes ``fuse_swiglu`` from the config, false in the
published configs, and then splits the [.., 2 x intermediate] product in two, applies ``silu`` and multiplies,
keeping gate, up and silu(gate) for the backward; ``swiglu`` keeps only the product it reads. Per layer that is one
[tokens, intermediate] tensor less: a lower peak for the GRPO step (benchmarks/README.md, grpo_step.py). The values
differ from the unfused ones by float32 rounding (~1 ulp).

Without gradients on the CPU (the reference model's log-probs, the rollout's prefill) nothing is kept, and there the
unfused form is faster: Paddle's CPU ``swiglu`` forward takes 3.1 ms at [1104, 2 x 1024] against 1.45 ms for
``silu(gate) * up`` (the speed anchor's training forward, one AMD EPYC thread); those passes take it. The one-token
decode step keeps its own MLP (``generation/decoder.py``), unfused too."""
from __future__ import annotations

import functools

import paddle
from paddleformers.nn.mlp import MLP


class _UnfusedWithoutGradients:
    """A fused-swiglu MLP's forward, unfused where no gradient is recorded on the CPU (see the module docstring)."""

    def forward(self, x):
        if self.fuse_swiglu and self.fuse_up_gate and not paddle.is_grad_enabled() and x.place.is_cpu_place():
            gate, up = getattr(self, self.gate_up_proj_name)(x).chunk(2, axis=-1)
            return self.down_proj(self.act_fn(gate) * up)
        return super().forward(x)


@functools.lru_cache(maxsize=None)
def _installed_class(mlp_class: type) -> type:
    return type(mlp_class.__name__, (_UnfusedWithoutGradients, mlp_class), {"__module__": mlp_class.__module__})


def install_fused_swiglu(model) -> None:
    """Turn on ``fuse_swiglu`` in every paddleformers MLP of ``model`` with fused gate/up weights and SiLU (unfused
    without gradients on the CPU)."""
    for layer in model.sublayers():
        if isinstance(layer, MLP) and layer.fuse_up_gate and layer.act_type == "silu":
            layer.fuse_swiglu = True
            if not isinstance(layer, _UnfusedWithoutGradients):
                layer.__class__ = _installed_class(type(layer))
