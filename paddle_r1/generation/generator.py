"""A model and its processor answering samples: prompts, the KV-cached rollout, and the text of each completion.

Training (G sampled completions per prompt), the held-out evaluation and the benchmark scripts (one greedy
completion per prompt) all generate through ``Generator.generate``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import paddle

from .prompts import PromptFacts, build_prompt_batch
from .rollout import Rollout, SamplingParams, sample_completions


def eos_token_ids(tokenizer) -> list[int]:
    """The ids that end a completion: the chat turn's end and ``<|endoftext|>``."""
    return sorted({tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|endoftext|>")})


@dataclass
class Generation:
    rollout: Rollout
    texts: list  # [B * G] completion texts, special tokens removed
    facts: PromptFacts  # per prompt: image sizes before and after the processor's resize


class Generator:
    def __init__(self, model, processor, coord_system: str):
        self.model, self.processor, self.coord_system = model, processor, coord_system
        self.tokenizer = processor.tokenizer
        self.eos_token_ids = eos_token_ids(self.tokenizer)

    def generate(self, samples: list[dict], num_generations: int, sampling: SamplingParams, question_template: str,
                 system_prompt: Optional[str] = None, images: Optional[list] = None,
                 uniforms: Optional[paddle.Tensor] = None) -> Generation:
        """``num_generations`` completions for each sample (rows grouped sample by sample). ``images``: each
        sample's opened images (else opened here); ``uniforms``: the random numbers each row samples with."""
        prompt, facts = build_prompt_batch(samples, self.processor, question_template, system_prompt, images=images)
        rollout = sample_completions(self.model, prompt, num_generations, sampling, self.eos_token_ids,
                                     self.tokenizer.pad_token_id, uniforms=uniforms)
        return Generation(rollout=rollout, texts=self.decode(rollout), facts=facts)

    def decode(self, rollout: Rollout) -> list[str]:
        ids = rollout.completion_ids.tolist()
        lengths = rollout.completion_mask.sum(axis=1).tolist()
        return self.tokenizer.batch_decode([row[:n] for row, n in zip(ids, lengths)], skip_special_tokens=True)
