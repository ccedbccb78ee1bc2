"""Samples -> chat messages -> one left-padded processor batch, with each image's sizes.

``image_sizes`` are the originals (w, h); ``input_sizes`` are the processor's resized (w, h),
read back from ``image_grid_thw`` so they are exactly what the model saw.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..data.images import load_image
from .rollout import PromptBatch


@dataclass
class PromptFacts:
    image_sizes: list  # per sample: [(w, h), ...] of the original images
    input_sizes: list  # per sample: [(w, h), ...] after the processor's resize
    texts: list  # the chat-formatted prompt strings


def build_messages(sample: dict, question_template: str, system_prompt: Optional[str] = None) -> list[dict]:
    """One user turn: the images, then the templated problem; a problem with one ``<image>`` marker per
    image (VLM-R1 conversations) gets each image where its marker stands."""
    text = question_template.replace("{Question}", sample["problem"])
    pieces = text.split("<image>")
    content = []
    if len(pieces) - 1 == len(sample["images"]) and len(pieces) > 1:
        for i, piece in enumerate(pieces):
            if i:
                content.append({"type": "image"})
            if piece.strip():
                content.append({"type": "text", "text": piece})
    else:
        content = [{"type": "image"} for _ in sample["images"]] + [{"type": "text", "text": text}]
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    messages.append({"role": "user", "content": content})
    return messages


def load_sample_images(sample: dict) -> list:
    return [load_image(path) for path in sample["images"]]


def build_prompt_batch(samples: list[dict], processor, question_template: str, system_prompt: Optional[str] = None,
                       images: Optional[list] = None) -> tuple[PromptBatch, PromptFacts]:
    """``images``: per sample, its opened images (else they are opened here)."""
    images = images if images is not None else [load_sample_images(s) for s in samples]
    texts = [processor.apply_chat_template(build_messages(s, question_template, system_prompt), tokenize=False,
                                           add_generation_prompt=True) for s in samples]
    image_sizes = [[img.size for img in opened] for opened in images]
    flat = [img for opened in images for img in opened]
    encoded = processor(text=texts, images=flat or None, padding=True, return_tensors="pd")
    patch = processor.image_processor.patch_size
    grids = encoded["image_grid_thw"].tolist() if flat else []
    input_sizes, k = [], 0
    for sizes in image_sizes:
        input_sizes.append([(int(w) * patch, int(h) * patch) for _, h, w in grids[k:k + len(sizes)]])
        k += len(sizes)
    batch = PromptBatch(input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"],
                        pixel_values=encoded.get("pixel_values"), image_grid_thw=encoded.get("image_grid_thw"))
    return batch, PromptFacts(image_sizes=image_sizes, input_sizes=input_sizes, texts=texts)
