"""A faster forward for Qwen2.5-VL's text attention, installed over paddleformers' on the loaded model.

Three costs of paddleformers 1.2.0's text decoder, seen in a profile of a GRPO step on CPU:

- M-RoPE: ``apply_multimodal_rotary_pos_emb`` splits the [3, B, L, head_dim] cos/sin tables into the
  temporal/height/width sections and concatenates them again in every layer of every call. Here the rotary
  embedding returns the merged [B, 1, L, head_dim] tables once per forward and each layer only rotates.
- Grouped-query attention under ``eager``: ``repeat_kv`` copies K and V ``num_heads / num_key_value_heads``
  times. Here the query heads of a group are stacked instead, [B, kv_heads, group * L, head_dim], and multiply
  the group's one K and V: the same dot products, no copies.
- Broadcasting: Paddle's CPU kernels add or multiply a broadcast operand (the rotary tables over heads, the mask
  over heads) several times slower than the same operation on an expanded copy, the copy included (docs/performance.md,
  How the step is made fast); the tables and the mask are expanded.
- Rotating the query and the key heads apart, after moving the heads first, took 7.8 ms of a layer's forward at
  the speed anchor's training sizes (16 rows of 64 tokens, ``benchmarks/experiments/rotary_layout.py``): two
  expands per layer and products over strided views. The whole qkv product is rotated instead, in the layout it
  comes in, by tables laid out once per forward (``RotaryTables``; the value rows with cos 1 and sin 0), before
  its heads are split off: 1.4 ms, the same numbers.

The numbers are the same operations in the same order per element but one: the scaling multiplies the query
before the product, not the scores after it (the same numbers where the scaling is a power of two, head_dim 64 or
256; float32 rounding apart otherwise), so the logits match paddleformers' own forward (tests/test_models.py) and
transformers' (tests/test_parity.py). Other attention implementations (sdpa
on GPU) keep paddleformers' kernel dispatch, given the mask and ``is_causal`` of ``causal_mask.sdpa_causality``:
without them, queries after a KV cache saw only the cache's first keys (see causal_mask.py).
"""
from __future__ import annotations

import functools

import numpy as np
import paddle
from paddle import _C_ops
from paddle.amp.auto_cast import amp_state
from paddle.autograd import PyLayer
from paddleformers.nn.attention.interface import ALL_ATTENTION_FUNCTIONS
from paddleformers.transformers.qwen2_5_vl.modeling import Qwen2_5_VLAttention, Qwen2_5_VLRotaryEmbedding

from .biased_linear import biased_linear
from .causal_mask import sdpa_causality
from .query_blocks import in_blocks, query_blocks
from .transposes import transposed


@functools.lru_cache(maxsize=None)
def _section_axes(mrope_section: tuple) -> tuple:
    """The position axis (temporal 0, height 1, width 2) each rotary channel takes: the channels in sections
    ``mrope_section`` twice over, section i from axis i % 3 (Qwen2-VL's M-RoPE, as paddleformers'
    ``apply_multimodal_rotary_pos_emb`` merges its tables in every layer)."""
    return tuple(i % 3 for i, size in enumerate(list(mrope_section) * 2) for _ in range(size))


class RotaryTables(tuple):
    """(cos, sin) [B, 1, L, D] of one forward, and their layout over a layer's qkv product (``over_qkv``), made at
    the first layer that asks and shared by all the others (and by their gradients, which keep one copy)."""

    def __new__(cls, cos: paddle.Tensor, sin: paddle.Tensor):
        tables = super().__new__(cls, (cos, sin))
        tables.layouts = {}
        return tables

    def over_qkv(self, kv_heads: int, groups: int) -> tuple[paddle.Tensor, paddle.Tensor]:
        key = (kv_heads, groups)
        if key not in self.layouts:
            self.layouts[key] = qkv_rotation_tables(*self, kv_heads, groups)
        return self.layouts[key]


def qkv_rotation_tables(cos: paddle.Tensor, sin: paddle.Tensor, kv_heads: int, groups: int
                        ) -> tuple[paddle.Tensor, paddle.Tensor]:
    """cos and sin [B, L, kv_heads * (groups + 2), D] laid out as a qkv product's heads are (per key/value head:
    its ``groups`` query heads, its key, its value), the value's rows 1 and 0 (it passes unrotated), expanded:
    Paddle's CPU kernels multiply a broadcast operand several times slower than an expanded copy."""
    batch, _, length, dim = cos.shape
    one, zero = paddle.ones([batch, length, 1, dim], cos.dtype), paddle.zeros([batch, length, 1, dim], cos.dtype)

    def laid_out(table, value_row):
        rows = table.transpose([0, 2, 1, 3]).expand([batch, length, groups + 1, dim])
        per_kv_head = paddle.concat([rows, value_row], axis=2).unsqueeze(2)
        return per_kv_head.expand([batch, length, kv_heads, groups + 2, dim]).reshape(
            [batch, length, kv_heads * (groups + 2), dim])

    return laid_out(cos, one), laid_out(sin, zero)


class MergedMRoPE(Qwen2_5_VLRotaryEmbedding):
    """The rotary tables of one forward, merged over M-RoPE's sections once for all layers.

    paddleformers' forward computes cos and sin over all three position axes, [3, B, L, D] (its angles a transposed
    view, copied by Paddle's slow strided copy on CPU), and each channel then keeps one axis's (``_section_axes``).
    Here each channel's position is picked first and the angles are position x inverse frequency, the same single
    float32 product as paddleformers' outer product: the same angles, a third of the cos and sin, the tables within
    one float32 rounding of paddleformers' (Paddle's CPU cos rounds an element of a tensor's vectorised body and of
    its tail a hair apart; tests/test_text_attention.py)."""

    def forward(self, x, position_ids):
        with paddle.amp.auto_cast(enable=False):
            section = tuple(self.config.rope_parameters["mrope_section"])
            inverse_frequency = self.inv_freq.astype("float32")
            positions = transposed(position_ids.astype("float32"), [1, 2, 0])  # [B, L, 3]
            axes = paddle.to_tensor(_section_axes(section), dtype="int64", place=positions.place)
            channel_positions = paddle.index_select(positions, axes, axis=2)  # [B, L, D]
            angles = channel_positions * paddle.concat([inverse_frequency, inverse_frequency])
            cos, sin = angles.cos().unsqueeze(1), angles.sin().unsqueeze(1)
            if self.attention_scaling != 1.0:
                cos, sin = cos * self.attention_scaling, sin * self.attention_scaling
        return RotaryTables(cos.astype(x.dtype), sin.astype(x.dtype))


@functools.lru_cache(maxsize=None)
def half_rotation(dim: int, dtype) -> paddle.Tensor:
    """R [dim, dim] with x @ R == rotate_half(x) == concat(-x2, x1) exactly: each column holds one +-1, the other
    products are zeros. One matrix product (and one for its gradient) instead of two slices, a negation and a
    concatenation, whose gradients cost several times as much on CPU."""
    half = dim // 2
    r = np.zeros([dim, dim], "float32")
    r[half:, :half], r[:half, half:] = -np.eye(half), np.eye(half)
    return paddle.to_tensor(r, dtype=dtype)


def rotate(x: paddle.Tensor, cos: paddle.Tensor, sin: paddle.Tensor) -> paddle.Tensor:
    """x * cos + rotate_half(x) * sin, the tables of x's shape (Paddle's operators called without their Python
    wrappers: the decode step calls it per layer and token). Differentiated by ``_Rotation`` where x takes a gradient
    and the tables do not (a forward's rotary tables), outside ``paddle.amp.auto_cast`` (whose casts autograd records
    on the plain ops)."""
    if (paddle.is_grad_enabled() and not x.stop_gradient and cos.stop_gradient and sin.stop_gradient
            and amp_state() is None):
        return _Rotation.apply(x, cos, sin)
    return _rotated(x, cos, sin)


def _rotated(x: paddle.Tensor, cos: paddle.Tensor, sin: paddle.Tensor) -> paddle.Tensor:
    return _C_ops.add(_C_ops.multiply(x, cos), _C_ops.multiply(_C_ops.matmul(x, half_rotation(x.shape[-1], x.dtype),
                                                                            False, False), sin))


class _Rotation(PyLayer):
    """y = x cos + (x R) sin (``rotate``; R = ``half_rotation``) keeping nothing of x for the backward: y is linear in
    x, so its gradient needs only the tables, which every layer of a forward shares,

        dx = g cos + (g sin) R^T

    (the ops autograd would take, the same numbers). Through autograd's ops the speed anchor's text attention kept 193
    MiB a layer over 16 rows of 1,024 tokens (12 x hidden per token), 129 MiB (8 x hidden) this way."""

    @staticmethod
    def forward(ctx, x, cos, sin):
        ctx.save_for_backward(cos, sin)
        return _rotated(x, cos, sin)

    @staticmethod
    def backward(ctx, grad):
        cos, sin = ctx.saved_tensor()
        rotation = half_rotation(grad.shape[-1], grad.dtype)
        turned_back = _C_ops.matmul(_C_ops.multiply(grad, sin), rotation, False, True)
        return _C_ops.add(_C_ops.multiply(grad, cos), turned_back), None, None


def grouped_eager_attention(query, key, value, attention_mask, scaling: float) -> paddle.Tensor:
    """softmax(q k^T * scaling + mask) v for query [B, H, L, D] and key/value [B, kv_heads, S, D], without
    repeating K and V over each group's heads; returns [B, L, H * D].

    With a mask per query (the decoder's, causal: query i sits at key position S - L + i and sees no later key) and at
    least ``2 * QUERY_BLOCK`` queries (``query_blocks.py``), the queries go in blocks (``BlockedAttention``): each block
    over the keys up to its last query's position (the later keys are -inf for the whole block, so each row's softmax
    and product are the same, but the masked triangle is never computed), and no block's probabilities kept for the
    backward, which computes them again. Eager attention over the whole [L, S] square grew faster than the rest with the
    completion length (``benchmarks/grpo_step.py --scaling``), and its probabilities, kept per layer for the backward,
    were a quarter of the anchor's training activations at 1,024 tokens (661 of 2,585 MiB). One layer's forward and
    backward in blocks is faster than the square at 1,024 tokens; at 256 tokens two blocks of 128 were slower than the
    square (the slices cost more than the small triangle): ``python benchmarks/experiments/decode_levers.py
    --no-cache``, its figures in benchmarks/README.md."""
    batch, heads, length, dim = query.shape
    if attention_mask is None or not in_blocks(length) or attention_mask.shape[2] != length:
        return grouped_attention(query, key, value, attention_mask, scaling)
    kv_heads = key.shape[1]
    grouped = query.reshape([batch, kv_heads, heads // kv_heads, length, dim])
    if amp_state() is None:
        out = BlockedAttention.apply(grouped, key, value, attention_mask, scaling)
    else:  # under auto_cast autograd differentiates the blocks' ops with the casts it records
        out = _attend_in_blocks(grouped, key, value, attention_mask, scaling)
    return transposed(out.reshape([batch, heads, length, dim]), [0, 2, 1, 3]).reshape([batch, length, heads * dim])


def _split_queries(query, keys: int) -> list:
    """(the block's queries [B, kv, group, size, D], first query, keys visible to it) per ``query_blocks`` block of
    query [B, kv, group, L, D]: one ``split``, whose gradient under autograd is one concatenation where a slice's is a
    zero tensor of the whole query's size per block."""
    plan = list(query_blocks(query.shape[3], keys))
    blocks = paddle.split(query, [size for _, size, _ in plan], axis=3)
    return [(block, start, visible) for block, (start, _, visible) in zip(blocks, plan)]


def _block_probabilities(block, key, mask, scaling, start, visible):
    """One query block's scaled query [B, kv, group * size, D] and P [B, kv, group * size, visible], for the block's
    queries [B, kv, group, size, D] from query ``start`` on."""
    batch, kv_heads, group, size, dim = block.shape
    scaled = (block * scaling).reshape([batch, kv_heads, group * size, dim])
    scores = paddle.matmul(scaled, key[:, :, :visible], transpose_y=True)
    scores = scores.reshape([batch, kv_heads, group, size, visible])
    block_mask = mask[:, :, start:start + size, :visible].unsqueeze(2)
    scores = (scores + block_mask.expand(scores.shape)).reshape([batch, kv_heads, group * size, visible])
    return scaled, softmax_float32(scores)


def _attend_in_blocks(query, key, value, mask, scaling: float) -> paddle.Tensor:
    """softmax(q k^T * scaling + mask) v block by block over ``query_blocks`` ([B, kv, group, L, D] out)."""
    out = []
    for block, start, visible in _split_queries(query, key.shape[2]):
        _, probs = _block_probabilities(block, key, mask, scaling, start, visible)
        out.append(paddle.matmul(probs, value[:, :, :visible]).reshape(block.shape))
    return paddle.concat(out, axis=3)


class BlockedAttention(PyLayer):
    """out = softmax(q k^T * scaling + mask) v, query block by query block, keeping for the backward only its inputs
    (the mask is the forward's, shared by every layer): query [B, kv_heads, group, L, D], key and value [B, kv_heads,
    S, D], the additive mask [B, 1, L, S] (causal: a block sees no key after its last query's); out [B, kv_heads,
    group, L, D].

    Per block, with qs = q * scaling and P = softmax(qs K^T + mask) over its visible keys (computed again in the
    backward from the saved inputs, as flash attention does):

        dV += P^T dO,   dP = dO V^T,   dS = P * (dP - rowsum(P * dP)),   dq = dS K * scaling,   dK += dS^T qs

    the same products autograd takes through ``grouped_attention``'s ops, so the gradients equal the whole square's
    up to float rounding (``tests/test_text_attention.py``)."""

    @staticmethod
    def forward(ctx, query, key, value, mask, scaling: float):
        ctx.save_for_backward(query, key, value, mask)
        ctx.scaling = scaling
        ctx.needs_grad = [not tensor.stop_gradient for tensor in (query, key, value)]
        return _attend_in_blocks(query, key, value, mask, scaling)

    @staticmethod
    def backward(ctx, grad_out):
        query, key, value, mask = ctx.saved_tensor()
        scaling = ctx.scaling
        grad_key, grad_value = paddle.zeros_like(key), paddle.zeros_like(value)
        grad_query = []
        for block, start, visible in _split_queries(query, key.shape[2]):
            batch, kv_heads, group, size, dim = block.shape
            scaled, probs = _block_probabilities(block, key, mask, scaling, start, visible)
            grad_block = grad_out[:, :, :, start:start + size].reshape([batch, kv_heads, group * size, dim])
            grad_value[:, :, :visible] += paddle.matmul(probs, grad_block, transpose_x=True)
            grad_probs = paddle.matmul(grad_block, value[:, :, :visible], transpose_y=True)
            if probs.dtype == paddle.float32:
                grad_scores = _C_ops.softmax_grad(probs, grad_probs, -1)
            else:  # as autograd through softmax_float32: the softmax's gradient in float32
                grad_scores = _C_ops.softmax_grad(probs.astype("float32"), grad_probs.astype("float32"), -1).astype(
                    probs.dtype)
            grad_query.append((paddle.matmul(grad_scores, key[:, :, :visible]) * scaling).reshape(block.shape))
            grad_key[:, :, :visible] += paddle.matmul(grad_scores, scaled, transpose_x=True)
        grads = (paddle.concat(grad_query, axis=3), grad_key, grad_value)
        # None for an input that takes no gradient (Paddle refuses one returned), and for the mask
        return *(grad if needed else None for grad, needed in zip(grads, ctx.needs_grad)), None


def grouped_attention(query, key, value, attention_mask, scaling: float) -> paddle.Tensor:
    """softmax(q k^T * scaling + mask) v over all the keys, [B, L, H * D] (``grouped_eager_attention``'s whole square,
    and the vision attention's per image): the scaling applied to the query (1/16 of the scores' elements at 1,024
    tokens; exact for head_dim 64: 1/8), then the product and the mask (None: none) added, expanded over the heads (a
    broadcast add is several times slower on CPU)."""
    batch, heads, length, dim = query.shape
    kv_heads, keys = key.shape[1], key.shape[2]
    group = heads // kv_heads
    scaled = (query * scaling).reshape([batch, kv_heads, group * length, dim])
    scores = paddle.matmul(scaled, key, transpose_y=True)
    if attention_mask is not None:
        scores = scores.reshape([batch, kv_heads, group, length, keys])
        scores = scores + attention_mask[:, :, :, :keys].unsqueeze(2).expand(scores.shape)
        scores = scores.reshape([batch, kv_heads, group * length, keys])
    probs = softmax_float32(scores)
    out = paddle.matmul(probs, value).reshape([batch, heads, length, dim])
    return transposed(out, [0, 2, 1, 3]).reshape([batch, length, heads * dim])


def softmax_float32(scores: paddle.Tensor) -> paddle.Tensor:
    """softmax over the last axis computed in float32, in the scores' dtype. Float32 scores take no casts: Paddle's
    ``astype`` to the same dtype and softmax's ``dtype=`` copy the scores, a noticeable part of a log-prob pass at long
    completions."""
    if scores.dtype == paddle.float32:
        return _C_ops.softmax(scores, -1)
    return paddle.nn.functional.softmax(scores, axis=-1, dtype="float32").astype(scores.dtype)


def attend_over_qkv(layer, mixed: paddle.Tensor, position_embeddings, attention_mask, past_key_values,
                    dropout: float = 0.0, **kwargs) -> paddle.Tensor:
    """The attention of ``layer`` (a paddleformers attention's fields: scaling, layer_idx, config) over its qkv
    product ``mixed`` [B, L, kv_heads, groups + 2, D] (per key/value head its query heads, its
    key, its value), before the output projection: rotated whole by the forward's ``RotaryTables``, the heads moved
    densely, the cache updated, then grouped eager attention or the configured sdpa with causality as
    ``sdpa_causality`` holds it (bottom-right after a KV cache). [B, L, heads * D]."""
    batch, length, kv_heads, slots, head_dim = mixed.shape
    groups = slots - 2
    tables = position_embeddings if isinstance(position_embeddings, RotaryTables) else \
        RotaryTables(*position_embeddings)
    mixed = rotate(mixed.reshape([batch, length, kv_heads * slots, head_dim]), *tables.over_qkv(kv_heads, groups))
    query, key, value = paddle.split(mixed.reshape([batch, length, kv_heads, slots, head_dim]), [groups, 1, 1], axis=3)
    query = transposed(query.reshape([batch, length, kv_heads * groups, head_dim]), [0, 2, 1, 3])
    key, value = transposed(key.squeeze(3), [0, 2, 1, 3]), transposed(value.squeeze(3), [0, 2, 1, 3])
    if past_key_values is not None:
        key, value = past_key_values.update(key, value, layer.layer_idx)
    if layer.config._attn_implementation == "eager":
        return grouped_eager_attention(query, key, value, attention_mask, layer.scaling)
    mask, causal = sdpa_causality(attention_mask, length, key.shape[2], query.dtype)
    out, _ = ALL_ATTENTION_FUNCTIONS[layer.config._attn_implementation](
        layer, query, key, value, attention_mask=mask, is_causal=causal, dropout=dropout, scaling=layer.scaling,
        **kwargs)
    return out


class FastTextAttention(Qwen2_5_VLAttention):
    """Qwen2.5-VL text attention over already merged rotary tables (``MergedMRoPE``; ``attend_over_qkv``)."""

    def forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_values=None,
                output_attentions=False, use_cache=False, position_embeddings=None, **kwargs):
        batch, length = hidden_states.shape[:2]
        mixed = biased_linear(self.qkv_proj, hidden_states).reshape(
            [batch, length, self.num_key_value_heads, self.num_key_value_groups + 2, self.head_dim])
        dropout = self.attention_dropout if self.training else 0.0
        return self.o_proj(attend_over_qkv(self, mixed, position_embeddings, attention_mask, past_key_values, dropout,
                                           **kwargs)), None

    def decodes_one_token(self) -> bool:
        """Whether the one-token decode step (``generation/decoder.py``) computes this attention: always (installed
        only where its own forward runs)."""
        return True

    @staticmethod
    def rotary_rows(cos: paddle.Tensor, sin: paddle.Tensor) -> tuple[paddle.Tensor, paddle.Tensor]:
        """The rotary tables [B, 1, L, D] of each query and key row, from its rotary layer's (``MergedMRoPE``'s, as
        they are): what the one-token decode step multiplies by."""
        return cos, sin


def install_fast_text_attention(text_model) -> None:
    """Swap the text decoder's rotary embedding and attention classes for the ones above (same parameters and
    buffers, so loading and saving are untouched). Sequence parallelism keeps paddleformers' forward."""
    if text_model.config.sequence_parallel:
        return
    text_model.rotary_emb.__class__ = MergedMRoPE
    for layer in text_model.layers:
        layer.self_attn.__class__ = FastTextAttention
