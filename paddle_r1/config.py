"""Job configs: one dataclass per job, read from yaml/json plus ``--key value`` overrides. The keys both
jobs take (model, data, optimizer, output) are defined once, in the key groups the job classes inherit.

Names follow TRL's ``GRPOConfig`` and PaddleMIX's r1_mllm arguments so users can carry their
settings over. An unknown key is an error that names the key and the file, before anything loads.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Optional

import yaml


class _YamlLoader(yaml.SafeLoader):
    """YAML 1.1 reads ``1e-5`` (no dot) as a string; learning rates are written that way, so read it as a float."""


_YamlLoader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)[eE][-+]?\d+$"),
                                  list("-+0123456789."))


def _load_yaml(text: str):
    return yaml.load(text, Loader=_YamlLoader)


class ConfigError(ValueError):
    """A config that cannot run; the message names the key, value or path at fault."""


DEFAULT_QUESTION_TEMPLATE = (
    "{Question} First output the thinking process in <think> </think> tags and then output the final "
    "answer in <answer> </answer> tags."
)
# What SFT teaches the model to write; {Answer} is the solution in the model's own terms (a box in its
# coordinate system, a count). The thinking is left empty: SFT here teaches the format and a first answer.
DEFAULT_ANSWER_TEMPLATE = "<think> </think><answer>{Answer}</answer>"
DTYPES = ("float32", "bfloat16", "float16")
SHARDING_STAGES = ("", "stage1", "stage2")  # see paddle_r1.trainer.sharding


@dataclass
class ModelKeys:
    """Model and memory keys both jobs take."""

    model_name_or_path: str = ""
    dtype: str = "float32"
    device: Optional[str] = None  # default: gpu when Paddle was built with CUDA, else cpu
    freeze_vision: bool = False
    gradient_checkpointing: bool = False  # recompute activations in the backward pass (memory for time)
    attn_implementation: Optional[str] = None  # eager | sdpa; None: sdpa on GPU (flash / memory-efficient), eager on CPU
    lora: bool = False  # train LoRA adapters on the language model instead of all weights
    lora_rank: int = 8
    lora_alpha: float = 16.0
    lora_dropout: float = 0.0
    lora_target_modules: Optional[list] = None  # regexes over layer names; default: the decoder's projections
    coord_system: Optional[str] = None  # default: the model family's own (see paddle_r1.models.coords)
    min_pixels: Optional[int] = None  # default: the processor's preprocessor_config.json
    max_pixels: Optional[int] = None
    logprob_chunk_size: int = 1024  # completion tokens whose logits exist at once


@dataclass
class DataKeys:
    """Data keys both jobs take."""

    dataset_name: Optional[str] = None  # "synthetic_rec" for the built-in set, else None
    data_path: Optional[str] = None  # a json/jsonl/csv file, a datasets folder, or a mixture yaml
    image_root: Optional[str] = None
    data_format: Optional[str] = None  # rec | conversation | r1v | r1v_eval | grounding | products | generic; None: detect
    strict_data: bool = False  # stop at the first bad record instead of skipping and counting it
    image_columns: Optional[list] = None  # products format: the columns holding image paths
    image_cache_dir: Optional[str] = None  # where images stored inside datasets folders are written
    question_template: str = DEFAULT_QUESTION_TEMPLATE
    system_prompt: Optional[str] = None


@dataclass
class OptimizerKeys:
    """AdamW, schedule and run-length keys both jobs take (each job sets its own batch size and rate)."""

    per_device_train_batch_size: int = 1
    learning_rate: float = 1e-6
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-8
    max_grad_norm: float = 1.0
    max_skipped_steps: int = 5  # a step whose loss or gradient norm is not finite is skipped; this many in a row stop the run
    lr_scheduler_type: str = "constant"  # linear | cosine | constant | constant_with_warmup | polynomial
    warmup_steps: int = 0
    warmup_ratio: float = 0.0
    max_steps: int = -1
    num_train_epochs: float = 1.0
    seed: int = 42


@dataclass
class OutputKeys:
    """Output keys both jobs take."""

    output_dir: str = "output"
    logging_steps: int = 1
    save_steps: int = 500
    save_total_limit: Optional[int] = None
    use_visualdl: bool = True
    disable_tqdm: bool = False


def _check_shared_keys(config) -> None:
    if config.dtype not in DTYPES:
        raise ConfigError(f"config key 'dtype': {config.dtype!r} is not one of {', '.join(DTYPES)}")
    for key in ("per_device_train_batch_size", "logprob_chunk_size", "max_skipped_steps"):
        if getattr(config, key) < 1:
            raise ConfigError(f"config key {key!r}: must be >= 1, got {getattr(config, key)}")


@dataclass
class GRPOConfig(OutputKeys, OptimizerKeys, DataKeys, ModelKeys):
    """``paddle-r1 train``: the shared keys (model, data, optimizer, output) and GRPO's own."""

    per_device_train_batch_size: int = 1  # prompts per step on each device; each gets num_generations completions
    sharding: str = ""  # "" | stage1 (optimizer state split over ranks) | stage2 (+ gradients; GPU/XPU)

    # rewards
    reward_funcs: list = field(default_factory=lambda: ["format", "iou"])
    reward_weights: Optional[list] = None
    reward_kwargs: dict = field(default_factory=dict)  # {reward name: {keyword: value}} passed to that reward

    # rollout
    num_generations: int = 8
    max_completion_length: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0

    # GRPO objective
    beta: float = 0.04
    epsilon: float = 0.2
    epsilon_high: Optional[float] = None  # default: epsilon
    num_iterations: int = 1
    loss_type: str = "grpo"  # grpo | bnpo | dr_grpo | dapo
    scale_rewards: str = "group"  # group | batch | none
    mask_truncated_completions: bool = False
    sync_ref_model: bool = False
    ref_model_sync_steps: int = 64
    ref_model_mixup_alpha: float = 0.6

    # optimisation and output beyond the shared keys
    gradient_accumulation_steps: int = 1
    log_completions_steps: int = 1  # write completions.jsonl every N steps (0: never)
    resume_from_checkpoint: Optional[str] = None  # a checkpoint folder, or "latest" in output_dir

    # held-out evaluation: greedy answers scored by eval_reward, logged as eval/score (paddle_r1.evaluation.heldout)
    eval_steps: int = 0  # every N steps, plus before the first and after the last step; 0: off
    eval_data_path: Optional[str] = None  # a file in any data format; images relative to image_root or the file
    eval_sample_num: Optional[int] = None  # a seeded random subset of that many samples; None: all
    eval_reward: str = "iou_accuracy"  # the task's accuracy reward (counting, iou_accuracy, math, ...)

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        _check_shared_keys(self)
        choices = {
            "loss_type": ("grpo", "bnpo", "dr_grpo", "dapo"),
            "scale_rewards": ("group", "batch", "none"),
            "sharding": SHARDING_STAGES,
        }
        for key, allowed in choices.items():
            if getattr(self, key) not in allowed:
                raise ConfigError(f"config key {key!r}: {getattr(self, key)!r} is not one of {', '.join(allowed)}")
        if self.num_generations < 2:
            raise ConfigError(
                f"config key 'num_generations': {self.num_generations} < 2; GRPO compares completions within a group"
            )
        if self.reward_weights is not None and len(self.reward_weights) != len(self.reward_funcs):
            raise ConfigError(
                f"config key 'reward_weights': {len(self.reward_weights)} weights for "
                f"{len(self.reward_funcs)} reward_funcs {self.reward_funcs}"
            )
        stray = sorted(set(self.reward_kwargs) - set(self.reward_funcs))
        if stray:
            raise ConfigError(f"config key 'reward_kwargs': {', '.join(map(repr, stray))} not in reward_funcs")
        for key in ("gradient_accumulation_steps", "num_iterations", "max_completion_length"):
            if getattr(self, key) < 1:
                raise ConfigError(f"config key {key!r}: must be >= 1, got {getattr(self, key)}")
        if self.temperature < 0:
            raise ConfigError(f"config key 'temperature': must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"config key 'top_p': must be in (0, 1], got {self.top_p}")
        if self.eval_steps < 0:
            raise ConfigError(f"config key 'eval_steps': must be >= 0, got {self.eval_steps}")
        if self.eval_steps and not self.eval_data_path:
            raise ConfigError("config key 'eval_data_path' is required when eval_steps > 0")

    @property
    def clip_high(self) -> float:
        return self.epsilon if self.epsilon_high is None else self.epsilon_high


@dataclass
class SFTConfig(OutputKeys, OptimizerKeys, DataKeys, ModelKeys):
    """``paddle-r1 sft``: supervised fine-tuning on the answers built from the solutions, before GRPO.

    The shared keys keep their names and meanings, so one model / data block serves both jobs; the result is
    output_dir/checkpoint-N, a model folder GRPO's model_name_or_path can name.
    """

    answer_template: str = DEFAULT_ANSWER_TEMPLATE  # the target text; must contain {Answer}
    per_device_train_batch_size: int = 8
    learning_rate: float = 1e-5
    output_dir: str = "output_sft"
    save_steps: int = 0  # 0: only at the end

    def __post_init__(self):
        _check_shared_keys(self)
        if "{Answer}" not in self.answer_template:
            raise ConfigError(f"config key 'answer_template': {self.answer_template!r} has no {{Answer}}")


def config_from_dict(cls, values: dict, source: str = "config"):
    """Build ``cls`` from a dict; unknown keys are a ConfigError naming them and ``source``."""
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"{source}: unknown config key(s) {', '.join(map(repr, unknown))}")
    return cls(**values)


def read_config_file(path: str) -> dict:
    if not os.path.isfile(path):
        raise ConfigError(f"config file not found: {path}")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        values = json.loads(text) if path.endswith(".json") else _load_yaml(text)
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        raise ConfigError(f"{path}: cannot parse: {e}") from e
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys to values")
    return values


def parse_overrides(args: list[str]) -> dict[str, Any]:
    """``["--learning_rate", "1e-5", "--beta=0"]`` -> ``{"learning_rate": 1e-05, "beta": 0}`` (values as yaml)."""
    values: dict[str, Any] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--"):
            raise ConfigError(f"command line: expected --key value, got {arg!r}")
        key = arg[2:].replace("-", "_")
        if "=" in key:
            key, raw = key.split("=", 1)
            i += 1
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            raw = args[i + 1]
            i += 2
        else:
            raw = "true"
            i += 1
        values[key] = _load_yaml(raw)
    return values


# EasyDistill job configs (seed 000): {"job_type", "dataset": {...}, "models": {...}, "training": {...}}
EASYDISTILL_RENAMES = {
    "dataset.labeled_path": "data_path",
    "models.student": "model_name_or_path",
    "training.roll_out_num": "num_generations",
    "training.max_length": "max_completion_length",
}
EASYDISTILL_IGNORED = {"training.deepspeed": "DeepSpeed does not apply to Paddle; sharding is chosen in paddle_r1"}


def from_easydistill(values: dict, source: str) -> dict:
    """Map an EasyDistill json config onto GRPOConfig keys; an unknown key is an error naming its path."""
    known = set(GRPOConfig.__dataclass_fields__)
    mapped: dict[str, Any] = {}
    for section in ("dataset", "models", "training"):
        block = values.get(section, {})
        if not isinstance(block, dict):
            raise ConfigError(f"{source}: {section!r} must be a mapping")
        for key, value in block.items():
            path = f"{section}.{key}"
            if path in EASYDISTILL_IGNORED:
                print(f"{source}: ignoring {path} ({EASYDISTILL_IGNORED[path]})")
            elif path in EASYDISTILL_RENAMES:
                mapped[EASYDISTILL_RENAMES[path]] = value
            elif key in known:
                mapped[key] = value
            else:
                raise ConfigError(f"{source}: unknown config key {path!r}")
    stray = sorted(set(values) - {"job_type", "dataset", "models", "training"})
    if stray:
        raise ConfigError(f"{source}: unknown config key(s) {', '.join(map(repr, stray))}")
    if "reward_funcs" in mapped:  # EasyDistill names some rewards with a _reward suffix
        mapped["reward_funcs"] = [name.removesuffix("_reward") for name in mapped["reward_funcs"]]
    return mapped


def load_config(cls, path: Optional[str] = None, overrides: Optional[list[str]] = None):
    """Read ``path`` (yaml or json, optional; EasyDistill job configs are translated), apply command-line
    overrides, and validate."""
    values = read_config_file(path) if path else {}
    if "job_type" in values:
        values = from_easydistill(values, path)
    command_line = parse_overrides(overrides or [])
    unknown = sorted(set(command_line) - set(cls.__dataclass_fields__))
    if unknown:  # named here, so that a typo on the command line is not blamed on the file
        raise ConfigError(f"command line: unknown config key(s) {', '.join(map(repr, unknown))}")
    values.update(command_line)
    return config_from_dict(cls, values, source=path or "command line")
