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
    content = [{"type": "image"} for _ in sample["images"]]
    content.append({"type": "text", "text": question_template.format(Question=sample["problem"])})
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    messages.append({"role": "user", "content": content})
    return messages


def build_prompt_batch(samples: list[dict], processor, question_template: str,
                       system_prompt: Optional[str] = None) -> tuple[PromptBatch, PromptFacts]:
    texts, images, image_sizes = [], [], []
    for sample in samples:
        texts.append(processor.apply_chat_template(build_messages(sample, question_template, system_prompt),
                                                   tokenize=False, add_generation_prompt=True))
        opened = [load_image(path) for path in sample["images"]]
        images.extend(opened)
        image_sizes.append([img.size for img in opened])
    encoded = processor(text=texts, images=images or None, padding=True, return_tensors="pd")
    patch = processor.image_processor.patch_size
    grids = encoded["image_grid_thw"].tolist() if images else []
    input_sizes, k = [], 0
    for sizes in image_sizes:
        input_sizes.append([(int(w) * patch, int(h) * patch) for _, h, w in grids[k:k + len(sizes)]])
        k += len(sizes)
    batch = PromptBatch(input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"],
                        pixel_values=encoded.get("pixel_values"), image_grid_thw=encoded.get("image_grid_thw"))
    return batch, PromptFacts(image_sizes=image_sizes, input_sizes=input_sizes, texts=texts)
