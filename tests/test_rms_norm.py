"""The RMSNorm paddle_r1 installs over paddleformers' unfused one computes the same numbers and gradients."""
import numpy as np
import paddle
from paddleformers.nn.norm import RMSNorm

from paddle_r1.models.rms_norm import FastRMSNorm


def test_installed_in_text_and_vision(tiny):
    model, _ = tiny
    norms = [layer for layer in model.sublayers() if isinstance(layer, RMSNorm)]
    assert norms and all(type(layer) is FastRMSNorm for layer in norms)
    assert any(type(layer) is FastRMSNorm for layer in model.model.visual.sublayers())


def test_values_and_gradients_equal_paddleformers(tiny):
    norm = tiny[0].model.language_model.norm
    paddle.seed(0)
    x = paddle.randn([2, 5, norm.weight.shape[0]]) * 3
    x.stop_gradient = False
    weights = paddle.randn(x.shape)
    results = []
    try:
        for cls in (FastRMSNorm, RMSNorm):
            norm.__class__ = cls
            out = norm(x)
            (out * weights).sum().backward()
            results.append((out.numpy(), x.grad.numpy().copy(), norm.weight.grad.numpy().copy()))
            x.clear_gradient()
            norm.weight.clear_gradient()
    finally:
        norm.__class__ = FastRMSNorm
    (out, x_grad, w_grad), (own_out, own_x_grad, own_w_grad) = results
    np.testing.assert_array_equal(out, own_out)  # x * x is pow(x, 2) exactly
    # the gradient of x * x sums two products where pow's kernel computes 2 x: rounding apart
    np.testing.assert_allclose(x_grad, own_x_grad, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(w_grad, own_w_grad)
