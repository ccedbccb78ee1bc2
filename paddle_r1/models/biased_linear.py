"""A linear layer with a bias, x W + b, whose gradient is written out where Paddle's own is slow: float32 rows on the
CPU with gradients on, outside AMP (measured on CPU only; a GPU keeps Paddle's kernels).

    dx = g W^T,    dW = x^T g,    db = the sum of g over the rows

Paddle's autograd computes db with its reduction over every row, several times slower on CPU than a product with a
vector of ones (``sums.column_sums``): the qkv product's forward and backward at the speed anchor's training sizes
([16, 104, 256] x [256, 512]) took 19.73 ms against 14.63 (``benchmarks/experiments/written_gradients.py``), the
same values and gradients up to float32 rounding (``tests/test_biased_linear.py``)."""
from __future__ import annotations

import paddle
from paddle.amp.auto_cast import amp_state
from paddle.autograd import PyLayer

from .sums import column_sums


class _BiasedLinear(PyLayer):
    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        ctx.trains = (not weight.stop_gradient, not bias.stop_gradient)
        return paddle.nn.functional.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensor()
        trains_weight, trains_bias = ctx.trains
        grad_x = paddle.matmul(grad, weight, transpose_y=True)
        grad_weight = paddle.matmul(x.reshape([-1, x.shape[-1]]), grad.reshape([-1, grad.shape[-1]]),
                                    transpose_x=True) if trains_weight else None
        return grad_x, grad_weight, column_sums(grad) if trains_bias else None


def biased_linear(layer: paddle.nn.Layer, x: paddle.Tensor) -> paddle.Tensor:
    """``layer(x)``; for a plain ``nn.Linear`` with a bias on float32 CPU rows with gradients on (outside AMP), with
    the gradient above. Any other layer (LoRA, tensor parallel) or device runs its own forward."""
    if (type(layer) is paddle.nn.Linear and layer.bias is not None and paddle.is_grad_enabled()
            and amp_state() is None and x.dtype == paddle.float32 and layer.weight.dtype == paddle.float32
            and x.place.is_cpu_place()):
        return _BiasedLinear.apply(x, layer.weight, layer.bias)
    return layer(x)
