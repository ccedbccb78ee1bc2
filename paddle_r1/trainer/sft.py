"""Supervised fine-tuning before GRPO: teach the answer format and a first, partly right policy.

Each sample's target is ``answer_template`` with ``{Answer}`` = its solution written the way the model must
answer (a box in the model's coordinate system, a count as digits, a clip's span as "start to end" seconds),
followed by the end-of-turn token. The
loss is the mean negative log-likelihood of the target tokens only: the prompt is never a target and padding
is masked. The targets take the place of sampled completions in a ``Rollout``, so the log-probs come from
the same chunked forward pass GRPO uses (``completion_logprobs``).

A sample with a scripted multi-turn ``episode`` (tool calls, the tools' results with their images and clips, the
answer) is
taught as one whole conversation instead (``generation/conversation.py``): the loss covers every assistant turn's
tokens and nothing of the prompt or the tool results; a batch holding one such sample goes that way whole (the
others as one-turn conversations of their target).

The result is ``output_dir/checkpoint-N``, a model folder that a GRPO config names as its
``model_name_or_path``.
"""
from __future__ import annotations

import json
import time
from typing import Optional

import paddle

from ..config.jobs import SFTConfig
from ..data.video import VideoSampling
from ..generation.encoding import PromptFacts
from ..generation.generator import build_prompt_batch, load_sample_images, load_sample_videos
from ..generation.rollout import Rollout, pad_rows
from ..models.coords import as_box, box_from_original
from ..rewards.families.multibox import read_groups
from ..rewards.families.temporal import truth_span
from .base import Trainer
from ..generation.conversation import ConversationBatch, build_conversation_batch
from ..parallel.step_metrics import Max, Mean, Same, Sum


def answer_for(solution, coord_system: str, image_size=None, input_size=None) -> str:
    """The solution as the model should write it: a box [x1, y1, x2, y2] (original pixels) mapped to the model's
    coordinate system and rounded to whole units; labelled boxes {label: [box, ...]} (multi-box grounding) the
    same way, as JSON; a string as it is; anything else as JSON (3 -> "3")."""
    def in_model_units(box) -> list[int]:
        return [int(round(v)) for v in box_from_original(box, coord_system, image_size, input_size)]

    if as_box(solution) is not None:
        return "[" + ", ".join(map(str, in_model_units(solution))) + "]"
    groups = read_groups(solution)
    if groups is not None:
        return json.dumps({label: [in_model_units(box) for box in boxes] for label, boxes in groups.items()})
    return solution if isinstance(solution, str) else json.dumps(solution)


def span_answer(span) -> str:
    """A temporal grounding solution [start, end] (seconds) as the prompt asks for it and ``temporal_iou`` reads it:
    "12.54 to 17.83"."""
    start, end = truth_span(span)
    return f"{start:.2f} to {end:.2f}"


def target_texts(samples: list[dict], facts: PromptFacts, answer_template: str, coord_system: str) -> list[str]:
    """Each sample's target text; a box refers to the sample's first image; a sample with a clip ``duration`` is a
    temporal grounding one, its solution a span."""
    texts = []
    for sample, sizes, input_sizes in zip(samples, facts.image_sizes, facts.input_sizes):
        if sample.get("duration") is not None:
            answer = span_answer(sample["solution"])
        else:
            answer = answer_for(sample["solution"], coord_system, sizes[0] if sizes else None,
                                input_sizes[0] if input_sizes else None)
        texts.append(answer_template.replace("{Answer}", answer))
    return texts


def build_sft_batch(samples: list[dict], processor, config: SFTConfig, coord_system: str,
                    images: Optional[list] = None, video: VideoSampling = VideoSampling(),
                    clips: Optional[list] = None) -> tuple[Rollout, list[str]]:
    """The prompts (left padded, as for a rollout; clips sampled by ``video``, or ``clips`` as read) with each target
    as its one "completion" (right padded; the mask is 1 on the target's tokens and its end-of-turn token, 0 on
    padding). Returns the batch and the target texts."""
    prompt, facts = build_prompt_batch(samples, processor, config.question_template, config.system_prompt,
                                       images=images, video=video, clips=clips)
    texts = target_texts(samples, facts, config.answer_template, coord_system)
    tokenizer = processor.tokenizer
    rows = [ids + [tokenizer.eos_token_id] for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    batch = Rollout(prompt=prompt, num_generations=1, completion_ids=pad_rows(rows, tokenizer.pad_token_id),
                    completion_mask=pad_rows([[1] * len(row) for row in rows], 0, dtype="int32"),
                    truncated=paddle.zeros([len(rows)], dtype="bool"))
    return batch, texts


def build_episode_batch(samples: list[dict], processor, config: SFTConfig, coord_system: str,
                        images: Optional[list] = None, video: VideoSampling = VideoSampling(),
                        clips: Optional[list] = None) -> ConversationBatch:
    """Each sample as one conversation (``generation/conversation.py``): its scripted episode, or its target as the one
    assistant turn; the targets are every assistant turn's tokens. Clips (the prompts' and the episodes' tool clips)
    are read with ``video`` (the prompts': ``clips`` where given)."""
    images = images if images is not None else [load_sample_images(s) for s in samples]
    clips = clips if clips is not None else [load_sample_videos(s, video, processor) for s in samples]
    answers = [None] * len(samples)
    plain = [i for i, sample in enumerate(samples) if not sample.get("episode")]
    if plain:  # their target text needs their images' input sizes (a box in the model's coordinates)
        _, facts = build_prompt_batch([samples[i] for i in plain], processor, config.question_template,
                                      config.system_prompt, images=[images[i] for i in plain],
                                      clips=[clips[i] for i in plain])
        for i, text in zip(plain, target_texts([samples[i] for i in plain], facts, config.answer_template,
                                               coord_system)):
            answers[i] = text
    return build_conversation_batch(samples, answers, processor, config.question_template, config.system_prompt,
                                    images=images, video=video, clips=clips)


def sft_loss(logp: paddle.Tensor, completion_mask: paddle.Tensor) -> paddle.Tensor:
    """Mean negative log-likelihood over the target tokens of the whole batch (``logp``: the targets' log-probs)."""
    mask = completion_mask.astype(logp.dtype)
    return -(logp * mask).sum() / mask.sum()


class SFTTrainer(Trainer):
    """Batches drawn like GRPO's prompts (a seeded permutation per epoch); the skeleton's setup, loop and
    checkpoints."""

    name = "SFT"

    def training_step(self) -> dict:
        start = time.perf_counter()
        draw, = self.next_samples()  # SFT draws one micro-batch at a time
        samples, images = draw.samples, draw.images
        if any(sample.get("episode") for sample in samples):
            batch = build_episode_batch(samples, self.processor, self.config, self.coord_system, images=images,
                                        video=self.generator.video, clips=draw.clips)
            mask = batch.loss_mask
        else:
            batch, _ = build_sft_batch(samples, self.processor, self.config, self.coord_system, images=images,
                                       video=self.generator.video, clips=draw.clips)
            mask = batch.completion_mask
        self.policy.train()
        with self.precision.compute():
            loss = sft_loss(self.forward(batch, self.config.logprob_chunk_size, 1.0), mask)
        self.backward(loss)
        update = self.apply_update([float(loss)])
        return self.step_metrics({"loss": Mean.one(float(loss)), **update, "target_tokens": Sum(int(mask.sum())),
                                  "step_seconds": Max(time.perf_counter() - start),
                                  "epoch": Same(self.sampler.progress)})

    def trainer_state(self) -> dict:
        return {"job": "sft"}
