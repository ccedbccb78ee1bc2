"""Supervised fine-tuning before GRPO: teach the answer format and a first, partly right policy.

Each sample's target is ``answer_template`` with ``{Answer}`` = its solution written the way the model must
answer (a box in the model's coordinate system, a count as digits), followed by the end-of-turn token. The
loss is the mean negative log-likelihood of the target tokens only: the prompt is never a target and padding
is masked. The targets take the place of sampled completions in a ``Rollout``, so the log-probs come from
the same chunked forward pass GRPO uses (``completion_logprobs``).

The result is ``output_dir/checkpoint-N``, a model folder that a GRPO config names as its
``model_name_or_path``.
"""
from __future__ import annotations

import dataclasses
import json
import math
import time
from typing import Optional

import numpy as np
import paddle
from tqdm import tqdm

from ..config import SFTConfig
from ..models.coords import box_from_original
from ..models.loading import default_coord_system, load_models
from ..models.lora import apply_lora, write_model_folder
from ..rewards.families.multibox import read_groups
from . import checkpoint as ckpt
from .logprobs import completion_logprobs
from .job import prepare_job
from .metrics import MetricsLogger
from .optim import build_optimizer
from ..generation.prompts import PromptFacts, build_prompt_batch
from ..generation.rollout import Rollout
from .sampler import PromptSampler
from .sharding import build_update


def _is_box(solution) -> bool:
    return isinstance(solution, (list, tuple)) and len(solution) == 4 and \
        all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in solution)


def answer_for(solution, coord_system: str, image_size=None, input_size=None) -> str:
    """The solution as the model should write it: a box [x1, y1, x2, y2] (original pixels) mapped to the model's
    coordinate system and rounded to whole units; labelled boxes {label: [box, ...]} (multi-box grounding) the
    same way, as JSON; a string as it is; anything else as JSON (3 -> "3")."""
    def in_model_units(box) -> list[int]:
        return [int(round(v)) for v in box_from_original(box, coord_system, image_size, input_size)]

    if _is_box(solution):
        return "[" + ", ".join(map(str, in_model_units(solution))) + "]"
    groups = read_groups(solution)
    if groups is not None:
        return json.dumps({label: [in_model_units(box) for box in boxes] for label, boxes in groups.items()})
    return solution if isinstance(solution, str) else json.dumps(solution)


def target_texts(samples: list[dict], facts: PromptFacts, answer_template: str, coord_system: str) -> list[str]:
    """Each sample's target text; a box refers to the sample's first image."""
    texts = []
    for sample, sizes, input_sizes in zip(samples, facts.image_sizes, facts.input_sizes):
        answer = answer_for(sample["solution"], coord_system, sizes[0] if sizes else None,
                            input_sizes[0] if input_sizes else None)
        texts.append(answer_template.replace("{Answer}", answer))
    return texts


def build_sft_batch(samples: list[dict], processor, config: SFTConfig, coord_system: str,
                    images: Optional[list] = None) -> tuple[Rollout, list[str]]:
    """The prompts (left padded, as for a rollout) with each target as its one "completion" (right padded; the
    mask is 1 on the target's tokens and its end-of-turn token, 0 on padding). Returns the batch and the
    target texts."""
    prompt, facts = build_prompt_batch(samples, processor, config.question_template, config.system_prompt,
                                       images=images)
    texts = target_texts(samples, facts, config.answer_template, coord_system)
    tokenizer = processor.tokenizer
    rows = [ids + [tokenizer.eos_token_id] for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    width = max(len(r) for r in rows)
    ids = np.full((len(rows), width), tokenizer.pad_token_id, dtype="int64")
    mask = np.zeros((len(rows), width), dtype="int32")
    for i, row in enumerate(rows):
        ids[i, :len(row)] = row
        mask[i, :len(row)] = 1
    batch = Rollout(prompt=prompt, num_generations=1, completion_ids=paddle.to_tensor(ids),
                    completion_mask=paddle.to_tensor(mask), truncated=paddle.zeros([len(rows)], dtype="bool"))
    return batch, texts


def sft_loss(model, batch: Rollout, chunk_size: int) -> paddle.Tensor:
    """Mean negative log-likelihood over the target tokens of the whole batch."""
    logp = completion_logprobs(model, batch, chunk_size, temperature=1.0)
    mask = batch.completion_mask.astype(logp.dtype)
    return -(logp * mask).sum() / mask.sum()


class SFTTrainer:
    """One process; batches drawn like GRPO's prompts (a seeded permutation per epoch)."""

    def __init__(self, config: SFTConfig, samples: Optional[list[dict]] = None):
        self.config = cfg = config
        self.samples = samples = prepare_job(cfg, samples)
        paddle.seed(cfg.seed)
        np.random.seed(cfg.seed)
        loaded = load_models(cfg.model_name_or_path, beta=0.0, dtype=cfg.dtype, freeze_vision=cfg.freeze_vision,
                             min_pixels=cfg.min_pixels, max_pixels=cfg.max_pixels,
                             gradient_checkpointing=cfg.gradient_checkpointing)
        self.policy, self.processor = loaded.policy, loaded.processor
        if cfg.lora:
            apply_lora(self.policy, cfg.lora_rank, cfg.lora_alpha, cfg.lora_dropout, cfg.lora_target_modules)
        self.coord_system = cfg.coord_system or default_coord_system(loaded.family)
        self.total_steps = cfg.max_steps if cfg.max_steps > 0 else \
            math.ceil(cfg.num_train_epochs * len(samples) / cfg.per_device_train_batch_size)
        optimizer, self.scheduler = build_optimizer(
            [p for p in self.policy.parameters() if not p.stop_gradient], cfg, self.total_steps, clip=False)
        self.update = build_update("", optimizer, self.policy, cfg.max_grad_norm, world_size=1)
        self.optimizer = self.update.optimizer
        self.sampler = PromptSampler(len(samples), cfg.per_device_train_batch_size, cfg.seed)
        self.step = 0
        self.logger = MetricsLogger(cfg.output_dir, use_visualdl=cfg.use_visualdl)

    def training_step(self) -> dict:
        start = time.perf_counter()
        samples = [self.samples[i] for i in self.sampler.next_batch()]
        batch, _ = build_sft_batch(samples, self.processor, self.config, self.coord_system)
        self.policy.train()
        loss = sft_loss(self.policy, batch, self.config.logprob_chunk_size)
        loss.backward()
        learning_rate = self.optimizer.get_lr()
        grad_norm = self.update.step()
        self.update.clear_grad()
        self.scheduler.step()
        self.step += 1
        return {"loss": float(loss), "learning_rate": float(learning_rate), "grad_norm": grad_norm,
                "target_tokens": int(batch.completion_mask.sum()), "step_seconds": time.perf_counter() - start,
                "epoch": self.sampler.progress}

    def save(self) -> str:
        cfg = self.config
        tmp = ckpt.begin_checkpoint(cfg.output_dir, self.step)
        state = {"global_step": self.step, "job": "sft", "sampler": self.sampler.state_dict(),
                 "total_steps": self.total_steps, "config": dataclasses.asdict(cfg)}
        return ckpt.finish_checkpoint(tmp, ckpt.checkpoint_dir(cfg.output_dir, self.step),
                                      write_model=lambda folder: write_model_folder(self.policy, folder, cfg),
                                      policy=self.policy,
                                      processor=self.processor, optimizer=self.optimizer, trainer_state=state,
                                      save_total_limit=cfg.save_total_limit)

    def train(self) -> dict:
        cfg = self.config
        history, last_saved = [], None
        bar = tqdm(total=self.total_steps, disable=cfg.disable_tqdm, desc="SFT", unit="step")
        try:
            while self.step < self.total_steps:
                metrics = self.training_step()
                history.append(metrics)
                bar.update(1)
                bar.set_postfix(loss=f"{metrics['loss']:.4f}")
                if self.step % cfg.logging_steps == 0:
                    self.logger.log(self.step, metrics, echo=bar.write)
                if cfg.save_steps and self.step % cfg.save_steps == 0:
                    last_saved = self.save()
            if last_saved is None or not last_saved.endswith(f"checkpoint-{self.step}"):
                last_saved = self.save()
        finally:
            bar.close()
            self.logger.close()
        return {"history": history, "checkpoint": last_saved, "output_dir": cfg.output_dir}
