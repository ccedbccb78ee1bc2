"""PaddleOCR-VL (``PaddlePaddle/PaddleOCR-VL``): paddleformers 1.2.0's model, with the interface paddle_r1's rollout and
log-probs use and five fixes.

The model: a NaViT-style SigLIP vision encoder (``visual``: each image at its own resolution, 14-pixel patches, a
learned 27 x 27 position table interpolated to the image's grid, 2D rotary attention within each image), a 2 x 2
patch merger beside it (``mlp_AR``), and the ERNIE-4.5-0.3B text decoder (``model``: grouped-query attention with
M-RoPE over (time, height, width), RMSNorm, no biases). paddleformers' class holds them at the published weight
names; paddle_r1 reaches the decoder through ``forward.text_decoder`` and embeds a prompt through ``embed_prompt``.

What this module changes, and why:

- M-RoPE positions of a padded batch (``get_rope_index``). paddleformers' version takes row i's image grid for row i
  (one image per row, and a text-only row in a batch with images fails) and counts positions from the first column,
  padding included, so a left-padded prompt gets other positions than the same prompt alone. Here every row's
  positions count its real tokens only, each image takes its own grid in order, and a text-only row is plain text:
  transformers 5's ``PaddleOCRVLModel.get_rope_index`` (image tokens at (p, p + row, p + column), the text after an
  image at p + max(rows, columns)).
- Tied embeddings (``tie_word_embeddings``, transformers' default for this model). paddleformers' weight map reads
  the head as the transposed embeddings, [hidden, vocab] into a [vocab, hidden] parameter: the head is left as it
  was allocated (the tied model's logits are not the checkpoint's), and nothing ties the two afterwards. Here the head
  is the embeddings' own parameter (``tie_weights``) and reads them as they are.
- The decoder's attention under sdpa (``MaskedErnieAttention``): paddleformers' asks Paddle's sdpa for a causal mask
  on top of the padding one, which Paddle then drops and aligns top-left; padded rows and every query after a KV
  cache (the rollout, the log-probs' shared prompt) were attended wrongly. sdpa now gets the mask given (or one
  built bottom-right after a cache) with ``is_causal`` off, and ``is_causal`` alone only where the queries are all
  the keys (``causal_mask.py``, shared with Qwen2/2.5/3-VL).
- The forward returns only the logits asked for (``logits_to_keep``; paddleformers' computes every position's, a
  [rows, prompt length, 103,424] float32 tensor at the prefill of each rollout).
- No ``visual.vision_model.embeddings.packing_position_embedding`` table (32,768 x 1,152 in the published weights,
  151 MB in float32: no forward of an image with its grid reads it, in paddleformers, transformers or vLLM, which
  dropped it in vllm#38232). paddleformers' weight map requires it, so a checkpoint transformers wrote (which has
  none) does not load there; here the published one's is left unread and nothing trains or holds it. On save a zero
  table is written beside the weights (its own file, in the weight index), so that paddleformers' own class loads a
  folder paddle_r1 saved, as it loads the published one.

On CPU the decoder's RMSNorms run ``rms_norm.FastRMSNorm`` (the same numbers) and its attention paddle_r1's Qwen
attention (``MaskedErnieAttention``; a GPU keeps paddleformers'). The rollout decodes with the one-token
step (``generation.decoder.OneTokenDecoder``: ERNIE-4.5's separate query, key, value, gate and up products, the rotary
tables merged as ``MaskedErnieAttention.rotary_rows`` says).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Optional

import numpy as np
import paddle
import paddle.nn.functional as F
from paddleformers.transformers.model_outputs import ModelOutput
from paddleformers.transformers.paddleocr_vl.modeling import Ernie4_5Attention, PaddleOCRRotaryEmbedding
from paddleformers.transformers.paddleocr_vl.modeling import (
    PaddleOCRVLForConditionalGeneration as _PaddleFormersPaddleOCRVL,
)

from .causal_mask import SdpaCausality
from .rms_norm import install_fast_rms_norm
from .swiglu import install_fused_swiglu
from .text_attention import RotaryTables, attend_over_qkv

PACKING_TABLE = "visual.vision_model.embeddings.packing_position_embedding.weight"
PACKING_TABLE_ROWS = 32768  # paddleformers' and the published checkpoints'
PACKING_TABLE_FILE = "packing_position_embedding.safetensors"
TIED_HEAD = "model.embed_tokens.weight -> lm_head.weight"


class PerAxisTables(tuple):
    """The rotary layer's (cos, sin) [3, B, L, D], one table per position axis, as paddleformers' attention takes them,
    and their merge over the M-RoPE sections as ``RotaryTables`` [B, 1, L, D], made once per forward for every layer
    (``merged``)."""

    def merged(self, sections) -> RotaryTables:
        """The tables merged over ``sections`` (kept for the next layer, which asks for the same sections)."""
        if getattr(self, "_sections", None) != tuple(sections):
            doubled = list(sections) * 2
            self._merged = RotaryTables(*(paddle.concat([part[i % 3] for i, part in enumerate(
                table.split(doubled, axis=-1))], axis=-1).unsqueeze(1) for table in self))
            self._sections = tuple(sections)
        return self._merged


class PerAxisRotary(PaddleOCRRotaryEmbedding):
    """paddleformers' ERNIE rotary layer, its tables as ``PerAxisTables``."""

    def forward(self, x, position_ids):
        return PerAxisTables(super().forward(x, position_ids))


class MaskedErnieAttention(SdpaCausality, Ernie4_5Attention):
    """paddleformers' ERNIE-4.5 attention, whose forward passes its ``is_causal`` to sdpa with whatever mask it has
    (Paddle then ignores the mask: padding, the free slots of the rollout's KV cache): under sdpa that flag and the
    mask are ``SdpaCausality``'s. On CPU it computes as paddle_r1's Qwen attention (``text_attention.attend_over_qkv``:
    the query, key and value laid per key/value head and rotated in one pass by tables merged once per forward, the
    heads moved densely, grouped query heads over their shared key and value): paddleformers' merged the M-RoPE
    sections and rotated over strided views in every layer. A GPU keeps paddleformers' forward (its flash-mask row
    indices, its kernels)."""

    def forward(self, hidden_states, past_key_values=None, attention_mask=None, attn_mask_startend_row_indices=None,
                position_embeddings=None, output_attentions=False, use_cache=False):
        if (not hidden_states.place.is_cpu_place() or attn_mask_startend_row_indices is not None
                or not isinstance(position_embeddings, PerAxisTables) or not self.decodes_one_token()):
            return super().forward(hidden_states, past_key_values=past_key_values, attention_mask=attention_mask,
                                   attn_mask_startend_row_indices=attn_mask_startend_row_indices,
                                   position_embeddings=position_embeddings, output_attentions=output_attentions,
                                   use_cache=use_cache)
        batch, length = hidden_states.shape[:2]
        kv_heads, groups = self.num_key_value_heads, self.num_key_value_groups
        mixed = paddle.concat([projection(hidden_states).reshape([batch, length, kv_heads, slots, self.head_dim])
                               for projection, slots in ((self.q_proj, groups), (self.k_proj, 1), (self.v_proj, 1))],
                              axis=3)
        dropout = self.config.get("attention_dropout_prob", 0.0) if self.training else 0.0
        out = attend_over_qkv(self, mixed, position_embeddings.merged(self.rope_scaling["mrope_section"]),
                              attention_mask, past_key_values, dropout)
        return self.o_proj(out), None, past_key_values

    def decodes_one_token(self) -> bool:
        """Whether the one-token decode step (``generation/decoder.py``) computes this attention: rotated by the
        M-RoPE tables (not the fused rotary kernel, which takes no positions), its forward not sequence-parallel."""
        return not self.config.apply_rope_fusion and not self.config.sequence_parallel

    def rotary_rows(self, cos: paddle.Tensor, sin: paddle.Tensor) -> tuple[paddle.Tensor, paddle.Tensor]:
        """The rotary tables [B, 1, L, D] of each query and key row, from its rotary layer's [3, B, L, D] (one per
        position axis), merged over the M-RoPE sections as paddleformers' forward merges them in every layer
        (``apply_multimodal_rotary_pos_emb``): what the one-token decode step multiplies by."""
        return tuple(PerAxisTables((cos, sin)).merged(self.rope_scaling["mrope_section"]))


@dataclass
class PaddleOCRVLOutput(ModelOutput):
    logits: paddle.Tensor = None
    past_key_values: Optional[object] = None
    last_hidden_state: Optional[paddle.Tensor] = None


class PaddleOCRVLForConditionalGeneration(_PaddleFormersPaddleOCRVL):
    def __init__(self, config):
        super().__init__(config)
        del self.visual.vision_model.embeddings.packing_position_embedding  # unused: see the module docstring
        if config.tie_word_embeddings:
            self.tie_weights()  # one parameter, as in transformers: the head trains with the embeddings
        for layer in self.model.layers:
            MaskedErnieAttention.install(layer.self_attn)
        self.model.rotary_emb.__class__ = PerAxisRotary
        install_fast_rms_norm(self)
        install_fused_swiglu(self)

    @classmethod
    def _gen_aoa_config(cls, config):
        """paddleformers' load map without the packing table (a published checkpoint's is left unread), and a tied
        head read from the embeddings as they are (paddleformers transposes them, into a head of the same shape)."""
        aoa = _without_packing_table(super()._gen_aoa_config(config))
        aoa["aoa_statements"] = [TIED_HEAD if s.startswith("model.embed_tokens.weight^T -> lm_head.weight") else s
                                 for s in aoa["aoa_statements"]]
        return aoa

    @classmethod
    def _gen_inv_aoa_config(cls, config):
        return _without_packing_table(super()._gen_inv_aoa_config(config))

    def save_pretrained(self, folder, *args, **kwargs):
        """paddleformers' save, then the packing table (zeros) in a file of its own, listed in the weight index:
        paddleformers' own class requires it to load the folder."""
        super().save_pretrained(folder, *args, **kwargs)
        _add_packing_table(folder, self.config.vision_config.hidden_size,
                           str(self.lm_head.weight.dtype).split(".")[-1])

    def image_features(self, pixel_values: paddle.Tensor, image_grid_thw: paddle.Tensor) -> paddle.Tensor:
        """[image tokens, hidden] for the patches of every image (the processor's ``pixel_values``, [patches, 3, 14,
        14]): the vision encoder over each image alone, then the 2 x 2 merger (paddleformers' forward, as it is)."""
        pixel_values = pixel_values.astype(self.visual.vision_model.embeddings.patch_embedding.weight.dtype)
        sizes = paddle.prod(image_grid_thw, axis=1)
        sample_indices = paddle.repeat_interleave(paddle.arange(image_grid_thw.shape[0]), sizes)
        cu_seqlens = F.pad(paddle.cumsum(sizes, axis=0), (1, 0), value=0, data_format="NCL")
        spatial_sizes = paddle.prod(image_grid_thw[:, 1:], axis=1, dtype="int64")
        siglip_position_ids = (paddle.arange(sizes.sum()) - cu_seqlens[sample_indices]) % spatial_sizes[sample_indices]
        vision = self.visual(pixel_values=pixel_values.unsqueeze(0), image_grid_thw=image_grid_thw,
                             position_ids=siglip_position_ids, vision_return_embed_list=True,
                             interpolate_pos_encoding=True, sample_indices=sample_indices,
                             cu_seqlens=cu_seqlens.astype("int32"), return_pooler_output=False, use_rope=True,
                             window_size=-1)
        return self.mlp_AR(vision.last_hidden_state, image_grid_thw)

    def embed_prompt(self, input_ids: paddle.Tensor, pixel_values=None, image_grid_thw=None) -> paddle.Tensor:
        """Token embeddings [B, L, D] with each image's features over its ``<|IMAGE_PLACEHOLDER|>`` tokens."""
        embeds = self.model.embed_tokens(input_ids)
        if pixel_values is None:
            return embeds
        features = self.image_features(pixel_values, image_grid_thw).astype(embeds.dtype)
        slots = input_ids == self.config.image_token_id
        if int(slots.sum()) != features.shape[0]:
            raise ValueError(f"the prompts hold {int(slots.sum())} image tokens but their images make "
                             f"{features.shape[0]} (a prompt cut short, or images that do not belong to it)")
        return embeds.masked_scatter(slots.unsqueeze(-1).expand_as(embeds), features)

    def get_rope_index(self, input_ids, image_grid_thw=None, video_grid_thw=None, second_per_grid_ts=None,
                       attention_mask=None):
        """M-RoPE positions [3, B, L] of a (left- or right-padded) batch and each row's delta (its last position + 1
        minus its length), as transformers 5 computes them (see the module docstring); padding gets position 0."""
        if video_grid_thw is not None:
            raise NotImplementedError("paddle_r1's PaddleOCR-VL takes images only, not videos")
        ids = input_ids.numpy()
        mask = np.ones_like(ids, dtype=bool) if attention_mask is None else attention_mask.numpy().astype(bool)
        grids = iter(image_grid_thw.tolist() if image_grid_thw is not None else [])
        merge = self.config.vision_config.spatial_merge_size
        positions = np.zeros((3,) + ids.shape, dtype="int64")
        deltas = []
        for row, (tokens, real) in enumerate(zip(ids, mask)):
            row_positions = _row_positions(tokens[real], self.config.image_token_id, grids, merge)
            positions[:, row, real] = row_positions
            deltas.append(int(row_positions.max(initial=-1)) + 1 - int(real.sum()))
        return paddle.to_tensor(positions), paddle.to_tensor(deltas, dtype="int64").unsqueeze(1)

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None,
                inputs_embeds=None, use_cache=None, pixel_values=None, image_grid_thw=None, logits_to_keep: int = 0,
                **kwargs):
        """Logits of the last ``logits_to_keep`` positions (0: all). Without ``position_ids`` the positions are
        ``get_rope_index``'s, which holds for a whole prompt; a step after a cache passes its own."""
        if inputs_embeds is None:
            inputs_embeds = self.embed_prompt(input_ids, pixel_values, image_grid_thw)
        if position_ids is None:
            if past_key_values is not None and past_key_values.get_seq_length() > 0:
                raise ValueError("PaddleOCR-VL after a KV cache needs the position_ids of the new tokens")
            position_ids, _ = self.get_rope_index(input_ids, image_grid_thw, attention_mask=attention_mask)
        out = self.model(inputs_embeds=inputs_embeds, attention_mask=attention_mask, position_ids=position_ids,
                         past_key_values=past_key_values, use_cache=use_cache, return_dict=True)
        hidden = out.last_hidden_state
        logits = self.lm_head(hidden[:, -logits_to_keep:] if logits_to_keep else hidden)
        return PaddleOCRVLOutput(logits=logits, past_key_values=out.past_key_values, last_hidden_state=hidden)


def _row_positions(tokens: np.ndarray, image_token_id: int, grids, merge: int) -> np.ndarray:
    """[3, len(tokens)] positions of one row's real tokens; ``grids`` yields the (t, h, w) of its images in order."""
    pieces, position, start = [], 0, 0
    while start < len(tokens):
        if tokens[start] == image_token_id:
            grid = next(grids, None)
            if grid is None:
                raise ValueError("the prompts hold more images (runs of image tokens) than image_grid_thw has rows")
            t, h, w = grid
            rows, columns = h // merge, w // merge
            count = t * rows * columns
            height = np.repeat(np.arange(rows), columns * t)
            width = np.tile(np.arange(columns), rows * t)
            pieces.append(np.stack([np.zeros(count, "int64"), height, width]) + position)
            position += max(rows, columns)
        else:
            images = np.flatnonzero(tokens[start:] == image_token_id)
            count = int(images[0]) if len(images) else len(tokens) - start
            pieces.append(np.broadcast_to(np.arange(count) + position, (3, count)))
            position += count
        start += count
    return np.concatenate(pieces, axis=1) if pieces else np.zeros((3, 0), "int64")


def _without_packing_table(aoa: dict) -> dict:
    aoa["aoa_statements"] = [s for s in aoa["aoa_statements"] if "packing_position_embedding" not in s]
    return aoa


def _add_packing_table(folder: str, width: int, dtype: str) -> None:
    """The zero packing table [32768, width] in ``PACKING_TABLE_FILE`` beside the weights paddleformers wrote, and in
    their index (``model.safetensors.index.json``, which paddleformers' save always writes)."""
    from safetensors.paddle import save_file

    save_file({PACKING_TABLE: paddle.zeros([PACKING_TABLE_ROWS, width], dtype=dtype)},
              os.path.join(folder, PACKING_TABLE_FILE), metadata={"format": "pt"})
    index_file = os.path.join(folder, "model.safetensors.index.json")
    with open(index_file, encoding="utf-8") as f:
        index = json.load(f)
    index["weight_map"][PACKING_TABLE] = PACKING_TABLE_FILE
    with open(index_file, "w", encoding="utf-8") as f:
        json.dump(index, f, indent=2)
