"""The job configs: ``GRPOConfig`` (``paddle-r1 train``) and ``SFTConfig`` (``paddle-r1 sft``), each made of the
key groups of ``keys.py`` (the keys both jobs take are declared once there), and the rules between their keys.

Every value is checked against its key's declared type, range and choices, and every rule between keys, in one step
(``validate``), before anything loads; an error names the key, and ``reading.load_config`` (which reads files
and command lines) adds the file or command line it came from. A config is not changed once validated.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
from dataclasses import dataclass
from typing import Optional

from .keys import (REPORT_TO, AnswerKeys, DataKeys, HeldoutKeys, ModelKeys, ObjectiveKeys, OptimizerKeys,
                          OutputKeys, RewardKeys, RolloutKeys, StepKeys, VariantKeys, declared, key)
from .values import apply_types, check_bounds
from ..algorithms.names import REGISTRIES
from ..data.video import VideoSampling
from ..errors import ConfigError


class JobKeys:
    """What both job configs do once their keys are set: one validation step, types first (so that the rules
    compare numbers with numbers), then the values each key declares (``key``'s choices and bounds), then the rules
    between keys."""

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        apply_types(self)
        for name, allowed in declared(type(self), "choices").items():
            if getattr(self, name) not in allowed:
                words = ", ".join(json.dumps(a) if not isinstance(a, str) else a for a in allowed)  # true, not True
                raise ConfigError(f"config key {name!r}: {getattr(self, name)!r} is not one of {words}", keys=(name,))
        check_bounds(self, declared(type(self), "bounds"))
        VideoSampling.from_config(self)  # the rules between the video_* keys
        for name in self.report_to:
            if name not in REPORT_TO or (name == "none" and len(self.report_to) > 1):
                raise ConfigError(f"config key 'report_to': {name!r} is not one of {', '.join(REPORT_TO)} "
                                  "(none stands alone)", keys=("report_to",))
        for name in self.stop_signals:
            if name not in signal.Signals.__members__ or name in ("SIGKILL", "SIGSTOP"):
                raise ConfigError(f"config key 'stop_signals': {name!r} is not a signal a process can catch "
                                  "(e.g. SIGTERM, SIGUSR1)", keys=("stop_signals",))
        self.check_own_keys()

    def check_own_keys(self) -> None:
        """The job's own rules, between its keys."""

    @property
    def trackers(self) -> list[str]:
        """The trackers the run reports to: VisualDL while use_visualdl is true, then report_to's; none when
        report_to is none."""
        if self.report_to == ["none"]:
            return []
        return list(dict.fromkeys((["visualdl"] if self.use_visualdl else []) + self.report_to))

    @property
    def prompts_per_device(self) -> int:
        """Samples each device takes per micro-step: SFT's per_device_train_batch_size counts samples."""
        return self.per_device_train_batch_size

    @property
    def completions_per_device(self) -> int:
        """Rows each device trains on per micro-step (SFT: its samples)."""
        return self.per_device_train_batch_size

    group_size = 1  # rows made from one sample (GRPO: num_generations)

    def check_ranks(self, world_size: int) -> None:
        """The job's rules that need the number of ranks, checked before any model loads."""

    def steps_per_generation_for(self, world_size: int) -> int:
        """Micro-steps one draw of samples is split over on ``world_size`` ranks (GRPO's steps_per_generation; SFT
        draws every micro-step)."""
        return 1

    @property
    def prompt_order_seed(self) -> int:
        """TRL's data_seed: the seed of the prompt order alone, when set; else seed."""
        return self.seed if self.data_seed is None else self.data_seed

    def check_machine(self, device: str) -> None:
        """The job's rules that need the machine it runs on (the device, the files the config names);
        ``paddle_r1.trainer.job.prepare_job`` calls it once the device is chosen, before any model loads."""

    config_folder = None  # the folder of the file it was read from (user rewards are looked for there); not a key

    def with_values(self, **changes):
        """A copy with ``changes``, validated again (the config itself is never changed once validated)."""
        copy = dataclasses.replace(self, **changes)
        copy.config_folder = self.config_folder
        return copy


@dataclass
class GRPOConfig(HeldoutKeys, StepKeys, VariantKeys, ObjectiveKeys, RolloutKeys, RewardKeys, OutputKeys, OptimizerKeys,
                 DataKeys, ModelKeys, JobKeys):
    """``paddle-r1 train``: the shared keys (model, data, optimizer, output) and GRPO's own."""

    per_device_train_batch_size: Optional[int] = key(
        None, "completions per device and micro-step, as in TRL, VLM-R1 and EasyDistill; a device may hold whole "
        "groups, or parts of groups whose other completions are on other ranks or micro-steps (TRL's layout): any "
        "count whose generation batch, ranks x this x steps_per_generation, is a multiple of num_generations; "
        "default: num_generations (one prompt). One optimizer step sees this x devices x gradient_accumulation_steps "
        "completions")

    def check_own_keys(self) -> None:
        if self.overlong_buffer >= self.max_completion_length:
            raise ConfigError(f"config key 'overlong_buffer': {self.overlong_buffer} must be below "
                              f"max_completion_length {self.max_completion_length}",
                              keys=("overlong_buffer", "max_completion_length"))
        self._check_batch()
        self._check_rewards()
        self._check_reference()
        self._check_policy_loss()
        self._check_filter_band()
        self._check_temporal_grpo()
        self._check_tools()
        if self.eval_steps and not self.eval_data_path:
            raise ConfigError("config key 'eval_data_path' is required when eval_steps > 0",
                              keys=("eval_data_path", "eval_steps"))

    def _check_batch(self) -> None:
        """TRL 1.16's rules on the generation batch that hold whatever the number of ranks: one spelling of it, and
        a generation_batch_size of whole groups and of whole micro-batches of a device (``check_ranks``: the rest)."""
        size = self.generation_batch_size
        if size is not None and self.steps_per_generation is not None:
            raise ConfigError(
                f"config keys 'steps_per_generation' and 'generation_batch_size': both are set "
                f"({self.steps_per_generation} and {size}); they are two spellings of one thing, generation_batch_size "
                "= ranks x per_device_train_batch_size x steps_per_generation: set one (TRL refuses both too)",
                keys=("steps_per_generation", "generation_batch_size"))
        if size is not None and size % self.num_generations:
            raise ConfigError(
                f"config keys 'generation_batch_size' and 'num_generations': a generation batch holds whole groups, "
                f"and {size} completions are not a multiple of num_generations {self.num_generations} (as in TRL)",
                keys=("generation_batch_size", "num_generations"))
        if size is not None and size % self.completions_per_device:
            raise ConfigError(
                f"config keys 'generation_batch_size' and 'per_device_train_batch_size': a generation batch is split "
                f"into micro-batches of per_device_train_batch_size {self.completions_per_device} on every rank, and "
                f"{size} completions are not a multiple of it (as in TRL)",
                keys=("generation_batch_size", "per_device_train_batch_size"))

    def steps_per_generation_for(self, world_size: int) -> int:
        """TRL's steps_per_generation on ``world_size`` ranks: as set, from generation_batch_size, or
        gradient_accumulation_steps."""
        if self.generation_batch_size is not None:
            return self.generation_batch_size // (world_size * self.completions_per_device)
        return self.steps_per_generation or self.gradient_accumulation_steps

    def check_ranks(self, world_size: int) -> None:
        """Before any model loads, once the number of ranks is known: TRL 1.16's rules on the generation batch
        (a generation_batch_size of whole micro-steps over all ranks, a generation batch of whole groups), and the
        layouts dynamic sampling can refill."""
        per_device, group = self.completions_per_device, self.num_generations
        micro_step = world_size * per_device
        if self.generation_batch_size is not None and self.generation_batch_size % micro_step:
            raise ConfigError(
                f"config keys 'generation_batch_size' and 'per_device_train_batch_size': generation_batch_size "
                f"{self.generation_batch_size} must be a multiple of ranks x per_device_train_batch_size = "
                f"{world_size} x {per_device} = {micro_step}, the completions of one micro-step (as in TRL)",
                keys=("generation_batch_size", "per_device_train_batch_size"))
        steps = self.steps_per_generation_for(world_size)
        if micro_step * steps % group:
            source = ("generation_batch_size" if self.generation_batch_size is not None else "steps_per_generation"
                      if self.steps_per_generation is not None else "gradient_accumulation_steps")
            unset = " (unset: gradient_accumulation_steps)" if source == "gradient_accumulation_steps" else ""
            raise ConfigError(
                f"config keys 'per_device_train_batch_size', 'num_generations' and '{source}': a generation batch of "
                f"ranks x per_device_train_batch_size x steps_per_generation{unset} = {world_size} x {per_device} x "
                f"{steps} = {micro_step * steps} completions does not hold whole groups of num_generations {group} "
                f"(TRL refuses it too); on {world_size} rank(s) of {per_device}, steps_per_generation "
                f"{group // math.gcd(micro_step, group)} or a multiple of it does (a group spread over micro-steps)",
                keys=("per_device_train_batch_size", "num_generations", source))
        whole_groups = per_device % group == 0
        equal_parts = group % per_device == 0 and (micro_step % group == 0 or group % micro_step == 0)
        if self.dynamic_sampling and world_size > 1 and not (whole_groups or equal_parts):
            raise ConfigError(
                f"config keys 'dynamic_sampling' and 'per_device_train_batch_size': dynamic sampling refills each "
                f"rank's share of the generation batch with the groups it keeps, which needs every group to lie alike "
                f"on the ranks holding it: per_device_train_batch_size {per_device} must hold whole groups (a multiple "
                f"of num_generations {group}) or an equal part of one (a divisor of it, with ranks x "
                f"per_device_train_batch_size, {micro_step}, a multiple or a divisor of {group}), or the job run on "
                "one rank", keys=("dynamic_sampling", "per_device_train_batch_size"))

    @property
    def completions_per_device(self) -> int:
        """per_device_train_batch_size, num_generations when unset (one prompt's group)."""
        return self.per_device_train_batch_size or self.num_generations

    @property
    def group_size(self) -> int:
        return self.num_generations

    @property
    def generations_per_device(self) -> int:
        """Completions of each prompt row a device decodes (``sampler.rank_share``): num_generations when it holds
        whole groups, its part of the group when it holds part of one, else gcd(per_device_train_batch_size,
        num_generations), the largest part that cuts both the groups and the micro-batch."""
        return math.gcd(self.completions_per_device, self.num_generations)

    @property
    def prompts_per_device(self) -> int:
        """Prompt rows each device decodes per micro-batch: per_device_train_batch_size / generations_per_device
        (one when it holds part of a group; a prompt whose completions it holds in two parts counts twice)."""
        return self.completions_per_device // self.generations_per_device

    def _check_rewards(self) -> None:
        if not self.reward_funcs:
            raise ConfigError("config key 'reward_funcs': no rewards", keys=("reward_funcs",))
        if self.reward_weights is not None and len(self.reward_weights) != len(self.reward_funcs):
            raise ConfigError(f"config key 'reward_weights': {len(self.reward_weights)} weights for "
                              f"{len(self.reward_funcs)} reward_funcs {self.reward_funcs}",
                              keys=("reward_weights", "reward_funcs"))
        settable = set(self.reward_funcs) | ({self.eval_reward} if self.eval_steps else set())
        stray = sorted(set(self.reward_kwargs) - settable)
        if stray:
            names = "reward_funcs or eval_reward" if self.eval_steps else "reward_funcs"
            raise ConfigError(f"config key 'reward_kwargs': {', '.join(map(repr, stray))} not in {names}",
                              keys=("reward_kwargs", "reward_funcs"))

    def _check_policy_loss(self) -> None:
        """The keys the chosen loss type and estimators need (their registries' rules: cispo's cap, which TRL takes
        from epsilon_high, so that an unset epsilon_high would cap every importance weight at epsilon), and what GDPO
        leaves no place for."""
        for registry in REGISTRIES:
            registry.check(self)
        self._check_sampler_correction()
        if self.multi_objective_aggregation == "normalize_then_sum":
            beside = [f"{key} {value!r}" for key, value, alone in (
                ("adv_estimator", self.adv_estimator, self.adv_estimator == "grpo"),
                ("overlong_buffer", self.overlong_buffer, not self.overlong_buffer),
                ("use_kl_loss", self.use_kl_loss, self.use_kl_loss or not self.uses_reference)) if not alone]
            if beside:
                raise ConfigError(f"config key 'multi_objective_aggregation': normalize_then_sum normalises each "
                                  f"reward function's scores (GDPO), which leaves no place for {', '.join(beside)} "
                                  "(they act on the summed reward); use sum_then_normalize with them",
                                  keys=("multi_objective_aggregation",))

    def _check_sampler_correction(self) -> None:
        """TRL 1.16's rules for its vllm_importance_sampling_* keys: vespo takes a per-token rho only, a truncation
        needs a bound (TRL's torch.clamp fails without one), and the bounds in order."""
        if not self.importance_sampling_correction:
            return
        mode, low, high = self.importance_sampling_mode, self.importance_sampling_clip_min, \
            self.importance_sampling_clip_max
        if self.loss_type == "vespo" and mode.startswith("sequence"):
            raise ConfigError(f"config keys 'loss_type' and 'importance_sampling_mode': vespo adds the per-token log "
                              f"rho to its own sequence weight and needs token_truncate or token_mask, not {mode}",
                              keys=("loss_type", "importance_sampling_mode"))
        if mode.endswith("truncate") and low is None and high is None:
            raise ConfigError(f"config keys 'importance_sampling_mode', 'importance_sampling_clip_min' and "
                              f"'importance_sampling_clip_max': {mode} truncates rho to its bounds, and neither is set",
                              keys=("importance_sampling_mode", "importance_sampling_clip_max"))
        if low is not None and high is not None and low > high:
            raise ConfigError(f"config keys 'importance_sampling_clip_min' and 'importance_sampling_clip_max': {low} "
                              f"is above {high}", keys=("importance_sampling_clip_min", "importance_sampling_clip_max"))

    def _check_filter_band(self) -> None:
        """EasyR1's online filtering band goes with dynamic sampling, which draws the groups to replace."""
        band = [key for key in ("filter_low", "filter_high") if getattr(self, key) is not None]
        if band and not self.dynamic_sampling:
            raise ConfigError(f"config key {band[0]!r}: the filtering band drops groups and draws others, which is "
                              "dynamic_sampling: set dynamic_sampling true", keys=(band[0], "dynamic_sampling"))
        if len(band) == 2 and not self.filter_low < self.filter_high:
            raise ConfigError(f"config keys 'filter_low' and 'filter_high': {self.filter_low} is not below "
                              f"{self.filter_high}", keys=("filter_low", "filter_high"))
        if self.filter_key != "overall" and self.filter_key not in self.reward_funcs:
            raise ConfigError(f"config key 'filter_key': {self.filter_key!r} is neither overall (the weighted "
                              f"reward) nor one of reward_funcs {self.reward_funcs}",
                              keys=("filter_key", "reward_funcs"))

    def _check_temporal_grpo(self) -> None:
        """T-GRPO compares a group's ordered and shuffled accuracy on the device that holds the group, and draws no
        further groups (dynamic sampling would choose groups on rewards the bonus then changes)."""
        if not self.temporal_grpo:
            return
        if self.completions_per_device % self.num_generations:
            raise ConfigError(f"config key 'temporal_grpo': it compares a group's ordered and shuffled completions on "
                              f"one device, which needs whole groups there: per_device_train_batch_size "
                              f"{self.completions_per_device} is not a multiple of num_generations "
                              f"{self.num_generations}", keys=("temporal_grpo", "per_device_train_batch_size"))
        if self.dynamic_sampling:
            raise ConfigError("config key 'temporal_grpo': not with dynamic_sampling (its groups are chosen on the "
                              "rewards the bonus changes)", keys=("temporal_grpo", "dynamic_sampling"))

    @property
    def shuffled_generations(self) -> int:
        """T-GRPO's shuffled-frame completions per video prompt."""
        return self.temporal_grpo_generations or max(1, self.num_generations // 2)

    def _check_tools(self) -> None:
        if (self.max_turns > 1) != bool(self.tools):
            raise ConfigError(f"config keys 'tools' and 'max_turns': tools {self.tools} with max_turns "
                              f"{self.max_turns}; a model calls tools only with max_turns > 1, and needs tools to call",
                              keys=("tools", "max_turns"))

    def _check_reference(self) -> None:
        if self.sync_ref_model and self.ref_model_update not in ("", "sync"):
            raise ConfigError(f"config keys 'sync_ref_model' and 'ref_model_update': sync_ref_model is "
                              f"ref_model_update sync, not {self.ref_model_update!r}",
                              keys=("sync_ref_model", "ref_model_update"))

    @property
    def reference_update(self) -> str:
        """How the reference follows the policy: none, sync (TR-DPO's periodic mix, TRL's sync_ref_model) or ema;
        with LoRA it is the reference's own adapter values that are updated."""
        return self.ref_model_update or ("sync" if self.sync_ref_model else "none")

    def check_machine(self, device: str) -> None:
        super().check_machine(device)
        if self.sharding == "stage2" and device.split(":")[0] == "cpu":
            raise ConfigError("config key 'sharding': stage2 runs through paddle.distributed.sharding."
                              "group_sharded_parallel, which supports GPU/XPU only; on CPU use stage1",
                              keys=("sharding",))
        if self.eval_steps and not os.path.exists(self.eval_data_path):
            raise ConfigError(f"config key 'eval_data_path': {self.eval_data_path} not found",
                              keys=("eval_data_path",))

    @property
    def clip_high(self) -> float:
        return self.epsilon if self.epsilon_high is None else self.epsilon_high

    @property
    def uses_reference(self) -> bool:
        """Reference log-probs are computed (for the KL term) only when beta != 0."""
        return self.beta != 0

    @property
    def loads_reference_model(self) -> bool:
        """A second, frozen model is loaded as the reference only when the KL term is on and LoRA is off: with
        LoRA the reference is the policy with its adapters off."""
        return self.uses_reference and not self.lora


@dataclass
class SFTConfig(AnswerKeys, OutputKeys, OptimizerKeys, DataKeys, ModelKeys, JobKeys):
    """``paddle-r1 sft``: supervised fine-tuning on the answers built from the solutions, before GRPO.

    The shared keys keep their names and meanings, so one model / data block serves both jobs; the result is
    output_dir/checkpoint-N, a model folder GRPO's model_name_or_path can name.
    """

    per_device_train_batch_size: int = key(8, "samples per device and micro-step (SFT has no generations)")
    learning_rate: float = key(1e-5, "AdamW's peak learning rate")
    output_dir: str = key("output_sft", "folder of checkpoint-N/ (a model folder GRPO's model_name_or_path can name) "
                          "and metrics.jsonl")
    save_steps: int = key(0, "save a checkpoint every N steps (and at the end); 0: only at the end")

    def check_own_keys(self) -> None:
        if "{Answer}" not in self.answer_template:
            raise ConfigError(f"config key 'answer_template': {self.answer_template!r} has no {{Answer}}",
                              keys=("answer_template",))
