"""GRPO: how one optimizer step is made. It reads top to bottom:

prompts -> rollout (G completions each) -> rewards -> group advantages -> loss -> optimizer step -> metrics.

With ``num_iterations`` = mu > 1 a rollout is made every mu steps and reused by the next mu steps,
its log-probs at rollout time kept as the PPO "old" policy (TRL's semantics). Setup, the loop, held-out
evaluation, checkpoints and resume are the shared skeleton's (``trainer/base.py``).
"""
from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np
import paddle

from ..config import GRPOConfig
from ..generation.rollout import PromptBatch, Rollout, SamplingParams
from ..models.lora import adapters_disabled
from ..rewards.manager import RewardManager, reward_columns
from .base import Trainer
from .distributed import reduce_metrics, sum_across_ranks
from .loss import completion_logprobs
from .loss import grpo_loss, group_advantages


@dataclass
class Experience:
    """One micro-batch of rollouts with everything the loss needs."""

    rollout: Rollout
    mask: paddle.Tensor  # completion mask, truncated rows zeroed if mask_truncated_completions
    advantages: paddle.Tensor
    old_logp: Optional[paddle.Tensor]
    ref_logp: Optional[paddle.Tensor]
    scores: np.ndarray  # [N, F], NaN where a reward returned None
    rewards: np.ndarray  # [N] weighted sum
    texts: list
    samples: list
    generation_seconds: float

    def state(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_state(cls, state: dict) -> "Experience":
        rollout = dict(state["rollout"])
        rollout["prompt"] = PromptBatch(**rollout["prompt"])
        return cls(**{**state, "rollout": Rollout(**rollout)})


class GRPOTrainer(Trainer):
    name = "GRPO"

    def __init__(self, config: GRPOConfig, samples: Optional[list[dict]] = None, heldout=None):
        self.rewards = RewardManager.from_config(config)  # settings checked before any model loads
        self.sampling = SamplingParams(max_new_tokens=config.max_completion_length, temperature=config.temperature,
                                       top_p=config.top_p, top_k=config.top_k)
        self.buffer: list[Experience] = []
        super().__init__(config, samples, heldout)

    # ---- what the skeleton asks ----------------------------------------------------------------
    @property
    def sharding_stage(self) -> str:
        return self.config.sharding

    @property
    def loads_reference_model(self) -> bool:
        """With LoRA the reference is the policy with its adapters off: no second model."""
        return self.config.loads_reference_model

    @property
    def prompts_per_step(self) -> int:
        cfg = self.config
        return cfg.prompts_per_device * cfg.gradient_accumulation_steps * self.world_size

    @property
    def steps_per_batch(self) -> int:
        return self.config.num_iterations

    def save_rank_files(self, folder: str) -> None:
        """Mid-way through num_iterations a resume needs each rank's rollout buffer."""
        if self.step % self.config.num_iterations != 0:
            paddle.save({"buffer": [e.state() for e in self.buffer]},
                        os.path.join(folder, f"extra_state_rank{self.rank}.pdparams"))

    def restore_job(self, path: str, state: dict) -> None:
        extra_path = os.path.join(path, f"extra_state_rank{self.rank}.pdparams")
        if os.path.isfile(extra_path):
            self.buffer = [Experience.from_state(e) for e in paddle.load(extra_path)["buffer"]]

    # ---- one step ----------------------------------------------------------------------------
    def _reference_logprobs(self, rollout: Rollout) -> paddle.Tensor:
        """Under the reference policy: the frozen copy, or with LoRA the policy with its adapters off."""
        cfg = self.config
        if cfg.lora:
            with adapters_disabled(self.policy):
                return completion_logprobs(self.policy, rollout, cfg.logprob_chunk_size, cfg.temperature)
        return completion_logprobs(self.reference, rollout, cfg.logprob_chunk_size, cfg.temperature)

    def _uniforms(self, micro_batch: int, places: list[int]) -> paddle.Tensor:
        """The random numbers each completion samples with, from (seed, step, micro-batch, place in the global
        batch, generation): the same completions on any number of ranks, and after a resume."""
        cfg = self.config
        rows = [np.random.default_rng([cfg.seed, self.step, micro_batch, place, g]).random(cfg.max_completion_length)
                for place in places for g in range(cfg.num_generations)]
        return paddle.to_tensor(np.stack(rows).astype("float32"))

    def make_experience(self, micro_batch: int = 0) -> Experience:
        cfg = self.config
        samples, images, places = self.next_samples()
        start = time.perf_counter()
        generation = self.generator.generate(samples, cfg.num_generations, self.sampling, cfg.question_template,
                                             cfg.system_prompt, images=images,
                                             uniforms=self._uniforms(micro_batch, places))
        generation_seconds = time.perf_counter() - start
        rollout, texts, facts = generation.rollout, generation.texts, generation.facts
        columns = reward_columns(samples, facts.image_sizes, facts.input_sizes, self.coord_system,
                                 repeat=cfg.num_generations)
        scores = self.rewards.score(texts, columns)
        for key, value in scores.counters.items():
            self.count(key, value)
        advantages = group_advantages(paddle.to_tensor(scores.rewards), cfg.num_generations, cfg.scale_rewards)
        mask = rollout.completion_mask
        if cfg.mask_truncated_completions:
            mask = mask * (~rollout.truncated).astype(mask.dtype).unsqueeze(1)
        with paddle.no_grad():
            old_logp = completion_logprobs(self.policy, rollout, cfg.logprob_chunk_size, cfg.temperature) \
                if cfg.num_iterations > 1 else None
            ref_logp = self._reference_logprobs(rollout) if cfg.uses_reference else None
        return Experience(rollout=rollout, mask=mask, advantages=advantages, old_logp=old_logp, ref_logp=ref_logp,
                          scores=scores.per_function, rewards=scores.rewards, texts=texts, samples=samples,
                          generation_seconds=generation_seconds)

    def training_step(self) -> dict:
        cfg = self.config
        start = time.perf_counter()
        if self.step % cfg.num_iterations == 0:
            self.buffer = [self.make_experience(i) for i in range(cfg.gradient_accumulation_steps)]
        # dapo divides by the step's completion tokens over all ranks; gradients are then averaged over ranks
        tokens_in_step = sum_across_ranks(float(sum(float(e.mask.sum()) for e in self.buffer)),
                                          self.world_size) / self.world_size
        losses, stats = [], []
        for exp in self.buffer:
            logp = self.forward(exp.rollout, cfg.logprob_chunk_size, cfg.temperature)
            old_logp = exp.old_logp if exp.old_logp is not None else logp.detach()
            loss, loss_stats = grpo_loss(
                logp, old_logp, exp.ref_logp, exp.advantages, exp.mask, beta=cfg.beta,
                epsilon_low=cfg.epsilon, epsilon_high=cfg.clip_high, loss_type=cfg.loss_type,
                max_completion_length=cfg.max_completion_length, num_items_in_batch=tokens_in_step)
            if cfg.loss_type != "dapo":  # dapo already divides by the whole step's token count
                loss = loss / cfg.gradient_accumulation_steps
            self.backward(loss)
            losses.append(float(loss))
            stats.append(loss_stats)
        update = self.apply_update(losses)
        if self.reference is not None and cfg.sync_ref_model and self.step % cfg.ref_model_sync_steps == 0:
            self._sync_reference()
        metrics = self._step_metrics(losses, stats, update, time.perf_counter() - start)
        return reduce_metrics(metrics, self.world_size)

    @paddle.no_grad()
    def _sync_reference(self) -> None:
        """ref <- alpha * policy + (1 - alpha) * ref (TRL's sync_ref_model)."""
        alpha = self.config.ref_model_mixup_alpha
        policy_params = dict(self.policy.named_parameters())
        for name, ref_param in self.reference.named_parameters():
            ref_param.set_value(alpha * policy_params[name] + (1 - alpha) * ref_param)

    def _step_metrics(self, losses, stats, update: dict, seconds) -> dict:
        """The step's numbers; completions no reward scored (reward NaN) are left out of the reward statistics."""
        exps = self.buffer
        g = self.config.num_generations
        scores = np.concatenate([e.scores for e in exps])
        rewards = np.concatenate([e.rewards for e in exps])
        lengths = np.concatenate([e.rollout.completion_mask.sum(axis=1).numpy() for e in exps])
        truncated = np.concatenate([e.rollout.truncated.numpy() for e in exps])
        generation_seconds = sum(e.generation_seconds for e in exps)
        metrics = {
            "loss": float(sum(losses)),
            "reward": _nan_mean(rewards),
            "reward_std": _nan_mean(_nan_std_rows(rewards.reshape(-1, g))),
            "kl": float(np.mean([s.kl for s in stats])),
            "clip_ratio/low_mean": float(np.mean([s.clip_low for s in stats])),
            "clip_ratio/high_mean": float(np.mean([s.clip_high for s in stats])),
            "clip_ratio/region_mean": float(np.mean([s.clip_region for s in stats])),
            "completion_length": float(lengths.mean()),
            "completion_length/max": float(lengths.max()),
            "truncated_ratio": float(truncated.mean()),
            **update,
            "step_seconds": seconds,
            "tokens_per_second": int(lengths.sum()) / generation_seconds if generation_seconds > 0 else 0.0,
            "epoch": self.sampler.progress,
        }
        for j, name in enumerate(self.rewards.names):
            column = scores[:, j][~np.isnan(scores[:, j])]
            metrics[f"rewards/{name}/mean"] = float(column.mean()) if column.size else float("nan")
            metrics[f"rewards/{name}/std"] = float(column.std()) if column.size else float("nan")
        metrics.update(self.step_counters)
        self.step_counters.clear()
        return metrics

    def completion_rows(self) -> list[dict]:
        every = self.config.log_completions_steps
        if not every or self.step % every:
            return []
        g = self.config.num_generations
        rows = []
        for exp in self.buffer:
            advantages = exp.advantages.numpy()
            for i, text in enumerate(exp.texts):
                sample = exp.samples[i // g]
                row = {"step": self.step, "problem": sample["problem"], "images": sample["images"],
                       "solution": sample["solution"], "completion": text,
                       "reward": _json_number(exp.rewards[i]), "advantage": float(advantages[i])}
                for j, name in enumerate(self.rewards.names):
                    row[f"reward/{name}"] = _json_number(exp.scores[i, j])
                rows.append(row)
        return rows


def _nan_mean(values: np.ndarray) -> float:
    kept = values[~np.isnan(values)]
    return float(kept.mean()) if kept.size else float("nan")


def _nan_std_rows(grouped: np.ndarray) -> np.ndarray:
    """Unbiased std of each row over its non-NaN values (NaN with fewer than two)."""
    out = np.full(grouped.shape[0], np.nan)
    for i, row in enumerate(grouped):
        kept = row[~np.isnan(row)]
        if kept.size > 1:
            out[i] = kept.std(ddof=1)
    return out


def _json_number(value) -> Optional[float]:
    return None if np.isnan(value) else float(value)
