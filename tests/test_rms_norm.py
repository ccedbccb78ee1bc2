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
    # the gradients are written out (row means and sums over rows as products): rounding apart
    np.testing.assert_allclose(x_grad, own_x_grad, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(w_grad, own_w_grad, rtol=1e-6, atol=1e-6)


def test_a_frozen_weight_gets_no_gradient_and_the_input_its_own(tiny):
    """LoRA freezes the norms' weights: the written-out backward then returns the input's gradient alone, the same
    as paddleformers' norm gives; under no_grad the plain kernels run, with the same values."""
    norm = tiny[0].model.language_model.norm
    paddle.seed(1)
    x = paddle.randn([3, 4, norm.weight.shape[0]])
    x.stop_gradient = False
    grads = []
    norm.weight.clear_gradient(False)  # None, not zeros
    norm.weight.stop_gradient = True
    try:
        for cls in (FastRMSNorm, RMSNorm):
            norm.__class__ = cls
            (norm(x) * x).sum().backward()
            grads.append(x.grad.numpy().copy())
            assert norm.weight.grad is None
            x.clear_gradient()
        with paddle.no_grad():
            values = [cls.forward(norm, x).numpy() for cls in (FastRMSNorm, RMSNorm)]
    finally:
        norm.__class__ = FastRMSNorm
        norm.weight.stop_gradient = False
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(*values)


def test_an_input_without_gradient_gets_none_and_the_weight_its_own(tiny):
    """Inputs that take no gradient (embeddings of a frozen table; ``benchmarks/memory_estimate.py``'s random ones)
    under a trained weight: the written-out backward returns None for the input (Paddle raised on a gradient returned
    for it) and the weight's gradient paddleformers' norm gives."""
    norm = tiny[0].model.language_model.norm
    paddle.seed(2)
    x = paddle.randn([3, 4, norm.weight.shape[0]])
    weights = paddle.randn(x.shape)
    grads = []
    try:
        for cls in (FastRMSNorm, RMSNorm):
            norm.__class__ = cls
            (norm(x) * weights).sum().backward()
            grads.append(norm.weight.grad.numpy().copy())
            assert x.grad is None
            norm.weight.clear_gradient()
    finally:
        norm.__class__ = FastRMSNorm
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-6, atol=1e-6)
