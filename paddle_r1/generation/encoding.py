"""A batch of chat-formatted prompts and their opened images and read clips through the model's processor: the
prompt batch a rollout starts from and what it showed (shared by the samples' prompts, tool-episode rows, SFT
conversations and the chat server)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import paddle

from .rollout import PromptBatch


@dataclass
class PromptFacts:
    image_sizes: list  # per sample: [(w, h), ...] of the original images
    input_sizes: list  # per sample: [(w, h), ...] after the processor's resize
    texts: list  # the chat-formatted prompt strings
    clips: list = field(default_factory=list)  # per sample: its clips as the prompt shows them (``video.Clip``)


def encode_prompts(texts: list[str], images: list, processor, videos: Optional[list] = None
                   ) -> tuple[PromptBatch, PromptFacts]:
    """Chat-formatted prompt strings and, per prompt, its opened images (and read clips: ``video.Clip``) -> one
    left-padded processor batch and the images' sizes (shared by the samples' prompts above and the chat server's).

    A clip's frames are already sampled and sized (``video.py``), so the processor neither samples nor resizes them
    again (its image limits would); their indices and the clip's fps go with them as ``video_metadata``, from which
    Qwen3-VL's processor writes each frame pair's time as text before it. Each clip's ``second_per_grid_ts``
    (Qwen2.5-VL) is its own, 2 / its sampled fps (paddleformers 1.2.0's processor takes one fps for the whole
    call)."""
    image_sizes = [[img.size for img in opened] for opened in images]
    flat = [img for opened in images for img in opened]
    clips = [clip for row in (videos or []) for clip in row]
    media = {"videos": [clip.frames for clip in clips],
             "videos_kwargs": {"do_resize": False, "do_sample_frames": False,
                               "video_metadata": [clip.metadata() for clip in clips]}} if clips else {}
    encoded = processor(text=texts, images=flat or None, padding=True, return_tensors="pd", **media)
    patch = processor.image_processor.patch_size
    grids = encoded["image_grid_thw"].tolist() if flat else []
    input_sizes, k = [], 0
    for sizes in image_sizes:
        input_sizes.append([(int(w) * patch, int(h) * patch) for _, h, w in grids[k:k + len(sizes)]])
        k += len(sizes)
    batch = PromptBatch(input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"],
                        pixel_values=encoded.get("pixel_values"), image_grid_thw=encoded.get("image_grid_thw"),
                        pixel_values_videos=encoded.get("pixel_values_videos"),
                        video_grid_thw=encoded.get("video_grid_thw"),
                        second_per_grid_ts=paddle.to_tensor([clip.second_per_grid for clip in clips], "float32")
                        if clips else None)
    return batch, PromptFacts(image_sizes=image_sizes, input_sizes=input_sizes, texts=texts)
