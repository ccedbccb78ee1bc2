"""The text decoder's gated MLP, silu(gate) * up, as Paddle's one ``swiglu`` kernel where a backward will follow, and
with the down projection's input computed again in the backward instead of kept.

paddleformers 1.2.0's ``MLP`` with fused gate/up weights takes ``fuse_swiglu`` from the config, false in the
published configs, and then splits the [.., 2 x intermediate] product in two, applies ``silu`` and multiplies,
keeping gate, up and silu(gate) for the backward; ``swiglu`` keeps only the product it reads. Per layer that is one
[tokens, intermediate] tensor less: a lower peak for the GRPO step (benchmarks/README.md, grpo_step.py). The values
differ from the unfused ones by float32 rounding (~1 ulp). Where the down projection is a plain ``Linear`` without
bias, ``SwigluDown`` takes the activation and the product together and keeps the gate/up product alone: the
activation's output, the down product's input, is computed again in the backward (one elementwise kernel), another
[tokens, intermediate] tensor less per layer.

Without gradients on the CPU (the reference model's log-probs, the rollout's prefill) nothing is kept, and there the
unfused form is faster: Paddle's CPU ``swiglu`` forward takes 3.1 ms at [1104, 2 x 1024] against 1.45 ms for
``silu(gate) * up`` (the speed anchor's training forward, one AMD EPYC thread); those passes take it. The one-token
decode step keeps its own MLP (``generation/decoder.py``), unfused too."""
from __future__ import annotations

import functools

import paddle
from paddle import _C_ops
from paddle.amp.auto_cast import amp_state
from paddle.autograd import PyLayer
from paddleformers.nn.mlp import MLP


class SwigluDown(PyLayer):
    """y = swiglu(u) W for the gate/up product u [.., 2 x intermediate] and the down weight W [intermediate, hidden],
    keeping u and W for the backward and computing a = swiglu(u) again there:

        dW = a^T g,   da = g W^T,   du = swiglu_grad(u, da)

    (Paddle's kernels for each; the same ops autograd takes through ``swiglu`` and ``linear``)."""

    @staticmethod
    def forward(ctx, gate_up, weight):
        ctx.save_for_backward(gate_up, weight)
        ctx.needs_grad = (not gate_up.stop_gradient, not weight.stop_gradient)
        return _C_ops.matmul(_C_ops.swiglu(gate_up, None), weight, False, False)

    @staticmethod
    def backward(ctx, grad):
        gate_up, weight = ctx.saved_tensor()
        gate_up_needs, weight_needs = ctx.needs_grad
        grad_gate_up = grad_weight = None
        if gate_up_needs:
            grad_gate_up = _C_ops.swiglu_grad(gate_up, None, _C_ops.matmul(grad, weight, False, True))[0]
        if weight_needs:
            activated = _C_ops.swiglu(gate_up, None)
            grad_weight = _C_ops.matmul(activated.reshape([-1, activated.shape[-1]]),
                                        grad.reshape([-1, grad.shape[-1]]), True, False)
        return grad_gate_up, grad_weight


class _FusedSwigluMLP:
    """A fused-swiglu MLP's forward: unfused where no gradient is recorded on the CPU, ``SwigluDown`` where one is, the
    down projection is a plain ``Linear`` without bias and no ``paddle.amp.auto_cast`` is on (see the module
    docstring)."""

    def forward(self, x):
        if self.fuse_swiglu and self.fuse_up_gate:
            gate_up, down = getattr(self, self.gate_up_proj_name), self.down_proj
            if not paddle.is_grad_enabled() and x.place.is_cpu_place():
                gate, up = gate_up(x).chunk(2, axis=-1)
                return down(self.act_fn(gate) * up)
            if (paddle.is_grad_enabled() and type(down) is paddle.nn.Linear and down.bias is None
                    and amp_state() is None):  # under auto_cast: autograd's casts on the plain ops
                return SwigluDown.apply(gate_up(x), down.weight)
        return super().forward(x)


@functools.lru_cache(maxsize=None)
def _installed_class(mlp_class: type) -> type:
    return type(mlp_class.__name__, (_FusedSwigluMLP, mlp_class), {"__module__": mlp_class.__module__})


def install_fused_swiglu(model) -> None:
    """Turn on ``fuse_swiglu`` in every paddleformers MLP of ``model`` with fused gate/up weights and SiLU (unfused
    without gradients on the CPU; ``SwigluDown`` with them, where the down projection is a plain ``Linear``)."""
    for layer in model.sublayers():
        if isinstance(layer, MLP) and layer.fuse_up_gate and layer.act_type == "silu":
            layer.fuse_swiglu = True
            if not isinstance(layer, _FusedSwigluMLP):
                layer.__class__ = _installed_class(type(layer))
