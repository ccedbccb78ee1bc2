"""A model and its processor answering samples: prompts, the KV-cached rollout, and the text of each completion.

Samples -> chat messages -> one left-padded processor batch, with each image's sizes (``image_sizes``: the
originals (w, h); ``input_sizes``: the processor's resized (w, h), read back from ``image_grid_thw`` so they are
exactly what the model saw) -> ``rollout.sample_completions`` -> text.

Training (G sampled completions per prompt), the held-out evaluation and the benchmark scripts (one greedy
completion per prompt) all generate through ``Generator.generate``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import paddle

from ..data.images import load_image
from ..tools.builtins import ToolContext
from ..tools.toolbox import Toolbox
from .episodes import sample_episodes
from .rollout import PromptBatch, Rollout, SamplingParams, sample_completions


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
    # the system turn as a list of parts: PaddleOCR-VL's template reads only that form, Qwen's read both
    messages = [{"role": "system", "content": [{"type": "text", "text": system_prompt}]}] if system_prompt else []
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
    return encode_prompts(texts, images, processor)


def encode_prompts(texts: list[str], images: list, processor) -> tuple[PromptBatch, PromptFacts]:
    """Chat-formatted prompt strings and, per prompt, its opened images -> one left-padded processor batch and
    the images' sizes (shared by the samples' prompts above and the chat server's)."""
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


def eos_token_ids(tokenizer) -> list[int]:
    """The ids that end a completion: the chat turn's end (Qwen's ``<|im_end|>``, ERNIE's ``</s>``) and Qwen's
    ``<|endoftext|>`` where the vocabulary has it (elsewhere its lookup gives the unknown token's id: padding)."""
    vocab = tokenizer.get_vocab()
    return sorted({tokenizer.eos_token_id} | ({vocab["<|endoftext|>"]} if "<|endoftext|>" in vocab else set()))


@dataclass
class Generation:
    rollout: Rollout
    texts: list  # [B * G] completion texts, special tokens removed (multi-turn: the final assistant turn's)
    facts: PromptFacts  # per prompt: image sizes before and after the processor's resize
    turns: Optional[list] = None  # multi-turn: each episode's turns (``episodes.Episodes``)
    tool_calls: Optional[list] = None  # multi-turn: each episode's tool calls


class Generator:
    def __init__(self, model, processor, coord_system: str):
        self.model, self.processor, self.coord_system = model, processor, coord_system
        self.tokenizer = processor.tokenizer
        self.eos_token_ids = eos_token_ids(self.tokenizer)

    def generate(self, samples: list[dict], num_generations: int, sampling: SamplingParams, question_template: str,
                 system_prompt: Optional[str] = None, images: Optional[list] = None,
                 uniforms: Optional[paddle.Tensor] = None, toolbox: Optional[Toolbox] = None,
                 max_turns: int = 1) -> Generation:
        """``num_generations`` completions for each sample (rows grouped sample by sample). ``images``: each
        sample's opened images (else opened here); ``uniforms``: the random numbers each row samples with. With
        ``max_turns`` > 1, episodes in which the model may call the tools of ``toolbox`` (``episodes.py``)."""
        images = images if images is not None else [load_sample_images(s) for s in samples]
        prompt, facts = build_prompt_batch(samples, self.processor, question_template, system_prompt, images=images)
        if max_turns > 1:
            contexts = [ToolContext(opened, sizes, input_sizes, self.coord_system)
                        for opened, sizes, input_sizes in zip(images, facts.image_sizes, facts.input_sizes)]
            episodes = sample_episodes(self.model, self.processor, prompt, contexts, num_generations, sampling,
                                       self.eos_token_ids, self.tokenizer.pad_token_id, toolbox, max_turns,
                                       uniforms=uniforms)
            return Generation(rollout=episodes.rollout, texts=episodes.texts, facts=facts, turns=episodes.turns,
                              tool_calls=episodes.tool_calls)
        rollout = sample_completions(self.model, prompt, num_generations, sampling, self.eos_token_ids,
                                     self.tokenizer.pad_token_id, uniforms=uniforms)
        return Generation(rollout=rollout, texts=self.decode(rollout), facts=facts)

    def decode(self, rollout: Rollout) -> list[str]:
        ids = rollout.completion_ids.tolist()
        lengths = rollout.completion_mask.sum(axis=1).tolist()
        return self.tokenizer.batch_decode([row[:n] for row, n in zip(ids, lengths)], skip_special_tokens=True)
