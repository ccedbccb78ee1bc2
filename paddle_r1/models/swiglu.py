"""The text decoder's gated MLP, silu(gate) * up, as Paddle's one ``swiglu`` kernel.

paddleformers 1.2.0's ``MLP`` with fused gate/up weights takes ``fuse_swiglu`` from the config, false in the
published configs, and then splits the [.., 2 x intermediate] product in two, applies ``silu`` and multiplies,
keeping gate, up and silu(gate) for the backward; ``swiglu`` keeps only the product it reads. Per layer that is one
[tokens, intermediate] tensor less: a lower peak for the GRPO step in the same time (benchmarks/README.md,
grpo_step.py). The values differ from the unfused ones by float32 rounding (~1 ulp). The one-token decode step keeps
its own MLP (``generation/decoder.py``), where the kernel was slower at 16 rows."""
from __future__ import annotations

from paddleformers.nn.mlp import MLP


def install_fused_swiglu(model) -> None:
    """Turn on ``fuse_swiglu`` in every paddleformers MLP of ``model`` with fused gate/up weights and SiLU."""
    for layer in model.sublayers():
        if isinstance(layer, MLP) and layer.fuse_up_gate and layer.act_type == "silu":
            layer.fuse_swiglu = True
