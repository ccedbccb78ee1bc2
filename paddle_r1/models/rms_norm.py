"""RMSNorm without the per-call costs of paddleformers 1.2.0's unfused path, and which of the two paths a device takes.

paddleformers' ``RMSNorm`` calls Paddle's fused kernel (``fused_rms_norm_ext``) when the config's ``fuse_rms_norm`` is
true, its default; the kernel is registered for GPUs, not for CPU, so ``fused_norm_runs`` asks the kernel itself
once and the loader sets ``fuse_rms_norm`` to its answer (a checkpoint's saved value, written on another device,
does not decide). Where the kernel is missing, ``FastRMSNorm`` replaces the unfused path's per-call costs: ``pow(2)`` (a
generic power kernel whose forward and gradient each cost several times ``x * x``'s), an ``auto_cast(False)`` context
and a device query on every call; and ``rsqrt(variance) * hidden`` (the broadcast [.., 1] operand first: many times
slower on CPU than ``hidden * rsqrt(variance)``, the same products). In a profile of a GRPO step on CPU these were a
large share of the rollout's decode step (9 norms a token).

Outside an AMP context the values are paddleformers' (``x * x`` is ``pow(x, 2)`` exactly) and, in float32 with
gradients on, the gradient is written out (``_Float32RMSNorm``: the same up to rounding, faster on CPU); inside one
this falls back to paddleformers' forward, whose context keeps the statistics in float32."""
from __future__ import annotations

import paddle
from paddle.amp.auto_cast import amp_state
from paddle.autograd import PyLayer
from paddleformers.nn import norm as paddleformers_norm
from paddleformers.nn.norm import RMSNorm

from .sums import column_sums, row_sums


def fused_norm_runs() -> bool:
    """Whether paddleformers' fused RMSNorm kernel runs on the current device: one call of the kernel on a [1, 8]
    tensor, through the name paddleformers' ``RMSNorm`` calls it by (so a test that replaces the kernel by its
    reference is asked, not Paddle). Paddle answers a missing kernel with ``RuntimeError`` (NotFound: not
    registered)."""
    try:
        paddleformers_norm.fused_rms_norm_ext(paddle.ones([1, 8]), paddle.ones([8]), 1e-6)
    except RuntimeError:
        return False
    return True


def computes_rms_norm(layer) -> bool:
    """Whether ``layer`` is an RMSNorm that computes exactly ``rms_norm(x, weight, epsilon)``: paddleformers' own,
    fused or not (``fused_rms_norm_ext`` is that product, the statistics in float32), or ``FastRMSNorm``. A subclass
    might add something; it is not one."""
    return type(layer) in (RMSNorm, FastRMSNorm)


def inverse_rms(x: paddle.Tensor, epsilon: float) -> paddle.Tensor:
    """rsqrt(mean(x^2) + epsilon) over the last axis, kept as [..., 1]."""
    return paddle.rsqrt((x * x).mean(-1, keepdim=True) + epsilon)


def rms_norm(hidden_states: paddle.Tensor, weight: paddle.Tensor, epsilon: float) -> paddle.Tensor:
    """hidden * rsqrt(mean(hidden^2) + epsilon) * weight, the statistics in float32 (``FastRMSNorm`` outside AMP)."""
    hidden_states = hidden_states * inverse_rms(hidden_states.astype("float32"), epsilon)
    if weight.dtype in (paddle.float16, paddle.bfloat16):
        hidden_states = hidden_states.astype(weight.dtype)
    return hidden_states * weight


class _Float32RMSNorm(PyLayer):
    """y = x̂ w, x̂ = x r, r = rsqrt(mean(x^2) + epsilon), over float32 rows: the forward is ``rms_norm``'s kernels
    (the same numbers), the gradient written out,

        dx = r (g w - x̂ mean(g w x̂)),    dw = sum over rows of g x̂,

    the row means and the sums over rows as products with a constant vector (``sums.py``). Paddle's own
    gradients of the broadcast products reduce over the broadcast axes several times slower: 6.9 ms against 2.4 for
    one norm's forward and backward over [16, 104, 256] (``benchmarks/experiments/written_gradients.py``)."""

    @staticmethod
    def forward(ctx, x, weight, epsilon):
        scale = inverse_rms(x, epsilon)
        normed = x * scale
        ctx.save_for_backward(normed, scale, weight)
        ctx.input_needs_grad = not x.stop_gradient
        return normed * weight

    @staticmethod
    def backward(ctx, grad):
        normed, scale, weight = ctx.saved_tensor()
        grad_x = None
        if ctx.input_needs_grad:  # not for an input that takes no gradient (Paddle refuses one returned)
            weighted = grad * weight
            row_mean = row_sums(weighted * normed, 1.0 / normed.shape[-1]).unsqueeze(-1)
            grad_x = (weighted - normed * row_mean) * scale
        return grad_x, None if weight.stop_gradient else column_sums(grad * normed)


class FastRMSNorm(RMSNorm):
    def forward(self, hidden_states):
        if amp_state() is not None:
            return super().forward(hidden_states)
        if (paddle.is_grad_enabled() and hidden_states.dtype == paddle.float32
                and self.weight.dtype == paddle.float32):
            return _Float32RMSNorm.apply(hidden_states, self.weight, self.variance_epsilon)
        return rms_norm(hidden_states, self.weight, self.variance_epsilon)


def install_fast_rms_norm(model) -> None:
    """Swap the class of every unfused paddleformers RMSNorm in ``model`` (same parameters)."""
    for layer in model.sublayers():
        if type(layer) is RMSNorm and not layer.config.get("fuse_rms_norm", True):
            layer.__class__ = FastRMSNorm
