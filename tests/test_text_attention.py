"""The text attention paddle_r1 installs over paddleformers' computes what paddleformers' own does."""
import numpy as np
import pytest
import paddle
from paddleformers.transformers.qwen2_5_vl.modeling import Qwen2_5_VLAttention, Qwen2_5_VLRotaryEmbedding

from paddle_r1.generation.generator import build_prompt_batch
from paddle_r1.models.text_attention import FastTextAttention, MergedMRoPE


def _use(model, rotary_cls, attention_cls):
    text = model.model.language_model
    text.rotary_emb.__class__ = rotary_cls
    for layer in text.layers:
        layer.self_attn.__class__ = attention_cls


def test_logits_and_gradients_equal_paddleformers_attention(tiny, rec_samples):
    """Images (M-RoPE's three axes differ), left padding and grouped-query heads (4 heads over 2 KV heads)."""
    model, processor = tiny
    prompt, _ = build_prompt_batch(rec_samples[:3], processor, "{Question}")
    assert isinstance(model.model.language_model.layers[0].self_attn, FastTextAttention)
    inputs = dict(input_ids=prompt.input_ids, attention_mask=prompt.attention_mask,
                  pixel_values=prompt.pixel_values, image_grid_thw=prompt.image_grid_thw)
    results = []
    try:
        for classes in ((MergedMRoPE, FastTextAttention), (Qwen2_5_VLRotaryEmbedding, Qwen2_5_VLAttention)):
            _use(model, *classes)
            model.model.rope_deltas = None
            logits = model(**inputs).logits
            (logits * prompt.attention_mask.unsqueeze(-1).astype(logits.dtype)).sum().backward()
            weight = model.model.language_model.layers[0].self_attn.qkv_proj.weight
            results.append((logits.numpy(), weight.grad.numpy().copy()))
            model.clear_gradients()
    finally:
        _use(model, MergedMRoPE, FastTextAttention)
    (fast_logits, fast_grad), (own_logits, own_grad) = results
    np.testing.assert_allclose(fast_logits, own_logits, atol=1e-5)
    np.testing.assert_allclose(fast_grad, own_grad, rtol=1e-4, atol=1e-5)


def merge_mrope_sections(table: paddle.Tensor, mrope_section) -> paddle.Tensor:
    """paddleformers' merge of its [3, B, L, D] per-axis cos or sin -> [B, 1, L, D]: channel section i taken from axis
    i % 3, as ``apply_multimodal_rotary_pos_emb`` does in every layer."""
    pieces = table.split(list(mrope_section) * 2, axis=-1)
    return paddle.concat([piece[i % 3] for i, piece in enumerate(pieces)], axis=-1).unsqueeze(1)


def test_merged_rotary_tables_are_paddleformers(tiny):
    """Positions differing on the three M-RoPE axes, up to 40,000: the merged tables equal paddleformers' [3, B, L, D]
    tables merged over the sections, with and without an attention scaling, to one float32 rounding (the angles are
    the same products; Paddle's CPU cos and sin round an element a hair differently in a tensor's vectorised body
    and in its tail, and the element sits elsewhere in the two tensors)."""
    model, _ = tiny
    rotary = model.model.language_model.rotary_emb
    section = rotary.config.rope_parameters["mrope_section"]
    positions = paddle.to_tensor(np.random.default_rng(0).integers(0, 40_000, [3, 2, 17]))
    probe = paddle.zeros([1], dtype="float32")
    scaling = rotary.attention_scaling
    try:
        for rotary.attention_scaling in (scaling, 0.7):
            cos, sin = MergedMRoPE.forward(rotary, probe, positions)
            own_cos, own_sin = Qwen2_5_VLRotaryEmbedding.forward(rotary, probe, positions)
            for got, own in ((cos, own_cos), (sin, own_sin)):
                np.testing.assert_allclose(got.numpy(), merge_mrope_sections(own, section).numpy(), rtol=0,
                                           atol=1.2e-7)
    finally:
        rotary.attention_scaling = scaling


def test_half_rotation_is_rotate_half_exactly():
    from paddleformers.transformers.qwen2_5_vl.modeling import rotate_half

    from paddle_r1.models.text_attention import half_rotation

    x = paddle.randn([2, 3, 5, 8]) * 100
    np.testing.assert_array_equal(paddle.matmul(x, half_rotation(8, x.dtype)).numpy(), rotate_half(x).numpy())


def _causal_mask(rows: int, length: int, keys: int, padding: list[int]) -> paddle.Tensor:
    """[rows, 1, length, keys] additive: query i sees keys up to keys - length + i, minus each row's left padding."""
    allowed = np.tril(np.ones([length, keys], bool), keys - length)[None].repeat(rows, 0)
    for row, pad in enumerate(padding):
        allowed[row, :, :pad] = False
    return paddle.to_tensor(np.where(allowed, 0.0, -np.inf).astype("float32")[:, None])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_query_blocks_give_the_whole_squares_attention_and_gradients(dtype):
    """From 2 x QUERY_BLOCK queries on, ``grouped_eager_attention`` attends block by block over the keys up to each
    block's last position: under a causal mask (left padding, a cached prefix of 7 keys) its output and gradients
    (computed by its own backward) equal the whole square's (autograd's); under a mask that lets queries see later
    keys they differ, so the blocks really skip those keys. float64 takes the softmax's path for a dtype other than
    float32 (computed in float32, as bfloat16 is on a GPU), which the CPU has no bfloat16 products to run."""
    from paddle_r1.models.query_blocks import QUERY_BLOCK
    from paddle_r1.models.text_attention import grouped_attention, grouped_eager_attention

    rng = np.random.default_rng(0)
    length, prefix = QUERY_BLOCK * 2 + 5, 7
    keys = prefix + length

    shapes = ([2, 4, length, 8], [2, 2, keys, 8], [2, 2, keys, 8])  # query, key, value: 4 heads over 2 KV heads
    values = [rng.normal(size=shape).astype(dtype) for shape in shapes]
    weights = paddle.to_tensor(rng.normal(size=[2, length, 32]).astype(dtype))

    def run(attention, mask):
        q, k, v = (paddle.to_tensor(array, stop_gradient=False) for array in values)
        out = attention(q, k, v, mask, 0.125)
        (out * weights).sum().backward()
        return out.numpy(), q.grad.numpy(), k.grad.numpy(), v.grad.numpy()

    causal = _causal_mask(2, length, keys, padding=[0, 3]).astype(dtype)
    for blocked, whole in zip(run(grouped_eager_attention, causal), run(grouped_attention, causal)):
        assert blocked.dtype == np.dtype(dtype)
        np.testing.assert_allclose(blocked, whole, rtol=1e-5, atol=1e-6)
    sees_later = paddle.zeros([2, 1, length, keys], dtype)
    assert not np.allclose(run(grouped_eager_attention, sees_later)[0], run(grouped_attention, sees_later)[0])


def test_query_blocks_keep_no_probabilities_for_the_backward():
    """After a forward that will be differentiated, the whole square keeps its [B, kv_heads, group x L, S]
    probabilities (Paddle's host allocator holds them until the backward); the blocks keep none (their backward
    computes them again), only what the caller already holds."""
    from paddle.base import core

    from paddle_r1.models.query_blocks import QUERY_BLOCK
    from paddle_r1.models.text_attention import grouped_attention, grouped_eager_attention

    length = keys = QUERY_BLOCK * 2 + 5
    probabilities = 2 * 4 * length * keys * 4  # bytes: 2 rows x 4 heads x L x S float32
    mask = _causal_mask(2, length, keys, padding=[0, 3])
    q, k, v = (paddle.randn(shape) for shape in ([2, 4, length, 8], [2, 2, keys, 8], [2, 2, keys, 8]))
    for tensor in (q, k, v):
        tensor.stop_gradient = False

    def kept(attention) -> int:
        before = core.host_memory_stat_current_value("Allocated", 0)
        out = attention(q, k, v, mask, 0.125)
        held = core.host_memory_stat_current_value("Allocated", 0) - before - 4 * int(np.prod(out.shape))
        out.sum().backward()
        return held

    assert kept(grouped_attention) >= probabilities
    assert kept(grouped_eager_attention) < probabilities / 10


def test_query_blocks_give_no_gradient_to_keys_and_values_that_take_none():
    """Keys and values that take no gradient (a frozen prompt's cache) under a query that does: the blocks' backward
    returns None for them (Paddle raised on a gradient returned for one) and the query's gradient of the whole
    square."""
    from paddle_r1.models.query_blocks import QUERY_BLOCK
    from paddle_r1.models.text_attention import grouped_attention, grouped_eager_attention

    length = QUERY_BLOCK * 2
    mask = _causal_mask(1, length, length, padding=[0])
    paddle.seed(3)
    q, k, v = (paddle.randn(shape) for shape in ([1, 4, length, 8], [1, 2, length, 8], [1, 2, length, 8]))
    grads = []
    for attention in (grouped_eager_attention, grouped_attention):
        query = q.clone()
        query.stop_gradient = False
        attention(query, k, v, mask, 0.125).sum().backward()
        grads.append(query.grad.numpy())
        assert k.grad is None and v.grad is None
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-5, atol=1e-6)


def test_rotation_keeps_nothing_of_its_input_and_gives_autograds_gradient():
    """``rotate`` under gradients (``_Rotation``): the gradient autograd gives through the plain ops, while Paddle's
    allocator holds after the forward only the output (autograd held at least one more tensor of x's size)."""
    from paddle.base import core

    from paddle_r1.models.text_attention import _rotated, half_rotation, rotate

    rng = np.random.default_rng(4)
    shape = [2, 300, 8, 64]
    half_rotation(64, paddle.float32)  # made once, cached: not counted below
    cos, sin = (paddle.to_tensor(rng.normal(size=shape).astype("float32")) for _ in range(2))
    weights = paddle.to_tensor(rng.normal(size=shape).astype("float32"))
    values = rng.normal(size=shape).astype("float32")
    size = 4 * int(np.prod(shape))
    results = []
    for rotation in (rotate, _rotated):
        x = paddle.to_tensor(values, stop_gradient=False)
        before = core.host_memory_stat_current_value("Allocated", 0)
        out = rotation(x * 2.0, cos, sin)  # x * 2.0: a fresh input whose producer keeps nothing of it
        held = core.host_memory_stat_current_value("Allocated", 0) - before
        (out * weights).sum().backward()
        results.append((out.numpy(), x.grad.numpy(), held))
    (out, grad, held), (plain_out, plain_grad, plain_held) = results
    np.testing.assert_array_equal(out, plain_out)
    np.testing.assert_allclose(grad, plain_grad, rtol=1e-6, atol=1e-6)
    assert held == size and plain_held >= 2 * size


def test_under_auto_cast_autograd_differentiates_the_plain_ops(monkeypatch):
    """Under ``paddle.amp.auto_cast`` (the float16 recipe on a V100) the rotation and the attention's blocks run as
    plain ops, whose casts autograd records (the written-out backwards would meet mixed dtypes): the same values and
    gradients as the written-out ones give outside it (on a CPU auto_cast casts nothing)."""
    from paddle_r1.models import text_attention
    from paddle_r1.models.query_blocks import QUERY_BLOCK

    length = 2 * QUERY_BLOCK
    mask = _causal_mask(1, length, length, padding=[0])
    paddle.seed(6)
    q, k, v = (paddle.randn(shape) for shape in ([1, 4, length, 8], [1, 2, length, 8], [1, 2, length, 8]))
    cos, sin = paddle.randn([1, length, 4, 8]), paddle.randn([1, length, 4, 8])

    def run():
        query = q.clone()
        query.stop_gradient = False
        rotated = text_attention.rotate(query.transpose([0, 2, 1, 3]), cos, sin).transpose([0, 2, 1, 3])
        out = text_attention.grouped_eager_attention(rotated, k, v, mask, 0.125)
        out.sum().backward()
        return out.numpy(), query.grad.numpy()

    written_out = run()

    def refuse(*args):
        raise AssertionError("a written-out backward under auto_cast")

    monkeypatch.setattr(text_attention._Rotation, "apply", refuse)
    monkeypatch.setattr(text_attention.BlockedAttention, "apply", refuse)
    with paddle.amp.auto_cast(level="O1", dtype="float16"):
        plain = run()
    for mine, theirs in zip(written_out, plain):
        np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-5)
