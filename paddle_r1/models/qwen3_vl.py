"""Qwen3-VL (dense): PaddleFormers' plain-Paddle Qwen3-VL, with DeepStack carried as dense per-position features.

PaddleFormers 1.2.0's ``Qwen3VLForConditionalGeneration`` (what its auto classes pick) is built on ``paddlefleet``,
which is not on PyPI. Its ``Qwen3VLForConditionalGenerationDeprecated`` is plain Paddle and is what runs here: the
vision tower (16-pixel patches, a learned position table interpolated to each image's grid, 2D rotary, LayerNorm
blocks, the 2 x 2 patch merger), DeepStack (mergers over intermediate vision blocks whose outputs are added to the
image positions after the first decoder layers), interleaved M-RoPE and the Qwen3 decoder (RMSNorm on each head's
q and k). On a tiny published-layout checkpoint its logits equal transformers 4.57's (tests/test_parity.py).

What this module changes, and why:

- DeepStack as dense tensors. PaddleFormers passes the DeepStack features as a flat list of image-token rows plus
  a mask, so they cannot follow the rollout and log-prob path, which embeds each prompt once, repeats it for its
  G completions and appends completion tokens. Here ``embed_prompt`` lays each DeepStack feature over the prompt's
  positions, [layers, B, L, D], zero off the image tokens; it repeats and extends like the embeddings, and adding it
  is the same float addition at the image tokens (and ``x + 0 = x`` elsewhere). The decode steps after the prefill
  see no image tokens, so they carry no DeepStack, as in transformers.
- Gradient checkpointing of the vision blocks: PaddleFormers' recompute helper does not take the per-image
  attention bounds its own forward passes it (a TypeError); the override passes them through.
- The text attention (``Qwen3VLTextAttention``) computes as paddle_r1's Qwen2.5-VL attention
  (``text_attention.attend_over_qkv``: the qkv product rotated whole by tables laid out once per forward, the heads
  moved densely, grouped query heads over their shared key and value), each head's query and key RMS-normalised
  first: paddleformers' rotated the query and key per layer over strided views and repeated K and V per group, which
  took most of a CPU step's attention (``python benchmarks/grpo_step.py --family qwen3_vl``, figures in
  benchmarks/README.md). Under sdpa, paddleformers' dropped an all-ones mask and asked Paddle for top-left causality,
  so queries after a KV cache (a text-only prompt's completions in the log-prob pass, a multi-turn episode's next
  segment) saw only the cache's first keys; ``causal_mask.py`` holds it bottom-right. The norms take
  ``FastRMSNorm`` where the fused kernel is missing (CPU).
- Videos: a clip's frame pairs go through the same tower (``get_video_features``) and land, with their DeepStack
  features, on the ``<|video_pad|>`` tokens. The processor writes each pair as its own vision block after its time
  as text (``<1.2 seconds><|vision_start|><|video_pad|>...<|vision_end|>``), and paddleformers' rope index splits the
  clip's grid into one-frame grids, each placed like an image where its block stands: time enters as text, not as
  the temporal position (transformers 5.3.0's rope index raises StopIteration there; huggingface/transformers#44474
  restored the split).

Checkpoints load from and save to the published names (``model.visual...``, ``model.language_model...``,
``lm_head.weight``) through PaddleFormers' name mappings, and config.json keeps its published nested layout.
"""
from __future__ import annotations

from typing import Optional

import paddle
from paddle.distributed.fleet.utils import recompute
from paddleformers.nn.criterion.interface import CriterionLayer
from paddleformers.nn.lm_head import LMHead
from paddleformers.transformers.qwen3_vl.configuration import Qwen3VLConfig
from paddleformers.transformers.qwen3_vl.modeling import (
    Qwen3VLForConditionalGenerationDeprecated,
    Qwen3VLModelDeprecated,
    Qwen3VLTextAttention as _PaddleFormersTextAttention,
    Qwen3VLTextRotaryEmbedding as _PaddleFormersRotary,
    Qwen3VLTextModel as _PaddleFormersTextModel,
    Qwen3VLVisionModel as _PaddleFormersVisionModel,
)

from .biased_linear import biased_linear
from .causal_mask import SdpaCausality
from .rms_norm import install_fast_rms_norm
from .swiglu import install_fused_swiglu
from .text_attention import RotaryTables, attend_over_qkv


class Qwen3VLVisionModel(_PaddleFormersVisionModel):
    @paddle.jit.not_to_static
    def recompute_training_full(self, layer_module, hidden_states, cu_seqlens, rotary_pos_emb=None,
                                position_embeddings=None, attn_mask_startend_row_indices=None):
        """One vision block recomputed in the backward pass, with the per-image attention bounds."""
        return recompute(layer_module, hidden_states, cu_seqlens, rotary_pos_emb, position_embeddings,
                         attn_mask_startend_row_indices)


class Qwen3VLRotaryTables(_PaddleFormersRotary):
    """paddleformers' interleaved M-RoPE tables, once per forward as ``RotaryTables`` [B, 1, L, D]: their layout over
    a layer's qkv product is made once and shared by every layer (``text_attention.attend_over_qkv``)."""

    def forward(self, x, position_ids):
        cos, sin = super().forward(x, position_ids)
        return RotaryTables(cos.unsqueeze(1), sin.unsqueeze(1))


class Qwen3VLTextAttention(SdpaCausality, _PaddleFormersTextAttention):
    """paddleformers' Qwen3-VL text attention, computed as paddle_r1's Qwen2.5-VL attention is
    (``text_attention.attend_over_qkv``: the qkv product rotated whole, heads moved densely, grouped query heads
    over their shared key and value), each head's query and key RMS-normalised before. Under sequence parallelism
    (its rotary layer then paddleformers') it is paddleformers' forward, its sdpa mask and ``is_causal`` as
    ``SdpaCausality`` sets them."""

    def forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_values=None,
                output_attentions=False, use_cache=False, position_embeddings=None, **kwargs):
        if self.config.sequence_parallel:
            return super().forward(hidden_states, attention_mask=attention_mask, position_ids=position_ids,
                                   past_key_values=past_key_values, output_attentions=output_attentions,
                                   use_cache=use_cache, position_embeddings=position_embeddings, **kwargs)
        batch, length = hidden_states.shape[:2]
        groups = self.num_key_value_groups
        mixed = biased_linear(self.qkv_proj, hidden_states).reshape(
            [batch, length, self.num_key_value_heads, groups + 2, self.head_dim])
        query, key, value = paddle.split(mixed, [groups, 1, 1], axis=3)
        mixed = paddle.concat([self.q_norm(query), self.k_norm(key), value], axis=3)
        dropout = self.attention_dropout if self.training else 0.0
        return self.o_proj(attend_over_qkv(self, mixed, position_embeddings, attention_mask, past_key_values, dropout,
                                           **kwargs)), None

    def decodes_one_token(self) -> bool:
        """Whether the one-token decode step (``generation/decoder.py``) computes this attention: a full one (no
        sliding window), its forward not sequence-parallel."""
        return self.sliding_window is None and not self.config.sequence_parallel

    @staticmethod
    def rotary_rows(cos: paddle.Tensor, sin: paddle.Tensor) -> tuple[paddle.Tensor, paddle.Tensor]:
        """The rotary tables [B, 1, L, D] of each query and key row, from its rotary layer's (``Qwen3VLRotaryTables``'
        interleaved M-RoPE, as they are): what the one-token decode step multiplies by."""
        return cos, sin


class Qwen3VLTextModel(_PaddleFormersTextModel):
    def forward(self, *args, deepstack_embeds: Optional[paddle.Tensor] = None, **kwargs):
        """``deepstack_embeds`` [layers, B, L, D]: added to the output of decoder layer i, for i < layers."""
        if deepstack_embeds is not None:
            kwargs.update(visual_pos_masks=None, deepstack_visual_embeds=deepstack_embeds)
        return super().forward(*args, **kwargs)

    def _deepstack_process(self, hidden_states, visual_pos_masks, visual_embeds):
        """Dense features (zero off the image tokens): a plain addition, which also keeps sequence rows aligned
        when a prompt's rows are repeated for its completions."""
        return hidden_states + visual_embeds.astype(hidden_states.dtype)


class Qwen3VLModel(Qwen3VLModelDeprecated):
    def __init__(self, config: Qwen3VLConfig) -> None:
        # skip the parent's __init__ (it builds paddleformers' towers); the same attributes with this module's classes
        super(Qwen3VLModelDeprecated, self).__init__(config)
        self.visual = Qwen3VLVisionModel._from_config(config.vision_config)
        self.language_model = Qwen3VLTextModel._from_config(config.text_config)
        self.rope_deltas = None

    def embed_prompt(self, input_ids: paddle.Tensor, pixel_values=None, image_grid_thw=None, pixel_values_videos=None,
                     video_grid_thw=None):
        """Input embeddings [B, L, D] with the image features at the ``<|image_pad|>`` tokens and the video features
        at the ``<|video_pad|>`` tokens, and the DeepStack features at the same tokens [layers, B, L, D] (None
        without images or videos)."""
        embeds = self.get_input_embeddings()(input_ids)
        deepstack = None
        for pixels, grid, features, kind in ((pixel_values, image_grid_thw, self.get_image_features, "image"),
                                             (pixel_values_videos, video_grid_thw, self.get_video_features, "video")):
            if pixels is None:
                continue
            merged, layers = features(pixels, grid)
            merged = paddle.concat(merged, axis=0)
            masks = self.get_placeholder_mask(input_ids, inputs_embeds=embeds, **{f"{kind}_features": merged})
            mask = masks[0] if kind == "image" else masks[1]
            embeds = embeds.masked_scatter(mask, merged.astype(embeds.dtype))
            placed = paddle.stack([paddle.zeros_like(embeds).masked_scatter(mask, f.astype(embeds.dtype))
                                   for f in layers])
            deepstack = placed if deepstack is None else deepstack + placed  # image and video tokens never overlap
        return embeds, deepstack

    def forward(self, input_ids=None, inputs_embeds=None, pixel_values=None, image_grid_thw=None,
                deepstack_embeds=None, pixel_values_videos=None, video_grid_thw=None, **kwargs):
        """paddleformers' forward (positions from ``get_rope_index``, generation's position offsets) on embeddings
        made by ``embed_prompt``; ``inputs_embeds`` may come with their ``deepstack_embeds`` instead of pixels."""
        if inputs_embeds is None:
            inputs_embeds, deepstack_embeds = self.embed_prompt(input_ids, pixel_values, image_grid_thw,
                                                                pixel_values_videos, video_grid_thw)
        if deepstack_embeds is not None:
            kwargs["deepstack_embeds"] = deepstack_embeds
        return super().forward(input_ids=input_ids, inputs_embeds=inputs_embeds, image_grid_thw=image_grid_thw,
                               video_grid_thw=video_grid_thw, **kwargs)


class Qwen3VLForConditionalGeneration(Qwen3VLForConditionalGenerationDeprecated):
    def __init__(self, config: Qwen3VLConfig) -> None:
        # skip the parent's __init__ (it builds paddleformers' Qwen3VLModelDeprecated); same parts otherwise
        super(Qwen3VLForConditionalGenerationDeprecated, self).__init__(config)
        self.model = Qwen3VLModel(config)
        self.lm_head = LMHead(config.text_config)
        self.criterion = CriterionLayer(config.text_config)
        self.tie_weights()
        text = self.model.language_model
        for layer in text.layers:
            Qwen3VLTextAttention.install(layer.self_attn)
        if not config.text_config.sequence_parallel:  # the attention's own forward takes its tables
            text.rotary_emb.__class__ = Qwen3VLRotaryTables
        install_fused_swiglu(self)
        install_fast_rms_norm(self)  # the decoder's norms and each head's query and key norms, where unfused
