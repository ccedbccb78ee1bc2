"""The GRPO loop. One optimizer step reads top to bottom:

prompts -> rollout (G completions each) -> rewards -> group advantages -> loss -> optimizer step -> metrics.

With ``num_iterations`` = mu > 1 a rollout is made every mu steps and reused by the next mu steps,
its log-probs at rollout time kept as the PPO "old" policy (TRL's semantics).
"""
from __future__ import annotations

import collections
import dataclasses
import math
import os
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np
import paddle
from tqdm import tqdm

from ..config import ConfigError, GRPOConfig
from ..data.samples import DataError
from ..evaluation.heldout import HeldoutEval
from ..models.loading import default_coord_system, load_models
from ..models.lora import ADAPTER_DIR, adapters_disabled, apply_lora, load_adapter, write_model_folder
from ..rewards.manager import RewardManager, reward_columns
from . import checkpoint as ckpt
from .logprobs import completion_logprobs
from .loss import combine_rewards, grpo_loss, group_advantages
from .metrics import MetricsLogger
from ..generation.prompts import PromptFacts, build_prompt_batch, load_sample_images
from ..generation.rollout import PromptBatch, Rollout, SamplingParams, sample_completions
from .distributed import barrier, in_rank_order, init_distributed, reduce_metrics, replica_io, sum_across_ranks
from .job import prepare_job
from .optim import build_optimizer
from .sampler import PromptSampler
from .sharding import build_update, check_sharding_supported, fleet_strategy, optimizer_clips


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


class GRPOTrainer:
    def __init__(self, config: GRPOConfig, samples: Optional[list[dict]] = None):
        self.config = cfg = config
        self.samples = prepare_job(cfg, samples)
        check_sharding_supported(cfg.sharding, paddle.get_device())
        self.rank, self.world_size = init_distributed(fleet_strategy if cfg.sharding else None)
        self.is_main = self.rank == 0
        self.rewards = RewardManager.from_config(cfg)
        self.reward_names = self.rewards.names

        resume_path = ckpt.resolve_checkpoint(cfg.resume_from_checkpoint, cfg.output_dir) \
            if cfg.resume_from_checkpoint else None
        paddle.seed(cfg.seed)
        np.random.seed(cfg.seed)
        if cfg.lora and cfg.sync_ref_model:
            raise ConfigError("config keys 'lora' and 'sync_ref_model': with LoRA the reference is the base model")
        # with LoRA the policy starts from the base model and the adapter is restored on top of it
        policy_path = cfg.model_name_or_path if cfg.lora else resume_path or cfg.model_name_or_path
        with replica_io(self.world_size):
            loaded = in_rank_order(lambda: load_models(
                policy_path, beta=0.0 if cfg.lora else cfg.beta, dtype=cfg.dtype, freeze_vision=cfg.freeze_vision,
                min_pixels=cfg.min_pixels, max_pixels=cfg.max_pixels, reference_path=self._reference_path(resume_path),
                gradient_checkpointing=cfg.gradient_checkpointing), self.rank, self.world_size)
        self.policy, self.reference, self.processor = loaded.policy, loaded.reference, loaded.processor
        if cfg.lora:
            apply_lora(self.policy, cfg.lora_rank, cfg.lora_alpha, cfg.lora_dropout, cfg.lora_target_modules)
            if resume_path:
                load_adapter(self.policy, os.path.join(resume_path, ADAPTER_DIR))
        self.coord_system = cfg.coord_system or default_coord_system(loaded.family)
        tokenizer = self.processor.tokenizer
        self.eos_token_ids = sorted({tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|endoftext|>")})
        self.pad_token_id = tokenizer.pad_token_id
        self.sampling = SamplingParams(max_new_tokens=cfg.max_completion_length, temperature=cfg.temperature,
                                       top_p=cfg.top_p, top_k=cfg.top_k)

        prompts_per_step = cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps * self.world_size
        self.total_steps = cfg.max_steps if cfg.max_steps > 0 else \
            math.ceil(cfg.num_train_epochs * len(self.samples) / prompts_per_step) * cfg.num_iterations
        optimizer, self.scheduler = build_optimizer(
            [p for p in self.policy.parameters() if not p.stop_gradient], cfg, self.total_steps,
            clip=optimizer_clips(cfg.sharding, self.world_size))
        # gradient sync, clipping and the step, over ranks as config key 'sharding' says
        if cfg.sharding and self.world_size == 1:
            print(f"sharding {cfg.sharding}: one process, nothing to shard; the optimizer state stays whole")
        self.update = build_update(cfg.sharding, optimizer, self.policy, cfg.max_grad_norm, self.world_size)
        self.optimizer = self.update.optimizer
        # one global sequence of prompt batches; each rank takes its own slice of every batch
        self.sampler = PromptSampler(len(self.samples), cfg.per_device_train_batch_size * self.world_size, cfg.seed)
        self.step = 0
        self.buffer: list[Experience] = []
        self.step_counters: dict[str, float] = collections.defaultdict(float)
        if resume_path:
            self._restore(resume_path)
        self.logger = MetricsLogger(cfg.output_dir, use_visualdl=cfg.use_visualdl) if self.is_main else None
        self.heldout = HeldoutEval(cfg, self.policy, self.processor, self.coord_system) \
            if cfg.eval_steps and self.is_main else None

    # ---- setup -------------------------------------------------------------------------------
    def _reference_path(self, resume_path: Optional[str]) -> str:
        """The original model, or the synced reference a checkpoint saved (sync_ref_model)."""
        synced = os.path.join(resume_path, "ref_model") if resume_path else None
        return synced if synced and os.path.isdir(synced) else self.config.model_name_or_path

    def _reference_logprobs(self, rollout: Rollout) -> paddle.Tensor:
        """Under the reference policy: the frozen copy, or with LoRA the policy with its adapters off."""
        cfg = self.config
        if cfg.lora:
            with adapters_disabled(self.policy):
                return completion_logprobs(self.policy, rollout, cfg.logprob_chunk_size, cfg.temperature)
        return completion_logprobs(self.reference, rollout, cfg.logprob_chunk_size, cfg.temperature)

    def _restore(self, path: str) -> None:
        state = ckpt.load_trainer_state(path)
        self.step = state["global_step"]
        self.sampler.load_state_dict(state["sampler"])
        ckpt.load_optimizer_state(self.optimizer, self.policy, ckpt.read_optimizer_state(path))
        extra_path = os.path.join(path, f"extra_state_rank{self.rank}.pdparams")
        if os.path.isfile(extra_path):
            self.buffer = [Experience.from_state(e) for e in paddle.load(extra_path)["buffer"]]
        ckpt.load_rng_state(path)

    # ---- one step ----------------------------------------------------------------------------
    def _score(self, texts: list[str], samples: list[dict], facts: PromptFacts) -> np.ndarray:
        columns = reward_columns(samples, facts.image_sizes, facts.input_sizes, self.coord_system,
                                 repeat=self.config.num_generations)
        scores = self.rewards.score(texts, columns)
        for key, value in scores.counters.items():
            self.step_counters[key] += value
        return scores.per_function

    def _next_samples(self) -> tuple[list[dict], list, list[int]]:
        """This rank's slice of the next global batch, images opened, with each prompt's place in the global
        batch. A sample whose image fails now is skipped and counted; a batch left empty on any rank is
        replaced on every rank, so the ranks' samplers stay in step."""
        per_device = self.config.per_device_train_batch_size
        while True:
            batch = self.sampler.next_batch()
            samples, images, places = [], [], []
            for place in range(self.rank * per_device, (self.rank + 1) * per_device):
                sample = self.samples[batch[place]]
                try:
                    images.append(load_sample_images(sample))
                except DataError as e:
                    print(f"skipping sample {batch[place]}: {e}")
                    self.step_counters["data/skipped_samples"] += 1
                    continue
                samples.append(sample)
                places.append(place)
            if sum_across_ranks(float(not samples), self.world_size) == 0:
                return samples, images, places

    def _uniforms(self, micro_batch: int, places: list[int]) -> paddle.Tensor:
        """The random numbers each completion samples with, from (seed, step, micro-batch, place in the global
        batch, generation): the same completions on any number of ranks, and after a resume."""
        cfg = self.config
        rows = [np.random.default_rng([cfg.seed, self.step, micro_batch, place, g]).random(cfg.max_completion_length)
                for place in places for g in range(cfg.num_generations)]
        return paddle.to_tensor(np.stack(rows).astype("float32"))

    def make_experience(self, micro_batch: int = 0) -> Experience:
        cfg = self.config
        samples, images, places = self._next_samples()
        prompt, facts = build_prompt_batch(samples, self.processor, cfg.question_template, cfg.system_prompt,
                                           images=images)
        start = time.perf_counter()
        rollout = sample_completions(self.policy, prompt, cfg.num_generations, self.sampling,
                                     self.eos_token_ids, self.pad_token_id, uniforms=self._uniforms(micro_batch, places))
        generation_seconds = time.perf_counter() - start
        ids = rollout.completion_ids.numpy()
        lengths = rollout.completion_mask.sum(axis=1).numpy()
        texts = self.processor.tokenizer.batch_decode([row[:n].tolist() for row, n in zip(ids, lengths)],
                                                      skip_special_tokens=True)
        scores = self._score(texts, samples, facts)
        rewards = paddle.to_tensor(self.rewards.combine(scores))
        advantages = group_advantages(rewards, cfg.num_generations, cfg.scale_rewards)
        mask = rollout.completion_mask
        if cfg.mask_truncated_completions:
            mask = mask * (~rollout.truncated).astype(mask.dtype).unsqueeze(1)
        with paddle.no_grad():
            old_logp = completion_logprobs(self.policy, rollout, cfg.logprob_chunk_size, cfg.temperature) \
                if cfg.num_iterations > 1 else None
            ref_logp = self._reference_logprobs(rollout) if cfg.beta != 0.0 else None
        return Experience(rollout=rollout, mask=mask, advantages=advantages, old_logp=old_logp, ref_logp=ref_logp,
                          scores=scores, rewards=rewards.numpy(), texts=texts, samples=samples,
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
            logp = self.update.logprobs(exp.rollout, cfg.logprob_chunk_size, cfg.temperature)
            old_logp = exp.old_logp if exp.old_logp is not None else logp.detach()
            loss, loss_stats = grpo_loss(
                logp, old_logp, exp.ref_logp, exp.advantages, exp.mask, beta=cfg.beta,
                epsilon_low=cfg.epsilon, epsilon_high=cfg.clip_high, loss_type=cfg.loss_type,
                max_completion_length=cfg.max_completion_length, num_items_in_batch=tokens_in_step)
            if cfg.loss_type != "dapo":  # dapo already divides by the whole step's token count
                loss = loss / cfg.gradient_accumulation_steps
            loss.backward()
            losses.append(float(loss))
            stats.append(loss_stats)
        learning_rate = self.optimizer.get_lr()
        grad_norm = self.update.step()
        self.update.clear_grad()
        self.scheduler.step()
        self.step += 1
        if self.reference is not None and cfg.sync_ref_model and self.step % cfg.ref_model_sync_steps == 0:
            self._sync_reference()
        metrics = self._step_metrics(losses, stats, grad_norm, learning_rate, time.perf_counter() - start)
        return reduce_metrics(metrics, self.world_size)

    @paddle.no_grad()
    def _sync_reference(self) -> None:
        """ref <- alpha * policy + (1 - alpha) * ref (TRL's sync_ref_model)."""
        alpha = self.config.ref_model_mixup_alpha
        policy_params = dict(self.policy.named_parameters())
        for name, ref_param in self.reference.named_parameters():
            ref_param.set_value(alpha * policy_params[name] + (1 - alpha) * ref_param)

    def _step_metrics(self, losses, stats, grad_norm, learning_rate, seconds) -> dict:
        exps = self.buffer
        g = self.config.num_generations
        scores = np.concatenate([e.scores for e in exps])
        rewards = np.concatenate([e.rewards for e in exps])
        lengths = np.concatenate([e.rollout.completion_mask.sum(axis=1).numpy() for e in exps])
        truncated = np.concatenate([e.rollout.truncated.numpy() for e in exps])
        generated = int(lengths.sum())
        generation_seconds = sum(e.generation_seconds for e in exps)
        metrics = {
            "loss": float(sum(losses)),
            "reward": float(rewards.mean()),
            "reward_std": float(rewards.reshape(-1, g).std(axis=1, ddof=1).mean()),
            "kl": float(np.mean([s.kl for s in stats])),
            "clip_ratio/low_mean": float(np.mean([s.clip_low for s in stats])),
            "clip_ratio/high_mean": float(np.mean([s.clip_high for s in stats])),
            "clip_ratio/region_mean": float(np.mean([s.clip_region for s in stats])),
            "completion_length": float(lengths.mean()),
            "completion_length/max": float(lengths.max()),
            "truncated_ratio": float(truncated.mean()),
            "learning_rate": float(learning_rate),
            "grad_norm": grad_norm,
            "step_seconds": seconds,
            "tokens_per_second": generated / generation_seconds if generation_seconds > 0 else 0.0,
            "epoch": self.sampler.progress,
        }
        for j, name in enumerate(self.reward_names):
            column = scores[:, j][~np.isnan(scores[:, j])]
            metrics[f"rewards/{name}/mean"] = float(column.mean()) if column.size else float("nan")
            metrics[f"rewards/{name}/std"] = float(column.std()) if column.size else float("nan")
        metrics.update(self.step_counters)
        self.step_counters.clear()
        return metrics

    def _completion_rows(self) -> list[dict]:
        g = self.config.num_generations
        rows = []
        for exp in self.buffer:
            advantages = exp.advantages.numpy()
            for i, text in enumerate(exp.texts):
                sample = exp.samples[i // g]
                row = {"step": self.step, "problem": sample["problem"], "images": sample["images"],
                       "solution": sample["solution"], "completion": text,
                       "reward": float(exp.rewards[i]), "advantage": float(advantages[i])}
                for j, name in enumerate(self.reward_names):
                    value = exp.scores[i, j]
                    row[f"reward/{name}"] = None if np.isnan(value) else float(value)
                rows.append(row)
        return rows

    # ---- the run -----------------------------------------------------------------------------
    def save(self) -> str:
        """Rank 0 writes the model, optimizer and state (identical on every rank); each rank adds its own
        rollout buffer when a resume needs it (mid-way through num_iterations), and under sharding its share of
        the optimizer state."""
        cfg = self.config
        tmp = ckpt.begin_checkpoint(cfg.output_dir, self.step) if self.is_main else None
        barrier(self.world_size)
        tmp_dir = ckpt.checkpoint_dir(cfg.output_dir, self.step) + ".tmp"
        if self.step % cfg.num_iterations != 0:
            paddle.save({"buffer": [e.state() for e in self.buffer]},
                        os.path.join(tmp_dir, f"extra_state_rank{self.rank}.pdparams"))
        sharded = self.update.shards_optimizer_state
        if sharded:
            ckpt.save_optimizer(tmp_dir, self.optimizer, self.policy, shard=self.rank)
        barrier(self.world_size)
        final = ckpt.checkpoint_dir(cfg.output_dir, self.step)
        if self.is_main:
            state = {"global_step": self.step, "sampler": self.sampler.state_dict(), "total_steps": self.total_steps,
                     "world_size": self.world_size, "config": dataclasses.asdict(cfg)}
            reference = self.reference if cfg.sync_ref_model else None
            with replica_io(self.world_size):
                ckpt.finish_checkpoint(tmp, final, write_model=lambda folder: write_model_folder(self.policy, folder, cfg), policy=self.policy,
                                       processor=self.processor, optimizer=None if sharded else self.optimizer,
                                       trainer_state=state,
                                       reference=reference, save_total_limit=cfg.save_total_limit)
        barrier(self.world_size)
        return final

    def train(self) -> dict:
        cfg = self.config
        history = []
        bar = tqdm(total=self.total_steps, initial=self.step, disable=cfg.disable_tqdm or not self.is_main,
                   desc="GRPO", unit="step")
        last_saved = None
        try:
            if self.heldout is not None and self.step == 0:  # the score training starts from
                self.logger.log(0, self.heldout.evaluate(0, echo=bar.write), echo=lambda _: None)
            while self.step < self.total_steps:
                metrics = self.training_step()
                if self.heldout is not None and self.heldout.due(self.step, self.total_steps):
                    metrics.update(self.heldout.evaluate(self.step, echo=bar.write))
                history.append(metrics)
                bar.update(1)
                bar.set_postfix(reward=f"{metrics['reward']:.3f}", loss=f"{metrics['loss']:.4f}")
                if self.is_main and (self.step % cfg.logging_steps == 0 or "eval/score" in metrics):
                    self.logger.log(self.step, metrics, echo=bar.write)
                if self.is_main and cfg.log_completions_steps and self.step % cfg.log_completions_steps == 0:
                    self.logger.log_completions(self._completion_rows())
                if cfg.save_steps and self.step % cfg.save_steps == 0:
                    last_saved = self.save()
            if last_saved is None or not last_saved.endswith(f"checkpoint-{self.step}"):
                last_saved = self.save()
        finally:
            bar.close()
            if self.logger is not None:
                self.logger.close()
        return {"history": history, "checkpoint": last_saved, "output_dir": cfg.output_dir}
