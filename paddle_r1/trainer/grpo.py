"""GRPO: how one optimizer step is made. It reads top to bottom:

prompts -> rollout (G completions each) -> rewards -> group advantages -> loss -> optimizer step -> metrics.

With ``num_iterations`` = mu > 1 a rollout is made every mu steps and reused by the next mu steps,
its log-probs at rollout time kept as the PPO "old" policy (TRL's semantics). Setup, the loop, held-out
evaluation, checkpoints and resume are the shared skeleton's (``trainer/base.py``).
"""
from __future__ import annotations

import dataclasses
import glob
import os
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np
import paddle

from ..config import GRPOConfig
from ..errors import ConfigError
from ..generation.decoder import ONE_TOKEN_RUNS, supports as decoder_supports
from ..generation.rollout import PromptBatch, Rollout, SamplingParams
from ..models.lora import adapter_state, adapter_values, adapters_disabled
from ..rewards.manager import RewardManager, reward_columns
from .base import Trainer
from .distributed import phase, sum_across_ranks
from .dynamic_sampling import concat_rollouts, informative_groups, select_groups
from .loss import advantages_for, completion_logprobs, grpo_loss, kl_divergence, overlong_penalty
from .resume import BatchLayout
from .step_metrics import Max, Mean, Same, Std, Sum


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
    image_sizes: Optional[list] = None  # per prompt, what the rewards saw: original and resized (w, h) of each image
    input_sizes: Optional[list] = None

    def state(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_state(cls, state: dict) -> "Experience":
        rollout = dict(state["rollout"])
        rollout["prompt"] = PromptBatch(**rollout["prompt"])
        return cls(**{**state, "rollout": Rollout(**rollout)})


@dataclass
class _Candidates:
    """Completions and their scores before advantages: one rollout's, or the kept groups of several."""

    rollout: Rollout
    texts: list
    samples: list
    image_sizes: list
    input_sizes: list
    scores: np.ndarray
    rewards: np.ndarray
    seconds: float

    def group(self, i: int) -> "_Candidates":
        g = self.rollout.num_generations
        rows = slice(i * g, (i + 1) * g)
        images_per_prompt = [len(sizes) for sizes in self.image_sizes]
        return _Candidates(select_groups(self.rollout, [i], images_per_prompt), self.texts[rows], [self.samples[i]],
                           [self.image_sizes[i]], [self.input_sizes[i]], self.scores[rows], self.rewards[rows],
                           self.seconds)

    @staticmethod
    def join(groups: list["_Candidates"], pad_token_id: int, seconds: float) -> "_Candidates":
        def joined(field: str) -> list:
            return [item for c in groups for item in getattr(c, field)]

        return _Candidates(concat_rollouts([c.rollout for c in groups], pad_token_id), joined("texts"),
                           joined("samples"), joined("image_sizes"), joined("input_sizes"),
                           np.concatenate([c.scores for c in groups]), np.concatenate([c.rewards for c in groups]),
                           seconds)


REFERENCE_ADAPTER_FILE = "reference_adapter.pdparams"
BUFFER_FILE = "extra_state_rank{}.pdparams"  # a rank's rollout buffer, saved mid-way through num_iterations


class GRPOTrainer(Trainer):
    name = "GRPO"

    def __init__(self, config: GRPOConfig, samples: Optional[list[dict]] = None, heldout=None):
        self.rewards = RewardManager.from_config(config)  # settings checked before any model loads
        self.sampling = SamplingParams(max_new_tokens=config.max_completion_length, temperature=config.temperature,
                                       top_p=config.top_p, top_k=config.top_k, engine=config.rollout_engine)
        self.buffer: list[Experience] = []
        self.reference_adapters: Optional[dict] = None  # with LoRA and a reference that follows the policy
        super().__init__(config, samples, heldout)
        if config.rollout_engine == "one_token" and not decoder_supports(self.policy):
            raise ConfigError(f"config key 'rollout_engine': one_token {ONE_TOKEN_RUNS}; this run needs auto or "
                              "layers", keys=("rollout_engine",))
        if config.lora and config.reference_update != "none" and self.reference_adapters is None:
            self.reference_adapters = {n: p.detach().clone() for n, p in adapter_state(self.policy).items()}

    # ---- what the skeleton asks ----------------------------------------------------------------
    @property
    def sharding_stage(self) -> str:
        return self.config.sharding

    @property
    def loads_reference_model(self) -> bool:
        """With LoRA the reference is the policy with its adapters off: no second model."""
        return self.config.loads_reference_model

    @property
    def steps_per_batch(self) -> int:
        return self.config.num_iterations

    @property
    def saves_reference(self) -> bool:
        """A reference that follows the policy is part of the run's state (a frozen one is the original model)."""
        return self.reference is not None and self.config.reference_update != "none"

    def save_rank_files(self, folder: str) -> None:
        """Mid-way through num_iterations a resume needs each rank's rollout buffer; with LoRA, a reference that
        follows the policy keeps its own adapter values."""
        if self.step % self.config.num_iterations != 0:
            paddle.save({"buffer": [e.state() for e in self.buffer]},
                        os.path.join(folder, BUFFER_FILE.format(self.rank)))
        if self.reference_adapters is not None and self.is_main:
            paddle.save(self.reference_adapters, os.path.join(folder, REFERENCE_ADAPTER_FILE))

    def check_layout_change(self, path: str, saved: BatchLayout, now: BatchLayout) -> None:
        """A checkpoint saved mid-way through num_iterations holds each rank's rollout buffer, micro-batches of that
        rank's prompts: another layout cannot take them as they are, and rolling out again would train on other
        completions than the saved run. Refused, saying how to go on."""
        pattern = os.path.join(glob.escape(path), BUFFER_FILE.format("*"))
        buffers = sorted(os.path.basename(f) for f in glob.glob(pattern))
        if buffers:
            raise ConfigError(
                f"config key 'resume_from_checkpoint': {path} was saved mid-way through num_iterations (its rollout "
                f"buffers {', '.join(buffers)} are per rank and micro-batch: {saved.ranks} rank(s) x "
                f"{saved.prompts_per_device} prompt(s) x {saved.accumulation} micro-step(s)); this run has "
                f"{now.ranks} x {now.prompts_per_device} x {now.accumulation}. Resume it with its layout, or from a "
                "checkpoint whose step is a multiple of num_iterations (a save_steps that is one gives only such "
                "checkpoints)", keys=("resume_from_checkpoint",))

    def restore_job(self, path: str, state: dict) -> None:
        extra_path = os.path.join(path, BUFFER_FILE.format(self.rank))
        if os.path.isfile(extra_path):
            self.buffer = [Experience.from_state(e) for e in paddle.load(extra_path)["buffer"]]
        adapters_path = os.path.join(path, REFERENCE_ADAPTER_FILE)
        if os.path.isfile(adapters_path):
            self.reference_adapters = paddle.load(adapters_path)

    # ---- one step ----------------------------------------------------------------------------
    def _reference_logprobs(self, rollout: Rollout) -> paddle.Tensor:
        """Under the reference policy: the frozen copy; with LoRA the policy with its adapters off, or with the
        reference's own (synced / EMA) adapter values when the reference is updated."""
        cfg = self.config
        if cfg.lora and self.reference_adapters is not None:
            with adapter_values(self.policy, self.reference_adapters):
                return completion_logprobs(self.policy, rollout, cfg.logprob_chunk_size, cfg.temperature)
        if cfg.lora:
            with adapters_disabled(self.policy):
                return completion_logprobs(self.policy, rollout, cfg.logprob_chunk_size, cfg.temperature)
        return completion_logprobs(self.reference, rollout, cfg.logprob_chunk_size, cfg.temperature)

    def _uniforms(self, micro_batch: int, places: list[int], gen_batch: int = 0) -> paddle.Tensor:
        """The random numbers each completion samples with, from (seed, step, micro-batch, place in the global
        batch, generation[, refill batch of dynamic sampling]): the same completions on any number of ranks,
        and after a resume."""
        cfg = self.config
        refill = [gen_batch] if gen_batch else []
        rows = [np.random.default_rng([cfg.seed, self.step, micro_batch, place, g] + refill)
                .random(cfg.max_completion_length) for place in places for g in range(cfg.num_generations)]
        return paddle.to_tensor(np.stack(rows).astype("float32"))

    def _rollout(self, micro_batch: int, gen_batch: int = 0) -> _Candidates:
        """This rank's next prompts, their G completions each, and every reward's score."""
        cfg = self.config
        samples, images, places = self.next_samples()
        phase("rollout")
        start = time.perf_counter()
        generation = self.generator.generate(samples, cfg.num_generations, self.sampling, cfg.question_template,
                                             cfg.system_prompt, images=images,
                                             uniforms=self._uniforms(micro_batch, places, gen_batch))
        seconds = time.perf_counter() - start
        facts = generation.facts
        columns = reward_columns(samples, facts.image_sizes, facts.input_sizes, self.coord_system,
                                 repeat=cfg.num_generations)
        phase("rewards")
        scores = self.rewards.score(generation.texts, columns)
        for key, value in scores.counters.items():
            self.count(key, value)
        # TRL's frac_reward_zero_std, over every group generated (with dynamic sampling, the dropped ones too)
        zero_std = _zero_std_groups(scores.rewards, cfg.num_generations)
        self.record("frac_reward_zero_std", Mean(float(zero_std.sum()), float(zero_std.size)))
        rewards = scores.rewards
        if cfg.overlong_buffer:
            lengths = generation.rollout.completion_mask.sum(axis=1).tolist()
            rewards = rewards + np.asarray(overlong_penalty(lengths, cfg.max_completion_length, cfg.overlong_buffer,
                                                            cfg.overlong_penalty_factor), dtype="float32")
        return _Candidates(generation.rollout, generation.texts, samples, facts.image_sizes, facts.input_sizes,
                           scores.per_function, rewards, seconds)

    def _dynamic_rollout(self, micro_batch: int) -> _Candidates:
        """DAPO's dynamic sampling: groups whose rewards all tie are dropped and further prompt batches are drawn
        until this rank has its ``per_device`` informative groups or ``max_num_gen_batches`` were drawn (then the
        last tied groups fill the batch: they get advantage 0). Every rank draws as many batches as the rank that
        needs most, so the samplers stay in step; a rank already full draws without generating."""
        cfg = self.config
        wanted, kept, tied = self.config.prompts_per_device, [], []
        drawn, seconds = 0, 0.0
        while drawn < cfg.max_num_gen_batches:
            if sum_across_ranks(float(len(kept) < wanted), self.world_size, "the count of ranks still sampling") == 0:
                break
            if len(kept) >= wanted:
                self.next_samples()
            else:
                candidates = self._rollout(micro_batch, drawn)
                seconds += candidates.seconds
                informative = informative_groups(candidates.rewards, cfg.num_generations)
                kept += [candidates.group(i) for i in informative][:wanted - len(kept)]
                tied = [candidates.group(i) for i in range(candidates.rollout.prompt.size) if i not in informative]
            drawn += 1
        chosen = kept + tied[:wanted - len(kept)]
        self.record("num_gen_batches", Same(drawn))  # every rank draws as many
        return _Candidates.join(chosen, self.generator.tokenizer.pad_token_id, seconds)

    def make_experience(self, micro_batch: int = 0) -> Experience:
        cfg = self.config
        candidates = self._dynamic_rollout(micro_batch) if cfg.dynamic_sampling else self._rollout(micro_batch)
        rollout, rewards = candidates.rollout, candidates.rewards
        mask = rollout.completion_mask
        if cfg.mask_truncated_completions:
            mask = mask * (~rollout.truncated).astype(mask.dtype).unsqueeze(1)
        phase("log-probs of the rollout")
        with paddle.no_grad():
            needs_old = cfg.num_iterations > 1 or (cfg.uses_reference and not cfg.use_kl_loss)
            old_logp = completion_logprobs(self.policy, rollout, cfg.logprob_chunk_size, cfg.temperature) \
                if needs_old else None
            ref_logp = self._reference_logprobs(rollout) if cfg.uses_reference else None
        if cfg.uses_reference and not cfg.use_kl_loss:  # KL in the reward: r_i - beta * sum_t kl_t
            kl = (kl_divergence(old_logp, ref_logp, cfg.kl_estimator) * mask.astype("float32")).sum(axis=1)
            rewards = rewards - cfg.beta * kl.numpy()
            ref_logp = None
        advantages = advantages_for(cfg.adv_estimator, paddle.to_tensor(rewards), cfg.num_generations, mask,
                                    cfg.scale_rewards)
        return Experience(rollout=rollout, mask=mask, advantages=advantages,
                          old_logp=old_logp if cfg.num_iterations > 1 else None, ref_logp=ref_logp,
                          scores=candidates.scores, rewards=rewards, texts=candidates.texts,
                          samples=candidates.samples, generation_seconds=candidates.seconds,
                          image_sizes=candidates.image_sizes, input_sizes=candidates.input_sizes)

    def training_step(self) -> dict:
        cfg = self.config
        start = time.perf_counter()
        if self.step % cfg.num_iterations == 0:
            self.buffer = [self.make_experience(i) for i in range(cfg.gradient_accumulation_steps)]
        # dapo divides by the step's completion tokens over all ranks; gradients are then averaged over ranks
        local_tokens = float(sum(float(e.mask.sum()) for e in self.buffer))
        tokens_in_step = sum_across_ranks(local_tokens, self.world_size, "the step's token count") / self.world_size
        phase("training forward and backward")
        losses, stats, entropy_sums = [], [], []
        for i, exp in enumerate(self.buffer):
            logp, entropy = self.forward(exp.rollout, cfg.logprob_chunk_size, cfg.temperature, with_entropy=True)
            entropy_sums.append((entropy * exp.mask.astype(entropy.dtype)).sum())
            old_logp = exp.old_logp if exp.old_logp is not None else logp.detach()
            loss, loss_stats = grpo_loss(
                logp, old_logp, exp.ref_logp, exp.advantages, exp.mask,
                beta=cfg.beta if cfg.use_kl_loss else 0.0,  # else the KL is already in the reward
                epsilon_low=cfg.epsilon, epsilon_high=cfg.clip_high, loss_type=cfg.loss_type,
                max_completion_length=cfg.max_completion_length, num_items_in_batch=tokens_in_step,
                kl_estimator=cfg.kl_estimator, importance_sampling_level=cfg.importance_sampling_level)
            if cfg.loss_type != "dapo":  # dapo already divides by the whole step's token count
                loss = loss / cfg.gradient_accumulation_steps
            self.backward(loss, last=i == len(self.buffer) - 1)
            losses.append(float(loss))
            stats.append(loss_stats)
        update = self.apply_update(losses)
        self._update_reference()
        # TRL's entropy: the policy's mean entropy over the step's (masked) completion tokens of all ranks (TRL
        # averages the micro-batches' means instead); one host read
        entropy = Mean(float(paddle.stack(entropy_sums).sum()), local_tokens)
        return self.step_metrics(self._step_stats(losses, stats, update, time.perf_counter() - start, entropy))

    @paddle.no_grad()
    def _update_reference(self) -> None:
        """ref <- a * policy + (1 - a) * ref: sync (TR-DPO, TRL's sync_ref_model) every ref_model_sync_steps
        steps with a = ref_model_mixup_alpha; ema after every step with a = 1 - ref_ema_decay. On the reference
        model's weights, or with LoRA on the reference's own adapter values."""
        cfg = self.config
        if cfg.reference_update == "sync" and self.step % cfg.ref_model_sync_steps == 0:
            alpha = cfg.ref_model_mixup_alpha
        elif cfg.reference_update == "ema":
            alpha = 1.0 - cfg.ref_ema_decay
        else:
            return
        if self.reference_adapters is not None:
            for name, param in adapter_state(self.policy).items():
                self.reference_adapters[name] = alpha * param.detach() + (1 - alpha) * self.reference_adapters[name]
        elif self.reference is not None:
            policy_params = dict(self.policy.named_parameters())
            for name, ref_param in self.reference.named_parameters():
                ref_param.set_value(alpha * policy_params[name] + (1 - alpha) * ref_param)

    def _step_stats(self, losses, stats, update: dict, seconds: float, entropy: Mean) -> dict:
        """This rank's share of the step's numbers (``step_metrics``: combined over ranks as TRL gathers them);
        completions no reward scored (reward NaN) are left out of the reward statistics."""
        exps = self.buffer
        scores = np.concatenate([e.scores for e in exps])
        rewards = np.concatenate([e.rewards for e in exps])
        lengths = np.concatenate([e.rollout.completion_mask.sum(axis=1).numpy() for e in exps])
        truncated = np.concatenate([e.rollout.truncated.numpy() for e in exps])
        generation_seconds = sum(e.generation_seconds for e in exps)
        metrics = {
            "loss": Mean.one(sum(losses)),
            "reward": Mean.of(rewards),
            "reward_std": Std.of(rewards),
            "kl": Mean.of([s.kl for s in stats]),  # per micro-batch, as TRL gathers them
            "entropy": entropy,
            "clip_ratio/low_mean": Mean.of([s.clip_low for s in stats]),
            "clip_ratio/high_mean": Mean.of([s.clip_high for s in stats]),
            "clip_ratio/region_mean": Mean.of([s.clip_region for s in stats]),
            "completion_length": Mean.of(lengths),
            "completion_length/max": Max(float(lengths.max())),
            "truncated_ratio": Mean.of(truncated),
            **update,
            "step_seconds": Max(seconds),  # the slowest rank's
            "tokens_per_second": Sum(int(lengths.sum()) / generation_seconds if generation_seconds > 0 else 0.0),
            "epoch": Same(self.sampler.progress),
        }
        for j, name in enumerate(self.rewards.names):
            metrics[f"rewards/{name}/mean"] = Mean.of(scores[:, j])
            metrics[f"rewards/{name}/std"] = Std.of(scores[:, j])
        return metrics

    def completion_rows(self) -> Optional[list[dict]]:
        every = self.config.log_completions_steps
        if not every or self.step % every:
            return None
        g = self.config.num_generations
        rows = []
        for exp in self.buffer:
            advantages = exp.advantages.numpy()
            for i, text in enumerate(exp.texts):
                sample = exp.samples[i // g]
                row = {"step": self.step, "problem": sample["problem"], "images": sample["images"],
                       "solution": sample["solution"], "completion": text,
                       "reward": _json_number(exp.rewards[i]), "advantage": float(advantages[i]),
                       "source": sample.get("_source"), "coord_system": self.coord_system}
                if exp.image_sizes is not None:  # what the rewards saw (a buffer saved before they were kept has not)
                    row.update(image_sizes=exp.image_sizes[i // g], input_sizes=exp.input_sizes[i // g])
                for j, name in enumerate(self.rewards.names):
                    row[f"reward/{name}"] = _json_number(exp.scores[i, j])
                rows.append(row)
        return rows


def _zero_std_groups(rewards: np.ndarray, num_generations: int) -> np.ndarray:
    """Per completion, whether its group's rewards have zero std (TRL: ``isclose(nanstd(group), 0)``; a group
    with fewer than two scored completions has std NaN, not zero)."""
    zero = []
    for values in rewards.reshape(-1, num_generations):
        kept = values[~np.isnan(values)]
        zero.append(kept.size > 1 and np.isclose(kept.std(ddof=1), 0.0, rtol=1e-5, atol=1e-8))
    return np.repeat(np.asarray(zero, dtype=bool), num_generations)


def _json_number(value) -> Optional[float]:
    return None if np.isnan(value) else float(value)
