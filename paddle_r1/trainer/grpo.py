"""GRPO: how one optimizer step is made. It reads top to bottom:

prompts -> rollout (G completions each) -> rewards -> group advantages -> loss -> optimizer step -> metrics.

Rollouts come in TRL's generation batches: ranks x per_device_train_batch_size x ``steps_per_generation``
completions made at once, every steps_per_generation x ``num_iterations`` micro-steps, micro-step t training on the
batch's micro-batch t mod steps_per_generation (by default one generation batch per optimizer step, used again by the
next num_iterations - 1 steps). A batch trained on after an update keeps its log-probs at rollout time as the PPO
"old" policy (TRL's semantics). Setup, the loop, held-out evaluation, checkpoints and resume are the shared
skeleton's (``trainer/base.py``).
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
from PIL import Image

from ..config.jobs import GRPOConfig
from ..errors import ConfigError
from ..generation.decoder import ONE_TOKEN_RUNS, PACK_AFTER_STEPS, supports as decoder_supports
from ..generation.cuda_graphs import capture_hazard
from ..generation.onednn import bf16_instructions, bf16_products_run, onednn
from ..generation.rollout import PromptBatch, Rollout, SamplingParams
from ..models.lora import adapter_state, adapter_values, adapters_disabled
from ..rewards.manager import RewardManager, config_folders, reward_columns
from ..tools.toolbox import toolbox_for
from .base import Draw, Trainer
from .sampler import generation_slot
from ..parallel.distributed import gather_objects, phase, sum_across_ranks, sums_across_ranks
from ..algorithms.dynamic_sampling import concat_rollouts, kept_groups, select_groups
from ..algorithms.groups import GroupTable, gather_groups
from ..algorithms.advantages import longest_turns, overlong_penalty
from ..algorithms.entropy_control import AdaptiveEntropy
from ..algorithms.temporal_bonus import temporal_bonus
from ..algorithms.logprobs import completion_logprobs
from ..algorithms.loss import (LossSettings, entropy_threshold, grpo_loss, high_entropy_mask, kl_divergence,
                               sampler_ratio, sampler_statistics, sampler_values)
from ..checkpoints.resume import BatchLayout
from ..parallel.step_metrics import Max, Mean, Min, Same, Std, Sum


@dataclass
class Experience:
    """One micro-batch of this rank, a generation batch's one record, filled in the order it is made: the rollout
    makes it (completions, what the rewards see, each prompt row's group key), the log-probs and the reward stage
    (``GRPOTrainer._rewards_and_advantages``) complete it, and the loss reads it in each pass over the batch."""

    rollout: Rollout
    texts: list
    samples: list
    generation_seconds: float
    image_sizes: Optional[list] = None  # per prompt, what the rewards saw: original and resized (w, h) of each image
    input_sizes: Optional[list] = None
    turns: Optional[list] = None  # multi-turn: per completion, its episode's turns (``episodes.Episodes``)
    tool_calls: Optional[list] = None  # multi-turn: per completion, the tool calls of its episode (a reward column)
    # per prompt: its group's key (its block's origin: optimizer step and micro-step; refill batch of dynamic sampling;
    # place in the block's draw: alike on every rank holding a part of the group) and the generation indices of its
    # completions here
    keys: list = dataclasses.field(default_factory=list)
    generations: list = dataclasses.field(default_factory=list)
    scores: Optional[np.ndarray] = None  # [N, F], NaN where a reward returned None
    rewards: Optional[np.ndarray] = None  # [N] weighted sum + overlong penalty (- beta * KL once it is in the reward)
    mask: Optional[paddle.Tensor] = None  # completion mask, truncated rows zeroed if mask_truncated_completions
    old_logp: Optional[paddle.Tensor] = None  # kept with num_iterations > 1 only
    sampler_ratio: Optional[paddle.Tensor] = None  # rho of the sampler's correction (importance_sampling_correction)
    sampler_values: Optional[tuple] = None  # its logged values: |old - sampled| and rho at the tokens TRL logs
    ref_logp: Optional[paddle.Tensor] = None  # kept with the KL in the loss only
    advantages: Optional[paddle.Tensor] = None
    # the token normaliser of dapo, cispo and vespo (TRL's num_items_in_batch rescaled to one optimizer step): the
    # generation batch's completion tokens over all ranks x gradient_accumulation_steps / (ranks x steps_per_generation)
    loss_tokens: Optional[float] = None
    # T-GRPO: per prompt row, the mean accuracy of its completions on shuffled frames (NaN: a row without a clip)
    shuffled_accuracy: Optional[np.ndarray] = None

    def state(self) -> dict:
        """What a resume mid-way through a generation batch needs: the fields the loss and the logs read."""
        state = dataclasses.asdict(self)
        for before_the_loss in ("tool_calls", "keys", "generations", "sampler_values"):
            del state[before_the_loss]
        return state

    @classmethod
    def from_state(cls, state: dict) -> "Experience":
        rollout = dict(state["rollout"])
        rollout["prompt"] = PromptBatch(**rollout["prompt"])
        return cls(**{**state, "rollout": Rollout(**rollout)})

    def rows(self, items: list[int]) -> "Experience":
        """The prompt rows ``items`` (their completions on this rank), as scored, before the log-probs; the
        generation time shared out by rows."""
        g = self.rollout.num_generations
        rows = [i * g + k for i in items for k in range(g)]
        return Experience(rollout=select_groups(self.rollout, list(items), [len(sizes) for sizes in self.image_sizes],
                                                [len(sample.get("videos") or []) for sample in self.samples]),
                          texts=[self.texts[r] for r in rows], samples=[self.samples[i] for i in items],
                          generation_seconds=self.generation_seconds * len(items) / len(self.keys),
                          image_sizes=[self.image_sizes[i] for i in items],
                          input_sizes=[self.input_sizes[i] for i in items],
                          turns=None if self.turns is None else [self.turns[r] for r in rows],
                          keys=[self.keys[i] for i in items], generations=[self.generations[i] for i in items],
                          scores=self.scores[rows], rewards=self.rewards[rows],
                          shuffled_accuracy=None if self.shuffled_accuracy is None else self.shuffled_accuracy[items])

    def split(self, parts: int) -> list["Experience"]:
        """Its prompt rows in ``parts`` micro-batches, in order (itself when one)."""
        if parts == 1:
            return [self]
        return [self.rows(items.tolist()) for items in np.array_split(np.arange(len(self.keys)), parts)]

    @staticmethod
    def join(groups: list["Experience"], pad_token_id: int, seconds: float) -> "Experience":
        """Scored groups (of several rollouts) in one record, before the log-probs."""
        def joined(field: str) -> list:
            return [item for e in groups for item in getattr(e, field)]

        return Experience(rollout=concat_rollouts([e.rollout for e in groups], pad_token_id), texts=joined("texts"),
                          samples=joined("samples"), generation_seconds=seconds, image_sizes=joined("image_sizes"),
                          input_sizes=joined("input_sizes"), turns=None if groups[0].turns is None else joined("turns"),
                          keys=joined("keys"), generations=joined("generations"),
                          scores=np.concatenate([e.scores for e in groups]),
                          rewards=np.concatenate([e.rewards for e in groups]))

    def completion_keys(self) -> tuple[list, list[int]]:
        """Per completion, its group's key and its generation index."""
        return ([key for key, gens in zip(self.keys, self.generations) for _ in gens],
                [g for gens in self.generations for g in gens])


REFERENCE_ADAPTER_FILE = "reference_adapter.pdparams"
# T-GRPO's random numbers: seeded by (seed, origin, place, this), a value no generation index or refill count takes, so
# never the rollout's numbers
SHUFFLED_FRAMES_STREAM = 2**40 + 7
BUFFER_FILE = "extra_state_rank{}.pdparams"  # a rank's rollout buffer, saved mid-way through num_iterations


class GRPOTrainer(Trainer):
    name = "GRPO"

    def __init__(self, config: GRPOConfig, samples: Optional[list[dict]] = None, heldout=None):
        self.rewards = RewardManager.from_config(config)  # settings checked before any model loads
        # a GRPO rollout's completions run long: its decode step packs the weights before the first token (CPU),
        # unless the completions are capped too short to repay the packing
        long = config.max_completion_length > PACK_AFTER_STEPS
        self.sampling = SamplingParams(max_new_tokens=config.max_completion_length, temperature=config.temperature,
                                       top_p=config.top_p, top_k=config.top_k, min_p=config.min_p or 0.0,
                                       repetition_penalty=config.repetition_penalty, engine=config.rollout_engine,
                                       logprobs=config.importance_sampling_correction,
                                       pack_after=0 if long else PACK_AFTER_STEPS,
                                       cuda_graphs=config.rollout_cuda_graphs,
                                       bf16_products=config.rollout_bf16_products)
        self.buffer: list[Experience] = []  # this rank's micro-batches of the generation batch
        self.trained: list[Experience] = []  # the micro-batches of the last step, each once
        self.reference_adapters: Optional[dict] = None  # with LoRA and a reference that follows the policy
        self.loss_settings = LossSettings.of(config)
        self.entropy_control = AdaptiveEntropy.of(config) if config.use_adaptive_entropy else None
        self.toolbox = toolbox_for(config.tools, config.max_turns, config_folders(config))
        super().__init__(config, samples, heldout)
        one_token = decoder_supports(self.policy)
        if config.rollout_engine == "one_token" and not one_token:
            raise ConfigError(f"config key 'rollout_engine': one_token {ONE_TOKEN_RUNS}; this run needs auto or "
                              "layers", keys=("rollout_engine",))
        if self.is_main:  # auto falls back without a word otherwise, and the layers' step is several times slower
            engine = "one_token" if one_token and config.rollout_engine != "layers" else "layers"
            why = "" if engine == "one_token" or config.rollout_engine == "layers" else f" (one_token {ONE_TOKEN_RUNS})"
            graphs = ""
            if config.rollout_cuda_graphs:  # the one-token step on a GPU takes them (decoder.graphs_apply)
                if engine != "one_token":
                    graphs = "; rollout_cuda_graphs ignored: the layers' step is not captured"
                elif not paddle.get_device().startswith("gpu"):
                    graphs = "; rollout_cuda_graphs ignored: no GPU here"
                elif (hazard := capture_hazard()) is not None:
                    graphs = f"; rollout_cuda_graphs ignored: {hazard}"
                else:
                    graphs = "; CUDA graphs"
            print(f"rollout engine: {engine}{why}{graphs}{bf16_products_note(config, engine)}")
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
    def passes_per_batch(self) -> int:
        return self.config.num_iterations

    @property
    def saves_reference(self) -> bool:
        """A reference that follows the policy is part of the run's state (a frozen one is the original model)."""
        return self.reference is not None and self.config.reference_update != "none"

    @property
    def _mid_generation_batch(self) -> bool:
        """Whether the next micro-step trains on the generation batch already made (TRL's cycle)."""
        generates, _ = generation_slot(self.step * self.config.gradient_accumulation_steps,
                                       self.layout.steps_per_generation, self.config.num_iterations)
        return not generates

    def save_rank_files(self, folder: str) -> None:
        """Mid-way through a generation batch (its micro-steps, or its num_iterations passes) a resume needs each
        rank's rollout buffer; with LoRA, a reference that follows the policy keeps its own adapter values."""
        if self._mid_generation_batch:
            paddle.save({"buffer": [e.state() for e in self.buffer]},
                        os.path.join(folder, BUFFER_FILE.format(self.rank)))
        if self.reference_adapters is not None and self.is_main:
            paddle.save(self.reference_adapters, os.path.join(folder, REFERENCE_ADAPTER_FILE))

    def check_layout_change(self, path: str, saved: BatchLayout, now: BatchLayout) -> None:
        """A checkpoint saved mid-way through a generation batch holds each rank's rollout buffer, micro-batches of
        that rank's prompts: another layout cannot take them as they are, and rolling out again would train on other
        completions than the saved run. Refused, saying how to go on."""
        pattern = os.path.join(glob.escape(path), BUFFER_FILE.format("*"))
        buffers = sorted(os.path.basename(f) for f in glob.glob(pattern))
        if buffers:
            what = "num_iterations" if saved.steps_per_generation == saved.accumulation else "a generation batch"
            raise ConfigError(
                f"config key 'resume_from_checkpoint': {path} was saved mid-way through {what} (its rollout "
                f"buffers {', '.join(buffers)} are per rank and micro-batch: {saved.ranks} rank(s) x "
                f"{saved.per_device_batch} completion(s) x {saved.steps_per_generation} micro-step(s)); this run has "
                f"{now.ranks} x {now.per_device_batch} x {now.steps_per_generation}. Resume it with its layout, or "
                "from a checkpoint saved where a generation batch begins (its step x gradient_accumulation_steps a "
                "multiple of steps_per_generation x num_iterations: by default, a step that is a multiple of "
                "num_iterations)", keys=("resume_from_checkpoint",))

    def trainer_state(self) -> dict:
        """The adaptive entropy control's coefficient and last entropy (TRL saves both)."""
        return {} if self.entropy_control is None else {"adaptive_entropy": self.entropy_control.state()}

    def restore_job(self, path: str, state: dict) -> None:
        if self.entropy_control is not None and "adaptive_entropy" in state:
            self.entropy_control.load(state["adaptive_entropy"])
        extra_path = os.path.join(path, BUFFER_FILE.format(self.rank))
        if os.path.isfile(extra_path):
            self.buffer = [Experience.from_state(e) for e in paddle.load(extra_path)["buffer"]]
            if self.buffer[0].loss_tokens is None:  # saved before it was kept: then a buffer was one step's batch
                self._count_loss_tokens()
        adapters_path = os.path.join(path, REFERENCE_ADAPTER_FILE)
        if os.path.isfile(adapters_path):
            self.reference_adapters = paddle.load(adapters_path)

    # ---- one generation batch ------------------------------------------------------------------
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

    def _uniforms(self, origin: tuple[int, int], draw: Draw, refill: int = 0) -> paddle.Tensor:
        """The random numbers each completion samples with, from (seed, origin: the optimizer step and micro-step
        its block begins in, place in the block's draw, generation[, refill batch of dynamic sampling]): the same
        completions on any number of ranks, whichever rank or micro-step makes them, and after a resume. A
        multi-turn episode's turn t takes the t-th max_completion_length of them (the first turn the same numbers
        as a single-turn run)."""
        cfg = self.config
        extra = [refill] if refill else []
        numbers = cfg.max_completion_length * cfg.max_turns
        rows = [np.random.default_rng([cfg.seed, *origin, place, g] + extra).random(numbers)
                for place, gens in zip(draw.places, draw.generations) for g in gens]
        return paddle.to_tensor(np.stack(rows).astype("float32"))

    def _make_generation_batch(self, micro_step: int) -> None:
        """The next generation batch, made at the run's ``micro_step``-th micro-step: its blocks in order
        (``_make_block``), this rank's ``steps_per_generation`` micro-batches of it in ``buffer``, and the
        generation batch's token count over all ranks (dapo's, cispo's and vespo's normaliser, as TRL rescales its
        num_items_in_batch to one optimizer step)."""
        layout = self.layout
        with self.precision.compute():
            self.buffer = [exp for block in range(layout.blocks)
                           for exp in self._make_block(micro_step + block * layout.block_steps)]
        self._rewards_and_advantages(self.buffer)
        if not self._trained_after_an_update:  # made for the KL in the reward only: the loss takes its own, detached
            for exp in self.buffer:
                exp.old_logp = None
        self._count_loss_tokens()

    def _count_loss_tokens(self) -> None:
        """``Experience.loss_tokens`` of the buffer: its completion tokens over all ranks x gradient_accumulation_steps
        / (ranks x steps_per_generation) (TRL's dapo normaliser; by default the step's tokens / ranks)."""
        local = float(sum(float(e.mask.sum()) for e in self.buffer))
        tokens = sum_across_ranks(local, self.world_size, "the generation batch's token count")
        loss_tokens = tokens * self.config.gradient_accumulation_steps / (len(self.buffer) * self.world_size)
        for exp in self.buffer:
            exp.loss_tokens = loss_tokens

    def _make_block(self, micro_step: int) -> list[Experience]:
        """This rank's micro-batches of the block that begins at the run's ``micro_step``-th micro-step, in the
        order they are made: the rollouts (with dynamic sampling, the groups kept), then each micro-batch's old
        policy's and reference's log-probs (with ``importance_sampling_correction`` the sampler's rho from the old and
        the rollout's own log-probs, ``loss.sampler_ratio``). The reward stage follows over the whole generation
        batch (``_make_generation_batch``)."""
        cfg = self.config
        origin = divmod(micro_step, cfg.gradient_accumulation_steps)
        if cfg.dynamic_sampling:
            exps = self._dynamic_block(origin)
        else:
            exps = [self._rollout(draw, origin) for draw in self.next_samples()]
        phase("log-probs of the rollout")
        for exp in exps:
            self._logprobs(exp)
        return exps

    @property
    def _trained_after_an_update(self) -> bool:
        """Whether some micro-step trains on a generation batch after an optimizer step made since it was
        generated: then its log-probs at rollout time are the PPO old policy (TRL's rule: unless
        gradient_accumulation_steps is a multiple of steps_per_generation x num_iterations)."""
        cfg = self.config
        return cfg.gradient_accumulation_steps % (self.layout.steps_per_generation * cfg.num_iterations) != 0

    @property
    def _rho_from_training_forward(self) -> bool:
        """Whether the sampler's correction takes the policy's log-probs at rollout time from the training forward,
        detached, instead of a forward at rollout time (TRL's way): where every micro-batch is trained before an
        optimizer step follows its rollout and the KL is not in the reward, those are the same numbers, and the
        correction then costs no forward of its own."""
        return not self._trained_after_an_update and not self._kl_in_reward

    def _logprobs(self, exp: Experience) -> None:
        """A micro-batch's loss mask, its log-probs under the policy at rollout time (kept when the batch is trained
        on after an update or the KL is in the reward; the sampler's correction is made from them then, else at
        the training forward: ``_rho_from_training_forward``) and under the reference."""
        cfg = self.config
        exp.mask = exp.rollout.completion_mask
        if cfg.mask_truncated_completions:
            exp.mask = exp.mask * (~exp.rollout.truncated).astype(exp.mask.dtype).unsqueeze(1)
        with paddle.no_grad():
            if not self._rho_from_training_forward:
                exp.old_logp = completion_logprobs(self.policy, exp.rollout, cfg.logprob_chunk_size, cfg.temperature)
                if cfg.importance_sampling_correction:
                    self._sampler_correction(exp, exp.old_logp)
            exp.ref_logp = self._reference_logprobs(exp.rollout) if cfg.uses_reference else None

    def _sampler_correction(self, exp: Experience, old_logp: paddle.Tensor) -> None:
        """rho of the mismatch between the rollout's sampler and the policy at rollout time, ``old_logp`` (TRL's vLLM
        importance sampling, ``loss.sampler_ratio``), and the values TRL logs of it (``_record_sampler_statistics``)."""
        cfg = self.config
        sampled = exp.rollout.sampling_logp
        exp.sampler_ratio = sampler_ratio(old_logp, sampled, exp.mask, cfg.importance_sampling_mode,
                                          cfg.importance_sampling_clip_min, cfg.importance_sampling_clip_max)
        exp.sampler_values = sampler_values(old_logp, sampled, exp.sampler_ratio, exp.mask)

    def _record_sampler_statistics(self, generation_batch: list[Experience]) -> None:
        """TRL's sampling/* metrics over this rank's generation batch (its micro-batches' tokens together), then the
        ranks' figures combined as TRL gathers them: the mean of their means, the min of their mins, the max of
        their maxima."""
        deltas = np.concatenate([e.sampler_values[0] for e in generation_batch])
        rhos = np.concatenate([e.sampler_values[1] for e in generation_batch])
        combine = {"mean": Mean.one, "max": Max, "min": Min}
        for name, value in sampler_statistics(deltas, rhos).items():
            self.record(name, combine[name.rsplit("/", 1)[1]](value))

    @property
    def _kl_in_reward(self) -> bool:
        return self.config.uses_reference and not self.config.use_kl_loss

    def _rewards_and_advantages(self, exps: list[Experience]) -> None:
        """The reward stage of a generation batch's micro-batches (TRL's ``_generate_and_score_completions``), in
        order: the reward functions' scores and DAPO's overlong penalty (``_score``; dynamic sampling has scored its
        groups already, it chose them on these rewards), the KL to the reference subtracted when it is in the reward
        (use_kl_loss false: r_i - beta sum_t kl_t), ONE gather of the generation batch's groups over all ranks, and
        the advantages on the gathered groups (as TRL computes them on every process's rewards: a group may span
        micro-batches and ranks, and a batch-wide statistic, ``scale_rewards: batch``, is the generation batch's).
        Without dynamic sampling the same gather gives frac_reward_zero_std."""
        cfg = self.config
        if not cfg.dynamic_sampling:
            for exp in exps:
                self._score(exp)
        kl_penalties = None
        if self._kl_in_reward:
            kl_penalties = []
            for exp in exps:
                kl = kl_divergence(exp.old_logp, exp.ref_logp, cfg.kl_estimator) * exp.mask.astype("float32")
                kl_penalties.append(cfg.beta * kl.sum(axis=1).numpy())
                exp.ref_logp = None  # the loss has no KL term then
        lengths = np.concatenate([exp.mask.sum(axis=1).numpy() for exp in exps])
        table = self._groups(exps, lengths, "the generation batch's rewards",
                             None if kl_penalties is None else np.concatenate(kl_penalties))
        if not cfg.dynamic_sampling:  # dynamic sampling records it on every group it draws
            self._record_zero_std(table)
        advantages = table.advantages(cfg.adv_estimator, cfg.scale_rewards, cfg.multi_objective_aggregation,
                                      self.rewards.weights.tolist())
        rows = [len(exp.texts) for exp in exps]
        for i, (exp, part) in enumerate(zip(exps, advantages.split(rows) if len(exps) > 1 else [advantages])):
            exp.advantages = part
            if kl_penalties is not None:
                exp.rewards = exp.rewards - kl_penalties[i]

    def _rollout(self, draw: Draw, origin: tuple[int, int], refill: int = 0, generate: bool = True) -> Experience:
        """A micro-batch's completions of its prompt rows ``draw`` (``generate`` false: a rank that needs no more
        groups drew the batch, so the samplers stay in step, and gets an empty record, already scored)."""
        cfg = self.config
        if not generate:
            return Experience(rollout=None, texts=[], samples=[], generation_seconds=0.0, image_sizes=[],
                              input_sizes=[], scores=np.zeros((0, len(self.rewards.names))), rewards=np.zeros(0))
        phase("rollout")
        start = time.perf_counter()
        generations = len(draw.generations[0])  # alike for every prompt row (``sampler.rank_share``)
        generation = self.generator.generate(draw.samples, generations, self.sampling, cfg.question_template,
                                             cfg.system_prompt, images=draw.images, clips=draw.clips,
                                             uniforms=self._uniforms(origin, draw, refill),
                                             toolbox=self.toolbox, max_turns=cfg.max_turns)
        shuffled = self._shuffled_accuracy(draw, origin) if cfg.temporal_grpo else None
        seconds = time.perf_counter() - start
        if generation.turns is not None:
            self._count_tool_calls(generation)
        return Experience(rollout=generation.rollout, texts=generation.texts, samples=draw.samples,
                          generation_seconds=seconds, image_sizes=generation.facts.image_sizes,
                          input_sizes=generation.facts.input_sizes, turns=generation.turns,
                          tool_calls=generation.tool_calls, keys=[(*origin, refill, place) for place in draw.places],
                          generations=[list(gens) for gens in draw.generations], shuffled_accuracy=shuffled)

    def _shuffled_accuracy(self, draw: Draw, origin: tuple[int, int]) -> np.ndarray:
        """T-GRPO's p~ of each prompt row (``algorithms/temporal_bonus.py``): the mean accuracy (the first reward
        function's score) of ``shuffled_generations`` completions of its prompt with each clip's frames shuffled,
        sampled and shuffled from (seed, origin, place in the draw): the same on any number of ranks and after a
        resume; NaN for a row without a clip."""
        cfg = self.config
        rows = [k for k, sample in enumerate(draw.samples) if sample.get("videos")]
        accuracy = np.full(len(draw.samples), np.nan)
        if not rows:
            return accuracy
        g, numbers = cfg.shuffled_generations, cfg.max_completion_length
        seeds = [[cfg.seed, *origin, draw.places[k], SHUFFLED_FRAMES_STREAM] for k in rows]
        uniforms = np.stack([np.random.default_rng(seed + [i]).random(numbers) for seed in seeds for i in range(g)])
        samples = [draw.samples[k] for k in rows]
        generation = self.generator.generate(samples, g, self.sampling, cfg.question_template, cfg.system_prompt,
                                             images=[draw.images[k] for k in rows],
                                             clips=[draw.clips[k] for k in rows],
                                             uniforms=paddle.to_tensor(uniforms.astype("float32")),
                                             frame_orders=[np.random.default_rng(seed) for seed in seeds])
        columns = reward_columns(samples, generation.facts.image_sizes, generation.facts.input_sizes,
                                 self.coord_system, repeat=g)
        scores = self.rewards.score(generation.texts, columns).per_function[:, 0]
        accuracy[rows] = np.nan_to_num(scores, nan=0.0).reshape(len(rows), g).mean(axis=1)
        return accuracy

    def _score(self, exp: Experience) -> None:
        """The task's reward of each completion: every reward function's score and their weighted sum
        (``RewardManager.score``), plus DAPO's overlong penalty on its longest turn (``overlong_buffer``)."""
        cfg = self.config
        phase("rewards")
        columns = reward_columns(exp.samples, exp.image_sizes, exp.input_sizes, self.coord_system,
                                 repeat=exp.rollout.num_generations, turns=exp.turns, tool_calls=exp.tool_calls)
        scores = self.rewards.score(exp.texts, columns)
        for key, value in scores.counters.items():
            self.count(key, value)
        exp.scores, exp.rewards = scores.per_function, scores.rewards
        if cfg.temporal_grpo:
            ordered, earned = temporal_bonus(exp.scores, exp.rewards, exp.shuffled_accuracy,
                                             exp.rollout.num_generations, cfg.temporal_grpo_ratio,
                                             cfg.temporal_grpo_bonus, float(self.rewards.weights[0]))
            self.record("temporal/ordered_accuracy", Mean.of(ordered))
            self.record("temporal/shuffled_accuracy", Mean.of(exp.shuffled_accuracy))
            self.record("temporal/bonus_groups", Mean.of(earned.astype("float64")))
        if cfg.overlong_buffer:
            longest = longest_turns(exp.rollout.completion_mask.numpy())
            exp.rewards = exp.rewards + np.asarray(overlong_penalty(longest.tolist(), cfg.max_completion_length,
                                                                    cfg.overlong_buffer, cfg.overlong_penalty_factor),
                                                   dtype="float32")

    def _count_tool_calls(self, generation) -> None:
        """tools/calls and tools/errors (calls the model could not make: bad JSON, unknown tool, bad arguments, a
        tool that raised), summed over the step; turns: assistant turns per episode."""
        calls = [call for episode in generation.tool_calls for call in episode]
        self.count("tools/calls", len(calls))
        self.count("tools/errors", sum(call["error"] is not None for call in calls))
        self.record("turns", Mean.of([sum(t["role"] == "assistant" for t in turns) for turns in generation.turns]))

    def _groups(self, exps: list[Experience], lengths: np.ndarray, where: str,
                kl_penalties: Optional[np.ndarray] = None) -> GroupTable:
        """The groups of the micro-batches ``exps`` over all ranks, with their rewards (``groups.gather_groups``:
        one collective)."""
        keys, generations = [], []
        for exp in exps:
            exp_keys, exp_generations = exp.completion_keys()
            keys += exp_keys
            generations += exp_generations
        return gather_groups(keys, generations, np.concatenate([exp.rewards for exp in exps]),
                             np.concatenate([exp.scores for exp in exps]), lengths, self.config.num_generations,
                             self.world_size, where, kl_penalties)

    def _record_zero_std(self, table: GroupTable) -> None:
        """TRL's frac_reward_zero_std: this rank's share of the groups whose rewards all tie (with dynamic
        sampling, over every group drawn, the dropped ones too)."""
        zero_std = table.local_groups(table.zero_std())
        self.record("frac_reward_zero_std", Mean(float(zero_std.sum()), float(zero_std.size)))

    def _dynamic_block(self, origin: tuple[int, int]) -> list[Experience]:
        """DAPO's dynamic sampling, block by block: groups whose rewards all tie (or, with the filtering band, whose
        mean of ``filter_key`` lies outside it) are dropped and further blocks are drawn until this rank has its
        prompt rows of the block (``prompts_per_device`` per micro-batch: groups or parts of groups) or
        ``max_num_gen_batches`` were drawn (then the last dropped groups fill it); the rows kept, in order, make the
        block's micro-batches. Every rank draws as many batches as the rank that needs most, so the samplers stay
        in step; a rank already full draws without generating (``check_ranks``: the layouts in which every group
        lies alike on the ranks holding it, so that they fill alike).

        Each drawn block is scored here and its groups gathered over all ranks, so the ranks sharing a group keep or
        drop it alike. That gather comes before the log-probs (none are made for dropped groups), so the reward
        stage gathers the chosen groups once more: which groups the other ranks kept, and with the KL in the reward
        their KL (it needs the log-probs), are known only then, and the advantages are computed over them (a batch
        std, REINFORCE++'s whitening over every rank's tokens)."""
        cfg = self.config
        micro_batches = self.layout.block_steps
        wanted, kept, dropped = cfg.prompts_per_device * micro_batches, [], []
        drawn, seconds = 0, 0.0
        pad = self.generator.tokenizer.pad_token_id
        while drawn < cfg.max_num_gen_batches:
            if sum_across_ranks(float(len(kept) < wanted), self.world_size, "the count of ranks still sampling") == 0:
                break
            parts = [self._rollout(draw, origin, drawn, generate=len(kept) < wanted) for draw in self.next_samples()]
            lengths = np.zeros(0)
            if parts[0].rollout is not None:
                for part in parts:
                    self._score(part)
                exp = parts[0] if len(parts) == 1 else Experience.join(
                    parts, pad, sum(part.generation_seconds for part in parts))
                lengths = exp.rollout.completion_mask.sum(axis=1).numpy()
            else:
                exp = parts[0]
            table = self._groups([exp], lengths, "a drawn batch's rewards (dynamic sampling)")
            self._record_zero_std(table)
            if exp.rollout is not None:
                seconds += exp.generation_seconds
                keep = table.local_groups(kept_groups(table, cfg.filter_key, self.rewards.names, cfg.filter_low,
                                                      cfg.filter_high))
                per_prompt = exp.rollout.num_generations
                groups = [exp.rows([i]) for i in range(exp.rollout.prompt.size)]
                kept += [group for i, group in enumerate(groups) if keep[i * per_prompt]][:wanted - len(kept)]
                dropped = [group for i, group in enumerate(groups) if not keep[i * per_prompt]]
            drawn += 1
        chosen = kept + dropped[:wanted - len(kept)]
        self.record("num_gen_batches", Same(drawn))  # every rank draws as many
        return Experience.join(chosen, pad, seconds).split(micro_batches)

    # ---- one step ----------------------------------------------------------------------------
    def training_step(self) -> dict:
        cfg = self.config
        start = time.perf_counter()
        batches = []  # the step's micro-batches, in TRL's cycle over generation batches
        made = []  # the generation batches this step made
        for i in range(cfg.gradient_accumulation_steps):
            micro_step = self.step * cfg.gradient_accumulation_steps + i
            generates, slot = generation_slot(micro_step, self.layout.steps_per_generation, cfg.num_iterations)
            if generates:
                self._make_generation_batch(micro_step)
                made.append(self.buffer)
            batches.append(self.buffer[slot])
        self.trained = list({id(exp): exp for exp in batches}.values())  # each once, for the logs
        local_tokens = float(sum(float(e.mask.sum()) for e in batches))
        phase("training forward and backward")
        control = self.entropy_control
        settings = self.loss_settings if control is None else \
            dataclasses.replace(self.loss_settings, entropy_coef=control.applied())
        losses, stats, entropy_sums, bonus_sums = [], [], [], []
        for i, exp in enumerate(batches):
            with self.precision.compute():
                logp, entropy = self.forward(exp.rollout, cfg.logprob_chunk_size, cfg.temperature, with_entropy=True,
                                             entropy_gradient=cfg.entropy_coef != 0 or control is not None)
                mask = exp.mask.astype(entropy.dtype)
                entropy_sums.append((entropy.detach() * mask).sum())
                entropy_mask = self._high_entropy_mask(entropy.detach(), mask)
                bonus_mask = mask if entropy_mask is None else mask * entropy_mask
                bonus_sums.append(paddle.stack([(entropy.detach() * bonus_mask).sum(), bonus_mask.sum()]))
                old_logp = exp.old_logp if exp.old_logp is not None else logp.detach()
                if cfg.importance_sampling_correction and exp.sampler_ratio is None:  # _rho_from_training_forward
                    self._sampler_correction(exp, old_logp)
                loss, loss_stats = grpo_loss(logp, old_logp, exp.ref_logp, exp.advantages, exp.mask, settings,
                                             num_items_in_batch=exp.loss_tokens, entropies=entropy,
                                             entropy_mask=entropy_mask, sampler_ratio=exp.sampler_ratio,
                                             sampling_logp=self._sampling_logp(exp))
            self.backward(loss, last=i == len(batches) - 1)
            losses.append(float(loss))
            stats.append(loss_stats)
        if cfg.importance_sampling_correction:  # logged once, at the step that made it (as TRL logs it)
            for generation_batch in made:  # every micro-batch corrected by now (``_rho_from_training_forward``)
                self._record_sampler_statistics(generation_batch)
        update = self.apply_update(losses)
        self._update_reference()
        if control is not None:  # the step's entropy on the bonus's tokens over every rank: sum and count, one reduce
            entropy_sum, tokens = sums_across_ranks(paddle.stack(bonus_sums).sum(axis=0).numpy().tolist(),
                                                    self.world_size, "the step's entropy sum and tokens")
            control.update(entropy_sum / max(tokens, 1.0))
        # TRL's entropy: the policy's mean entropy over the step's (masked) completion tokens of all ranks (TRL
        # averages the micro-batches' means instead); one host read
        entropy = Mean(float(paddle.stack(entropy_sums).sum()), local_tokens)
        return self.step_metrics(self._step_stats(losses, stats, update, time.perf_counter() - start, entropy))

    def _sampling_logp(self, exp: Experience) -> Optional[paddle.Tensor]:
        """The rollout's own log-probs, which the off-policy mask measures from with the sampler's correction on (as
        TRL's does with vLLM), else None (it measures from the old policy's)."""
        return exp.rollout.sampling_logp if self.config.importance_sampling_correction else None

    def _high_entropy_mask(self, entropy: paddle.Tensor, mask: paddle.Tensor) -> Optional[paddle.Tensor]:
        """With ``top_entropy_quantile`` < 1, the micro-batch's tokens at or above the quantile of the entropies of
        its completion tokens over all ranks (TRL gathers them across processes); else None."""
        if self.config.top_entropy_quantile >= 1.0:
            return None
        local = entropy.numpy()[mask.numpy() > 0]
        every = np.concatenate(gather_objects(local, self.world_size, "the micro-batch's entropies"))
        return high_entropy_mask(entropy, mask, entropy_threshold(every, self.config.top_entropy_quantile))

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
        """This rank's share of the step's numbers (``step_metrics``: combined over ranks as TRL gathers them), its
        rewards and lengths over the micro-batches it trained on; completions no reward scored (reward NaN) are left
        out of the reward statistics."""
        exps = self.trained
        scores = np.concatenate([e.scores for e in exps])
        rewards = np.concatenate([e.rewards for e in exps])
        lengths = np.concatenate([e.rollout.completion_mask.sum(axis=1).numpy() for e in exps])
        truncated = np.concatenate([e.rollout.truncated.numpy() for e in exps])
        generation_seconds = sum(e.generation_seconds for e in exps)
        metrics = {
            "loss": Mean.one(sum(losses)),
            "reward": Mean.of(rewards),
            "reward_std": Std.of(rewards),
            "entropy": entropy,
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
        # the loss's own statistics (kl, clip ratios, cispo_clip_ratio, ...): per micro-batch, as TRL gathers them
        for key in dict.fromkeys(key for s in stats for key in s):
            metrics[key] = Mean.of([s[key] for s in stats if key in s])
        for key, extreme in (("clip_ratio/low_min", np.nanmin), ("clip_ratio/high_max", np.nanmax)):
            if key in metrics:  # TRL: per micro-batch the extreme over every rank's completions, then their mean
                per_rank = gather_objects([s[key] for s in stats], self.world_size, f"the micro-batches' {key}")
                metrics[key] = Same(float(np.nanmean(extreme(np.array(per_rank, dtype="float64"), axis=0))))
        if self.entropy_control is not None:  # TRL logs the coefficient after the step's update
            metrics["entropy_coef"] = Same(self.entropy_control.coef)
        return metrics

    def completion_rows(self) -> Optional[list[dict]]:
        every = self.config.log_completions_steps
        if not every or self.step % every:
            return None
        rows = []
        first_row = self.rank * sum(len(exp.texts) for exp in self.trained)  # the ranks hold as many rows
        for exp in self.trained:
            g = exp.rollout.num_generations  # this rank's completions of each of its prompts
            advantages = exp.advantages.numpy()
            for i, text in enumerate(exp.texts):
                sample = exp.samples[i // g]
                row = {"step": self.step, "problem": sample["problem"], "images": sample["images"],
                       "solution": sample["solution"], "completion": text,
                       "reward": _json_number(exp.rewards[i]), "advantage": float(advantages[i]),
                       "source": sample.get("_source"), "coord_system": self.coord_system}
                if sample.get("videos"):
                    row["videos"] = sample["videos"]
                    if sample.get("duration") is not None:
                        row["duration"] = sample["duration"]
                if exp.image_sizes is not None:  # what the rewards saw (a buffer saved before they were kept has not)
                    row.update(image_sizes=exp.image_sizes[i // g], input_sizes=exp.input_sizes[i // g])
                for j, name in enumerate(self.rewards.names):
                    row[f"reward/{name}"] = _json_number(exp.scores[i, j])
                if exp.turns is not None:
                    row["turns"] = self._logged_turns(exp.turns[i], f"r{first_row + len(rows)}")
                rows.append(row)
        return rows

    def _logged_turns(self, turns: list, row_name: str) -> list[dict]:
        """An episode's turns as completions.jsonl keeps them: each tool image written as a PNG under
        ``output_dir/tool_images/step-NNNNNN/`` (named after the row, turn and image) and named by its path
        relative to output_dir; each tool clip as a PNG strip of its frames there, ``{"strip": path, "seconds":
        each frame's time in its clip}``."""
        folder = os.path.join("tool_images", f"step-{self.step:06d}")
        os.makedirs(os.path.join(self.config.output_dir, folder), exist_ok=True)
        logged = []
        for t, turn in enumerate(turns):
            turn = dict(turn)
            if "images" in turn:
                paths = [os.path.join(folder, f"{row_name}-t{t}-{k}.png") for k in range(len(turn["images"]))]
                for path, image in zip(paths, turn["images"]):
                    image.save(os.path.join(self.config.output_dir, path))
                turn["images"] = paths
            if turn.get("videos"):
                clips = []
                for k, clip in enumerate(turn["videos"]):
                    path = os.path.join(folder, f"{row_name}-t{t}-v{k}.png")
                    Image.fromarray(np.concatenate(list(clip["frames"]), axis=1)).save(
                        os.path.join(self.config.output_dir, path))
                    clips.append({"strip": path, "seconds": [round(float(s), 3) for s in clip["seconds"]]})
                turn["videos"] = clips
            logged.append(turn)
        return logged


def _json_number(value) -> Optional[float]:
    return None if np.isnan(value) else float(value)


def bf16_products_note(config: GRPOConfig, engine: str) -> str:
    """What the rollout engine's line says of ``rollout_bf16_products``: where it has no effect (oneDNN makes no bf16
    product on a CPU without AVX-512), and on a CPU which bf16 instructions oneDNN's kernels run on (none: it emulates
    them, slower than float32)."""
    if not config.rollout_bf16_products:
        return ""
    if engine != "one_token":
        return "; rollout_bf16_products ignored: the layers' step runs the model's own layers"
    if not paddle.get_device().startswith("cpu"):
        return "; rollout_bf16_products ignored: off the CPU the rollout runs in the model's dtype"
    if onednn() is None:
        return "; rollout_bf16_products ignored: this Paddle wheel ships no usable oneDNN library (libs/libdnnl.so.3)"
    if not bf16_products_run():
        return "; rollout_bf16_products ignored: oneDNN makes no bfloat16 product on this CPU (float32 products)"
    found = bf16_instructions()
    note = (f"; bf16 products ({', '.join(found)})" if found else
            "; bf16 products emulated: this CPU has no bf16 instructions (avx512_bf16, amx_bf16), slower than float32")
    if not config.importance_sampling_correction:
        note += " (importance_sampling_correction is false: the rollout's log-probs differ from the training forward's)"
    return note
