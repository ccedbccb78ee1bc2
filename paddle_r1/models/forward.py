"""Pieces of the Qwen-VL forward pass that rollout and log-prob computation share.

Images go through the vision tower once per prompt, and the prompt through the decoder once per prompt: its
keys and values in every layer are repeated for the prompt's G completions (``RepeatedPrompt``) instead of
re-encoding the image and re-running the prompt G times.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Optional

import paddle

from .families import family_of


@dataclass
class InputEmbeddings:
    """Input embeddings [B, L, D] and, for Qwen3-VL, the DeepStack features at the same positions [layers, B, L, D]
    (zero off the image tokens; see ``qwen3_vl.py``), which the first decoder layers add to their output."""

    embeds: paddle.Tensor
    deepstack: Optional[paddle.Tensor] = None

    def model_inputs(self) -> dict:
        """The keyword arguments a model (or its ``.model``) takes them as."""
        if self.deepstack is None:
            return {"inputs_embeds": self.embeds}
        return {"inputs_embeds": self.embeds, "deepstack_embeds": self.deepstack}

    def repeat(self, repeats: int) -> "InputEmbeddings":
        """Each row ``repeats`` times in a row (a prompt for its G completions)."""
        deepstack = None if self.deepstack is None else repeat_rows(self.deepstack, repeats, axis=1)
        return InputEmbeddings(repeat_rows(self.embeds, repeats), deepstack)

    def append(self, embeds: paddle.Tensor) -> "InputEmbeddings":
        """Text embeddings [B, T, D] after these positions; they carry no DeepStack feature."""
        embeds = embeds.astype(self.embeds.dtype)
        deepstack = self.deepstack
        if deepstack is not None:
            deepstack = paddle.concat([deepstack, paddle.zeros([deepstack.shape[0], *embeds.shape], deepstack.dtype)],
                                      axis=2)
        return InputEmbeddings(paddle.concat([self.embeds, embeds], axis=1), deepstack)


def text_decoder(model):
    """The text decoder (``embed_tokens``, ``layers``, ``norm``, ``rotary_emb``), where the model's family keeps it
    (``families.py``: ``model.model.language_model`` in the Qwen-VL models, ``model.model`` in PaddleOCR-VL)."""
    return _sublayer(model, family_of(model).text_decoder_at)


def embed_inputs(model, input_ids: paddle.Tensor, pixel_values=None, image_grid_thw=None, pixel_values_videos=None,
                 video_grid_thw=None) -> InputEmbeddings:
    """Token embeddings with image (and video) features written over their token slots (and Qwen3-VL's DeepStack),
    the family's way (``ModelFamily.embed_prompt``: one of the three functions below). Videos reach only the
    families that read them (``families.check_video``): ``embed_by_model`` (PaddleOCR-VL) is handed none."""
    videos = {} if pixel_values_videos is None else {"pixel_values_videos": pixel_values_videos,
                                                     "video_grid_thw": video_grid_thw}
    return family_of(model).embed_prompt.load()(model, input_ids, pixel_values, image_grid_thw, **videos)


def embed_scattered(model, input_ids: paddle.Tensor, pixel_values=None, image_grid_thw=None, pixel_values_videos=None,
                    video_grid_thw=None) -> InputEmbeddings:
    """Qwen2-VL and Qwen2.5-VL: paddleformers' image and video features scattered over their tokens (a clip's
    frames go through the same tower as images, two frames per temporal patch)."""
    inner = model.model
    embeds = inner.get_input_embeddings()(input_ids)
    if pixel_values is not None:
        image_embeds = paddle.concat(inner.get_image_features(pixel_values, image_grid_thw), axis=0)
        image_embeds = image_embeds.astype(embeds.dtype)
        image_mask, _ = inner.get_placeholder_mask(input_ids, inputs_embeds=embeds, image_features=image_embeds)
        embeds = embeds.masked_scatter(image_mask, image_embeds)
    if pixel_values_videos is not None:
        video_embeds = paddle.concat(inner.get_video_features(pixel_values_videos, video_grid_thw), axis=0)
        video_embeds = video_embeds.astype(embeds.dtype)
        _, video_mask = inner.get_placeholder_mask(input_ids, inputs_embeds=embeds, video_features=video_embeds)
        embeds = embeds.masked_scatter(video_mask, video_embeds)
    return InputEmbeddings(embeds)


def embed_with_deepstack(model, input_ids: paddle.Tensor, pixel_values=None, image_grid_thw=None,
                         pixel_values_videos=None, video_grid_thw=None) -> InputEmbeddings:
    """Qwen3-VL: the embeddings and their DeepStack features (``qwen3_vl.Qwen3VLModel.embed_prompt``)."""
    return InputEmbeddings(*model.model.embed_prompt(input_ids, pixel_values, image_grid_thw, pixel_values_videos,
                                                     video_grid_thw))


def embed_by_model(model, input_ids: paddle.Tensor, pixel_values=None, image_grid_thw=None) -> InputEmbeddings:
    """PaddleOCR-VL: the model's own (``paddleocr_vl.PaddleOCRVLForConditionalGeneration.embed_prompt``)."""
    return InputEmbeddings(model.embed_prompt(input_ids, pixel_values, image_grid_thw))


def rope_positions(model, input_ids: paddle.Tensor, attention_mask: paddle.Tensor, image_grid_thw=None,
                   video_grid_thw=None, second_per_grid_ts=None):
    """M-RoPE position ids [3, B, L] of a (left-padded) prompt batch, and each row's next free position [B], from the
    ``get_rope_index`` the family names (the inner model's in the Qwen-VL models, the whole model's in PaddleOCR-VL).

    A video's time positions: Qwen2.5-VL's count absolute time, long(t * ``second_per_grid_ts`` *
    ``tokens_per_second``) for its t-th frame pair; Qwen2-VL's count frame pairs (its family's ``video_time`` is
    "frames": the seconds are not passed, and its rope index then steps 1 per pair); Qwen3-VL's ("text") give each
    pair the positions of a one-frame image where its block stands, after its time written as text. Text after a
    video continues from the largest position before it + 1, and so does the decode (``next_position``)."""
    owner = _sublayer(model, family_of(model).rope_index_at)
    seconds = {}
    if family_of(model).video_time == "seconds":
        # as Python floats (each a float32 value): the same float32 products as with the tensor, without Paddle's
        # log line on multiplying an int64 tensor by a float32 one
        seconds["second_per_grid_ts"] = None if second_per_grid_ts is None else second_per_grid_ts.tolist()
    positions, _ = owner.get_rope_index(input_ids, image_grid_thw, video_grid_thw, attention_mask=attention_mask,
                                        **seconds)
    next_position = positions.max(axis=0).max(axis=-1) + 1
    return positions, next_position


def _sublayer(model, path: tuple[str, ...]):
    return functools.reduce(getattr, path, model)


def text_positions(next_position: paddle.Tensor, length: int) -> paddle.Tensor:
    """Positions [3, B, length] of text tokens that follow a prompt: all three axes advance together."""
    steps = paddle.arange(length, dtype=next_position.dtype)
    pos = next_position.unsqueeze(-1) + steps.unsqueeze(0)
    return pos.unsqueeze(0).expand([3, -1, -1])


def image_spans(grid: paddle.Tensor, images_per_row: list[int]) -> list[tuple[int, int]]:
    """For each row, the [start, end) rows of ``pixel_values`` its images occupy (t * h * w patches each), given the
    images' ``image_grid_thw`` in row order and how many images each row has."""
    patches = (grid[:, 0] * grid[:, 1] * grid[:, 2]).tolist() if grid is not None else []
    spans, image, start = [], 0, 0
    for count in images_per_row:
        size = int(sum(patches[image:image + count]))
        spans.append((start, start + size))
        image, start = image + count, start + size
    return spans


def repeat_rows(x: paddle.Tensor, repeats: int, axis: int = 0) -> paddle.Tensor:
    return x if repeats == 1 else paddle.repeat_interleave(x, repeats, axis=axis)


def recomputes_layers(config) -> bool:
    """paddleformers' switches for recomputing every decoder (or vision) block in the backward pass."""
    return (config.recompute_granularity == "full" and config.recompute_method == "uniform"
            and config.recompute_num_layers == 1)


class RepeatedPrompt:
    """A prompt batch's keys and values in every layer (from a forward with ``use_cache=True``), each row repeated
    for the prompt's G completions: a cache the completions' forward attends to. ``update`` returns the prompt's
    K/V followed by the new tokens' without storing anything, so a layer may run twice (recompute) and, with
    gradients on, the gradient of every completion flows back into its prompt's one K/V through the repeat: the
    same gradient as running each completion after its own copy of the prompt."""

    def __init__(self, cache, repeats: int):
        self.keys = [repeat_rows(layer.keys, repeats) for layer in cache.layers]
        self.values = [repeat_rows(layer.values, repeats) for layer in cache.layers]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.keys[layer_idx].shape[2]

    def update(self, key: paddle.Tensor, value: paddle.Tensor, layer_idx: int, *args, **kwargs):
        return (paddle.concat([self.keys[layer_idx], key], axis=2),
                paddle.concat([self.values[layer_idx], value], axis=2))
