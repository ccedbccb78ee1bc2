"""A model and its processor answering samples: prompts, the KV-cached rollout, and the text of each completion.

Samples -> chat messages -> one left-padded processor batch (clips read once per prompt: ``data/video.py``), with each
image's sizes (``image_sizes``: the originals (w, h); ``input_sizes``: the processor's resized (w, h), read back from
``image_grid_thw`` so they are exactly what the model saw) -> ``rollout.sample_completions`` -> text.

Training (G sampled completions per prompt), the held-out evaluation and the benchmark scripts (one greedy
completion per prompt) all generate through ``Generator.generate``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import paddle

from ..data.clip_spans import SpanReader
from ..data.images import load_image
from ..data.video import Clip, VideoSampling, read_clip, shuffled_frames
from ..models.families import family_of_processor
from ..tools.builtins import ToolContext
from ..tools.toolbox import Toolbox
from .encoding import PromptFacts, encode_prompts
from .episodes import sample_episodes
from .rollout import PromptBatch, Rollout, SamplingParams, sample_completions


MEDIA_MARKER = re.compile(r"(<image>|<video>)")


def build_messages(sample: dict, question_template: str, system_prompt: Optional[str] = None) -> list[dict]:
    """One user turn: the images and videos, then the templated problem and the sample's ``answer_instruction`` if
    it has one (Video-R1's rows: the answer form their problem type asks for). A problem with one ``<image>`` marker
    per image (VLM-R1 conversations) gets each image where its marker stands, and one with a ``<video>`` marker per
    video (EasyR1) each video where its marker stands; a kind whose markers do not match its count comes first, in
    order. A sample's own ``system_prompt`` (a verl prompt's system turn) stands in for ``system_prompt``."""
    system_prompt = sample.get("system_prompt", system_prompt)
    text = question_template.replace("{Question}", sample["problem"]) + (sample.get("answer_instruction") or "")
    counts = {"image": len(sample["images"]), "video": len(sample.get("videos", []))}
    placed = {kind for kind, count in counts.items() if count and text.count(f"<{kind}>") == count}
    content = [{"type": kind} for kind in counts if kind not in placed for _ in range(counts[kind])]
    words = ""
    for piece in MEDIA_MARKER.split(text):
        if piece[1:-1] in placed and MEDIA_MARKER.fullmatch(piece):
            if words.strip():
                content.append({"type": "text", "text": words})
            content.append({"type": piece[1:-1]})
            words = ""
        else:
            words += piece
    if words.strip():
        content.append({"type": "text", "text": words})
    # the system turn as a list of parts: PaddleOCR-VL's template reads only that form, Qwen's read both
    messages = [{"role": "system", "content": [{"type": "text", "text": system_prompt}]}] if system_prompt else []
    messages.append({"role": "user", "content": content})
    return messages


def load_sample_images(sample: dict) -> list:
    return [load_image(path) for path in sample["images"]]


def family_sampling(processor, sampling: VideoSampling) -> tuple[VideoSampling, int]:
    """``sampling`` for ``processor``'s family (its budget: Qwen3-VL's video processor's pixels per clip) and the
    processor's patch x merge size."""
    image_processor = processor.image_processor
    factor = image_processor.patch_size * image_processor.merge_size
    return sampling.for_family(family_of_processor(processor).video_budget, processor.video_processor.size), factor


def clip_reader(processor, sampling: VideoSampling) -> Callable[..., Clip]:
    """``read_clip`` for ``processor`` (``family_sampling``); ``read(path, options)`` takes a clip's own keys
    (``video.part_options``) over ``sampling``."""

    def read(path, options: Optional[dict] = None) -> Clip:
        return read_clip(path, *family_sampling(processor, sampling.with_options(options or {})))

    return read


def load_sample_videos(sample: dict, sampling: VideoSampling, processor) -> list[Clip]:
    """The sample's clips, sampled and resized for ``processor`` (``clip_reader``), each with its own keys
    (``video_sampling``) over ``sampling``: decoded once per prompt, whatever the number of its completions."""
    if not sample.get("videos"):
        return []
    read = clip_reader(processor, sampling)
    options = sample.get("video_sampling") or [{}] * len(sample["videos"])
    return [read(path, own) for path, own in zip(sample["videos"], options)]


def open_sample_media(sample: dict, sampling: VideoSampling, processor) -> tuple[list, list[Clip]]:
    """The sample's opened images and read clips, as a prompt shows them; a ``DataError`` naming the file that
    fails (a caller that can go on without the sample skips it: training's batches, evaluation)."""
    return load_sample_images(sample), load_sample_videos(sample, sampling, processor)


def build_prompt_batch(samples: list[dict], processor, question_template: str, system_prompt: Optional[str] = None,
                       images: Optional[list] = None, video: VideoSampling = VideoSampling(),
                       frame_orders: Optional[list[np.random.Generator]] = None,
                       clips: Optional[list] = None) -> tuple[PromptBatch, PromptFacts]:
    """``images``: per sample, its opened images (else they are opened here); ``clips``: per sample, its clips as
    ``load_sample_videos`` reads them (else they are read here with ``video``), their frames shuffled by the sample's
    generator in ``frame_orders`` when given (``video.shuffled_frames``)."""
    images = images if images is not None else [load_sample_images(s) for s in samples]
    videos = clips if clips is not None else [load_sample_videos(s, video, processor) for s in samples]
    if frame_orders is not None:
        videos = [[shuffled_frames(clip, rng) for clip in clips] for clips, rng in zip(videos, frame_orders)]
    texts = [processor.apply_chat_template(build_messages(s, question_template, system_prompt), tokenize=False,
                                           add_generation_prompt=True) for s in samples]
    batch, facts = encode_prompts(texts, images, processor, videos)
    facts.clips = videos
    return batch, facts


def tool_contexts(samples: list[dict], images: list, facts: PromptFacts, processor, coord_system: str,
                  video: VideoSampling) -> list[ToolContext]:
    """What each sample's tool calls may look at: its opened ``images``, its clips as ``facts`` has them (the
    prompt's), and a reader of their frames for ``processor`` under the job's ``video`` budgets (none when there is
    no clip: a family without video has no video processor)."""
    clips = facts.clips or [[] for _ in samples]
    spans = SpanReader(*family_sampling(processor, video)) if any(clips) else None
    return [ToolContext(opened, sizes, input_sizes, coord_system, sample.get("videos") or [], sample_clips, spans)
            for opened, sizes, input_sizes, sample, sample_clips in zip(images, facts.image_sizes, facts.input_sizes,
                                                                        samples, clips)]


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
    def __init__(self, model, processor, coord_system: str, video: VideoSampling = VideoSampling()):
        """``video``: how the samples' clips are sampled (config keys ``video_*``)."""
        self.model, self.processor, self.coord_system, self.video = model, processor, coord_system, video
        self.tokenizer = processor.tokenizer
        self.eos_token_ids = eos_token_ids(self.tokenizer)

    def generate(self, samples: list[dict], num_generations: int, sampling: SamplingParams, question_template: str,
                 system_prompt: Optional[str] = None, images: Optional[list] = None,
                 uniforms: Optional[paddle.Tensor] = None, toolbox: Optional[Toolbox] = None,
                 max_turns: int = 1, frame_orders: Optional[list[np.random.Generator]] = None,
                 clips: Optional[list] = None) -> Generation:
        """``num_generations`` completions for each sample (rows grouped sample by sample). ``images``, ``clips``:
        each sample's opened images and read clips (else opened and read here); ``uniforms``: the random numbers
        each row samples with; ``frame_orders``: per sample, a generator that shuffles its clips' frames (T-GRPO's
        control). With ``max_turns`` > 1, episodes in which the model may call the tools of ``toolbox``
        (``episodes.py``)."""
        images = images if images is not None else [load_sample_images(s) for s in samples]
        prompt, facts = build_prompt_batch(samples, self.processor, question_template, system_prompt, images=images,
                                           video=self.video, frame_orders=frame_orders, clips=clips)
        if max_turns > 1:
            contexts = tool_contexts(samples, images, facts, self.processor, self.coord_system, self.video)
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
