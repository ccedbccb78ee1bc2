"""The text MLPs run Paddle's fused ``swiglu`` (models/swiglu.py): the same numbers and gradients as paddleformers'
unfused silu(gate) * up up to float32 rounding, and one activation fewer kept for the backward."""
import numpy as np
import paddle
from paddleformers.nn.mlp import MLP


def _mlp_run(mlp, x, weights, fused: bool):
    mlp.fuse_swiglu = fused
    out = mlp(x)
    (out * weights).sum().backward()
    weight = getattr(mlp, mlp.gate_up_proj_name).weight
    result = out.numpy(), x.grad.numpy().copy(), weight.grad.numpy().copy()
    x.clear_gradient()
    weight.clear_gradient()
    mlp.down_proj.weight.clear_gradient()
    return result


def test_installed_in_the_text_decoder_only(tiny):
    model, _ = tiny
    text_mlps = [layer.mlp for layer in model.model.language_model.layers]
    assert text_mlps and all(isinstance(mlp, MLP) and mlp.fuse_swiglu for mlp in text_mlps)
    vision = [layer for layer in model.model.visual.sublayers() if isinstance(layer, MLP)]
    assert all(not layer.fuse_swiglu for layer in vision)  # unfused gate/up: swiglu would need a concat first


def test_values_and_gradients_equal_the_unfused_mlp(tiny):
    mlp = tiny[0].model.language_model.layers[0].mlp
    paddle.seed(0)
    x = paddle.randn([2, 7, mlp.hidden_size]) * 3
    x.stop_gradient = False
    weights = paddle.randn([2, 7, mlp.hidden_size])
    try:
        fused, unfused = (_mlp_run(mlp, x, weights, flag) for flag in (True, False))
    finally:
        mlp.fuse_swiglu = True
    for own, theirs in zip(fused, unfused):
        np.testing.assert_allclose(own, theirs, rtol=1e-5, atol=1e-6)


def test_one_activation_fewer_kept_for_the_backward(tiny):
    """What the autograd graph holds after the forward: the fused MLP's saved tensors are smaller by one
    [tokens, intermediate] tensor (the peak-memory gain measured in benchmarks/grpo_step.py)."""
    mlp = tiny[0].model.language_model.layers[0].mlp
    x = paddle.randn([1, 64, mlp.hidden_size])
    x.stop_gradient = False

    def held_bytes(fused: bool) -> int:
        mlp.fuse_swiglu = fused
        saved = []
        with paddle.autograd.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
            mlp(x)
        return sum(int(np.prod(t.shape)) * 4 for t in saved)

    try:
        fused, unfused = held_bytes(True), held_bytes(False)
    finally:
        mlp.fuse_swiglu = True
    assert fused > 0 and unfused - fused >= 64 * mlp.intermediate_size * 4, (fused, unfused)


def test_without_gradients_the_cpu_takes_the_unfused_form(tiny):
    """Under ``no_grad`` on the CPU the installed MLP computes silu(gate) * up, bit for bit (faster there, nothing
    kept); with gradients the fused kernel, which differs from it by rounding on this input."""
    mlp = tiny[0].model.language_model.layers[0].mlp
    paddle.seed(1)
    x = paddle.randn([2, 7, mlp.hidden_size]) * 3
    with paddle.no_grad():
        gate, up = getattr(mlp, mlp.gate_up_proj_name)(x).chunk(2, axis=-1)
        unfused = mlp.down_proj(paddle.nn.functional.silu(gate) * up).numpy()
        np.testing.assert_array_equal(mlp(x).numpy(), unfused)
    fused = mlp(x).numpy()
    assert not np.array_equal(fused, unfused)
    np.testing.assert_allclose(fused, unfused, rtol=1e-5, atol=1e-6)


def test_the_down_products_input_is_computed_again_in_the_backward(tiny):
    """``SwigluDown``: the values and every gradient (the input's, the gate/up weight's, the down weight's) of
    Paddle's ``swiglu`` then the down ``Linear`` under autograd, while Paddle's allocator holds after the forward only
    the gate/up product and the output, not the activation (the down product's input, which autograd keeps)."""
    from paddle.base import core

    mlp = tiny[0].model.language_model.layers[0].mlp
    gate_up, down = getattr(mlp, mlp.gate_up_proj_name), mlp.down_proj
    paddle.seed(2)
    tokens = 300
    values = (paddle.randn([1, tokens, mlp.hidden_size]) * 3).numpy()
    weights = paddle.randn([1, tokens, mlp.hidden_size])

    def autograd_form(x):
        return down(paddle.incubate.nn.functional.swiglu(gate_up(x)))

    results = []
    for form in (mlp, autograd_form):
        x = paddle.to_tensor(values, stop_gradient=False)
        before = core.host_memory_stat_current_value("Allocated", 0)
        out = form(x)
        held = core.host_memory_stat_current_value("Allocated", 0) - before
        (out * weights).sum().backward()
        results.append([out.numpy(), x.grad.numpy(), gate_up.weight.grad.numpy().copy(),
                        down.weight.grad.numpy().copy(), held])
        gate_up.weight.clear_gradient()
        down.weight.clear_gradient()
    (*own, held), (*theirs, autograd_held) = results
    for mine, reference in zip(own, theirs):
        np.testing.assert_allclose(mine, reference, rtol=1e-5, atol=1e-5)
    # held: the gate/up product (kept) and the output, nothing of the activation's [tokens, intermediate]
    assert held == tokens * (2 * mlp.intermediate_size + mlp.hidden_size) * 4 < autograd_held, (held, autograd_held)


def test_under_auto_cast_the_mlp_takes_paddleformers_forward(tiny, monkeypatch):
    """Under ``paddle.amp.auto_cast`` the installed MLP runs paddleformers' fused forward (autograd records the
    casts), not ``SwigluDown``: the same values and gradients (on a CPU auto_cast casts nothing)."""
    from paddle_r1.models import swiglu

    mlp = tiny[0].model.language_model.layers[0].mlp
    paddle.seed(3)
    values = (paddle.randn([1, 9, mlp.hidden_size]) * 3).numpy()

    def run():
        x = paddle.to_tensor(values, stop_gradient=False)
        out = mlp(x)
        out.sum().backward()
        result = out.numpy(), x.grad.numpy(), mlp.down_proj.weight.grad.numpy().copy()
        mlp.clear_gradients()
        return result

    written_out = run()

    def refuse(*args):
        raise AssertionError("SwigluDown under auto_cast")

    monkeypatch.setattr(swiglu.SwigluDown, "apply", refuse)
    with paddle.amp.auto_cast(level="O1", dtype="float16"):
        plain = run()
    for mine, theirs in zip(written_out, plain):
        np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-5)
