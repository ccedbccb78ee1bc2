"""Qwen2-VL's and Qwen2.5-VL's vision attention on the CPU without strided copies.

paddleformers 1.2.0's forward splits the qkv product with ``permute(1, 0, 2, 3).unbind(0)``, rotates query and key
apart (``rotate_half``'s slices and concatenation, over those views) and moves the heads with ``transpose``: views
that the next kernels copy with Paddle's strided copy, slow on CPU (``transposes.py``). Here, as in the text attention
(``text_attention.py``), the qkv product is rotated whole in its own layout (the value's rows with cos 1 and sin 0),
its heads are moved by the dense transpose kernel, and each image's (or window's) patches attend to each other as
there, the query scaled before the product. The same numbers up to float32 rounding
(tests/test_vision_attention.py). Float32 on the CPU under eager attention only; elsewhere paddleformers' forward.
"""
from __future__ import annotations

import paddle
from paddleformers.transformers.qwen2_5_vl.modeling import Qwen2_5_VLVisionAttention

from .text_attention import grouped_attention, rotate
from .transposes import transposed


def _qkv_tables(cos: paddle.Tensor, sin: paddle.Tensor, heads: int) -> tuple[paddle.Tensor, paddle.Tensor]:
    """cos and sin [patches, D] laid out over the qkv product's [patches, 3 * heads, D]: the query's and the key's
    heads the tables, the value's 1 and 0."""
    patches, dim = cos.shape
    one, zero = paddle.ones([patches, heads, dim], cos.dtype), paddle.zeros([patches, heads, dim], cos.dtype)
    return tuple(paddle.concat([table.unsqueeze(1).expand([patches, 2 * heads, dim]), value_rows], axis=1)
                 for table, value_rows in ((cos, one), (sin, zero)))


class FastVisionAttention(Qwen2_5_VLVisionAttention):
    def forward(self, hidden_states, cu_seqlens, rotary_pos_emb=None, position_embeddings=None, **kwargs):
        if (self.config._attn_implementation != "eager" or not hidden_states.place.is_cpu_place()
                or hidden_states.dtype != paddle.float32 or position_embeddings is None):
            return super().forward(hidden_states, cu_seqlens, rotary_pos_emb, position_embeddings, **kwargs)
        patches, heads, dim = hidden_states.shape[0], self.num_heads, self.head_dim
        mixed = rotate(self.qkv(hidden_states).reshape([patches, 3 * heads, dim]),
                       *_qkv_tables(*position_embeddings, heads))
        query, key, value = paddle.split(transposed(mixed.reshape([patches, 3, heads, dim]), [1, 2, 0, 3]), 3)
        lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()
        segments = zip(*(paddle.split(part, lengths, axis=2) for part in (query, key, value)))
        attended = [grouped_attention(q, k, v, None, self.scaling) for q, k, v in segments]
        return self.proj(paddle.concat(attended, axis=1).reshape([patches, heads * dim]))


def install_fast_vision_attention(vision_tower) -> None:
    """Swap the class of each block's attention (same parameters) where it runs paddleformers' Qwen2.5-VL forward."""
    for block in vision_tower.blocks:
        if type(block.attn).forward is Qwen2_5_VLVisionAttention.forward:
            block.attn.__class__ = FastVisionAttention
