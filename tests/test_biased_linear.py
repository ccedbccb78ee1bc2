"""The qkv product's linear layer with its gradient written out gives what Paddle's own linear layer gives."""
import numpy as np
import paddle
import pytest

from paddle_r1.models.biased_linear import _BiasedLinear, biased_linear


def _gradients(layer, x, use_written_out):
    x = x.detach()
    x.stop_gradient = False
    out = biased_linear(layer, x) if use_written_out else layer(x)
    (out * paddle.arange(out.shape[-1], dtype=out.dtype)).sum().backward()
    grads = [x.grad.numpy()] + [None if p.grad is None else p.grad.numpy().copy() for p in (layer.weight, layer.bias)]
    layer.clear_gradients(False)
    return out.numpy(), grads


@pytest.mark.parametrize("frozen", [(), ("weight",), ("bias",), ("weight", "bias")])
def test_values_and_gradients_equal_paddles_linear(frozen):
    paddle.seed(0)
    layer = paddle.nn.Linear(16, 24)
    for name in frozen:
        getattr(layer, name).stop_gradient = True
    x = paddle.randn([3, 5, 16])
    written_out, own = _gradients(layer, x, True), _gradients(layer, x, False)
    np.testing.assert_array_equal(written_out[0], own[0])
    for mine, theirs, name in zip(written_out[1], own[1], ("x", "weight", "bias")):
        assert (mine is None) == (theirs is None) == (name in frozen), name
        if mine is not None:
            np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-5)


def test_only_plain_float32_linear_layers_with_gradients_take_it(monkeypatch):
    calls, apply = [], _BiasedLinear.apply
    monkeypatch.setattr(_BiasedLinear, "apply", lambda *args: calls.append(args) or apply(*args))
    x = paddle.randn([2, 16])
    biased_linear(paddle.nn.Linear(16, 8), x)
    assert len(calls) == 1
    biased_linear(paddle.nn.Linear(16, 8, bias_attr=False), x)
    with paddle.no_grad():
        biased_linear(paddle.nn.Linear(16, 8), x)
    assert len(calls) == 1
