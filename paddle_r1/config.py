"""Job configs: one dataclass per job, read from yaml/json plus ``--key value`` overrides. The keys both
jobs take (model, data, optimizer, output) are defined once, in the key groups the job classes inherit.

Names follow TRL's ``GRPOConfig`` and PaddleMIX's r1_mllm arguments so users can carry their
settings over. Every value is checked against its key's declared type and every rule between keys is checked in
one step (``validate``), before anything loads; an error names the key, and ``load_config`` adds the file or
command line it came from.
"""
from __future__ import annotations

import json
import math
import os
import re
import typing
from dataclasses import dataclass, field
from typing import Any, Optional, Union

import yaml


class DuplicateKey(ValueError):
    """A mapping that gives one key twice; ``first`` and ``second`` say where ("line 3")."""

    def __init__(self, key, first: str, second: str):
        super().__init__(f"key {key!r} is given twice, on {first} and {second}")


def _positions(first: tuple[int, int], second: tuple[int, int]) -> tuple[str, str]:
    """Two (line, column) places (1-based) as a message names them: by line, and by column when on one line."""
    if first[0] != second[0]:
        return f"line {first[0]}", f"line {second[0]}"
    return f"line {first[0]} column {first[1]}", f"column {second[1]}"


class _YamlLoader(yaml.SafeLoader):
    """YAML 1.1 reads ``1e-5`` (no dot) as a string; learning rates are written that way, so read it as a float.
    A key given twice in one mapping is a ``DuplicateKey`` (PyYAML would keep the last silently); a merge (``<<``)
    may still override what it merges."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=deep)
                place = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
                try:
                    first = seen.setdefault(key, place)
                except TypeError:  # an unhashable key: the base class names it
                    continue
                if first != place:
                    raise DuplicateKey(key, *_positions(first, place))
        return super().construct_mapping(node, deep)


EXPONENT_FLOAT = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)[eE][-+]?\d+$")  # 1e-5, 2E+3: floats here, strings in YAML 1.1
_YamlLoader.add_implicit_resolver("tag:yaml.org,2002:float", EXPONENT_FLOAT, list("-+0123456789."))


def _load_yaml(text: str):
    return yaml.load(text, Loader=_YamlLoader)


# a JSON string (and the colon that makes it an object's key), or an object's brace
_JSON_KEY_OR_BRACE = re.compile(r'"(?:[^"\\]|\\.)*"(?:\s*:)?|[{}]')


def _duplicate_json_key_lines(text: str) -> tuple[str, tuple[int, int], tuple[int, int]]:
    """(key, its first place, its second) for the first key given twice in one object of valid JSON ``text``:
    ``json.loads`` tells that a key repeats but not where."""
    objects: list[dict] = []
    for match in _JSON_KEY_OR_BRACE.finditer(text):
        token = match.group()
        if token == "{":
            objects.append({})
        elif token == "}":
            objects.pop()
        elif token.endswith(":"):
            key = json.loads(token[:-1])
            line_start = text.rfind("\n", 0, match.start()) + 1
            place = (text.count("\n", 0, match.start()) + 1, match.start() - line_start + 1)
            first = objects[-1].setdefault(key, place)
            if first != place:
                return key, first, place
    raise AssertionError("json.loads found a repeated key that the scan did not")


def _load_json(text: str):
    """``json.loads``, with a key given twice in one object a ``DuplicateKey`` (json keeps the last silently)."""
    repeats = []

    def to_dict(pairs: list) -> dict:
        if len({key for key, _ in pairs}) < len(pairs):
            repeats.append(pairs)
        return dict(pairs)

    values = json.loads(text, object_pairs_hook=to_dict)
    if repeats:
        key, first, second = _duplicate_json_key_lines(text)
        raise DuplicateKey(key, *_positions(first, second))
    return values


class ConfigError(ValueError):
    """A config that cannot run; the message names the key, value or path at fault. ``keys`` are the config keys
    at fault, so that ``load_config`` can say which file or command line set them."""

    def __init__(self, message: str, keys: tuple = ()):
        super().__init__(message)
        self.keys = tuple(keys)


# ---- types: every value checked against its key's declared type -------------------------------------------
_TYPE_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string", list: "a list",
               dict: "a mapping"}


def _split_optional(annotation) -> tuple[Any, bool]:
    """``Optional[X]`` -> (X, True); any other annotation -> (itself, False)."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is Union and type(None) in args:
        return next(a for a in args if a is not type(None)), True
    return annotation, False


def _type_words(annotation) -> str:
    """How an error names a type to a user who writes yaml: 'a number (float)', 'an integer (int) or null'."""
    inner, optional = _split_optional(annotation)
    origin = typing.get_origin(inner) or inner
    words = f"{_TYPE_WORDS[origin]} ({getattr(inner, '__name__', inner)})"
    return f"{words} or null" if optional else words


def _one_or_many(value):
    """One string where a list is expected is a list of that one string, not of its letters."""
    return [value] if isinstance(value, str) else value


def _typed_value(value, annotation, where: str, key: str):
    """``value`` as a key declared ``annotation`` holds it (an int for a float key becomes a float, one string for a
    list key a one-element list), or a ConfigError naming ``where`` (the key, or an item of it), the value and the
    type: a wrong type caught here is a message before anything loads instead of a TypeError in the middle of a run.
    """
    inner, optional = _split_optional(annotation)
    if value is None and optional:
        return None
    origin, args = typing.get_origin(inner) or inner, typing.get_args(inner)
    if origin is list and isinstance(_one_or_many(value), list):
        items = _one_or_many(value)
        return [_typed_value(item, args[0], f"{where}[{i}]", key) for i, item in enumerate(items)] if args else items
    if origin is dict and isinstance(value, dict):  # a bare ``dict`` (a reward's settings) holds any values
        return {name: _typed_value(item, args[1], f"{where}.{name}", key) for name, item in value.items()} \
            if args else value
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    if origin is float and numeric:
        return float(value)
    if origin is int and numeric and isinstance(value, int):
        return value
    if origin in (bool, str) and isinstance(value, origin):
        return value
    raise ConfigError(f"config key {where!r} expects {_type_words(annotation)}, got {value!r}", keys=(key,))


def _apply_types(config) -> None:
    """Every key of ``config`` checked (and normalised) against its declared type."""
    for key, annotation in typing.get_type_hints(type(config)).items():
        setattr(config, key, _typed_value(getattr(config, key), annotation, key, key))


DEFAULT_QUESTION_TEMPLATE = (
    "{Question} First output the thinking process in <think> </think> tags and then output the final "
    "answer in <answer> </answer> tags."
)
# What SFT teaches the model to write; {Answer} is the solution in the model's own terms (a box in its
# coordinate system, a count). The thinking is left empty: SFT here teaches the format and a first answer.
DEFAULT_ANSWER_TEMPLATE = "<think> </think><answer>{Answer}</answer>"
DTYPES = ("float32", "bfloat16", "float16")
SHARDING_STAGES = ("", "stage1", "stage2")  # see paddle_r1.trainer.sharding
ROLLOUT_ENGINES = ("auto", "one_token", "layers")  # see paddle_r1.generation.decoder
LR_SCHEDULERS = ("linear", "cosine", "constant", "constant_with_warmup", "polynomial")  # paddleformers' SchedulerType
REPORT_TO = ("visualdl", "swanlab", "wandb", "none")  # see paddle_r1.trainer.trackers


@dataclass
class ModelKeys:
    """Model and memory keys both jobs take."""

    model_name_or_path: str = ""
    dtype: str = "float32"
    device: Optional[str] = None  # default: gpu when Paddle was built with CUDA, else cpu
    # on the CPU: MKL's AVX2 kernels on AMD processors and glibc's large heap blocks (paddle_r1/cpu_math.py)
    tune_cpu_math: bool = True
    freeze_vision: bool = False
    gradient_checkpointing: bool = False  # recompute activations in the backward pass (memory for time)
    attn_implementation: Optional[str] = None  # eager | sdpa; None: sdpa on GPU (flash / memory-efficient), eager on CPU
    lora: bool = False  # train LoRA adapters on the language model instead of all weights
    lora_rank: int = 8
    lora_alpha: float = 16.0
    lora_dropout: float = 0.0
    lora_target_modules: Optional[list[str]] = None  # regexes over layer names; default: the decoder's projections
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
    image_columns: Optional[list[str]] = None  # products format: the columns holding image paths
    image_cache_dir: Optional[str] = None  # where images stored inside datasets folders are written
    image_placement: str = "markers"  # markers: images where the problem's <image> markers are; before_text: VLM-R1's (all first)
    max_image_pixels: Optional[int] = None  # an image with more pixels is a bad image (None: Pillow's limit, ~89M)
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
    # a step that writes a NaN or infinite weight is put back from a host copy of the weights and AdamW state taken
    # before every step (a copy of this rank's share; cost: README, Reliability); false: no copy, such a step stops
    # the run before anything is saved
    undo_non_finite_updates: bool = True
    lr_scheduler_type: str = "constant"  # linear | cosine | constant | constant_with_warmup | polynomial
    warmup_steps: int = 0
    warmup_ratio: float = 0.0
    max_steps: int = -1
    num_train_epochs: float = 1.0
    seed: int = 42
    data_seed: Optional[int] = None  # TRL's: the seed of the prompt order alone; None: seed


@dataclass
class OutputKeys:
    """Output keys both jobs take."""

    output_dir: str = "output"
    logging_steps: int = 1
    save_steps: int = 500
    save_total_limit: Optional[int] = None
    # checkpoints without the optimizer state (AdamW's moments and master weights, twice the fp32 weights) nor a
    # synced ref_model/: a resume from one is a warm start (weights, step, data position; fresh AdamW state)
    save_only_model: bool = False
    use_visualdl: bool = True
    # TRL's: trackers the run also reports to (the config, each logged step's metrics, a table of the completions):
    # visualdl, swanlab, wandb (pip install 'paddle_r1[swanlab]' / '[wandb]'); none: none, VisualDL included.
    # VisualDL is on while use_visualdl is true (the default); where the runs go: paddle_r1/trainer/trackers.py
    report_to: list[str] = field(default_factory=list)
    disable_tqdm: bool = False
    # a checkpoint folder; "latest": output_dir's newest (an error when there is none); "auto": the newest when
    # output_dir has a complete checkpoint, else a fresh start (VLM-R1's behaviour)
    resume_from_checkpoint: Optional[str] = None
    # seconds a rank waits at a collective for the other ranks before the job ends, naming the late rank and its
    # phase; above the slowest bounded wait a step has (README: Reliability)
    collective_timeout: float = 1800.0


def _check_choice(config, key: str, allowed: tuple) -> None:
    if getattr(config, key) not in allowed:
        raise ConfigError(f"config key {key!r}: {getattr(config, key)!r} is not one of {', '.join(allowed)}",
                          keys=(key,))


@dataclass(frozen=True)
class Bounds:
    """The values a numeric key may take: finite, and between ``low`` and ``high`` (each end included unless
    ``*_open``); ``why`` is added to the error when the bound is not obvious."""

    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False
    why: str = ""

    def admits(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def __str__(self) -> str:
        def number(x: float) -> str:
            return str(int(x)) if float(x).is_integer() else f"{x:g}"

        if math.isinf(self.low) and math.isinf(self.high):
            return "finite"
        if math.isinf(self.high):
            return f"{'>' if self.low_open else '>='} {number(self.low)}"
        return f"in {'(' if self.low_open else '['}{number(self.low)}, {number(self.high)}" \
               f"{')' if self.high_open else ']'}"


def at_least(low: float, why: str = "") -> Bounds:
    return Bounds(low=low, why=why)


def above(low: float, why: str = "") -> Bounds:
    return Bounds(low=low, low_open=True, why=why)


SEEDS = Bounds(0, 2 ** 32, high_open=True, why="the seeds numpy takes")
UNIT = Bounds(0, 1)  # a fraction or probability, both ends allowed
# Every numeric key of both jobs, with the values it may take (a NaN or infinity never); a list key's items each.
# ``JobKeys.validate`` checks them with the other rules, before anything loads; a test keeps the table complete.
NUMERIC_BOUNDS: dict[str, Bounds] = {
    # model and memory
    "lora_rank": at_least(1), "lora_alpha": above(0), "lora_dropout": Bounds(0, 1, high_open=True),
    "min_pixels": at_least(1), "max_pixels": at_least(1), "logprob_chunk_size": at_least(1),
    "max_image_pixels": at_least(1),
    # optimizer and run length
    "per_device_train_batch_size": at_least(1), "learning_rate": at_least(0), "weight_decay": at_least(0),
    "adam_beta1": Bounds(0, 1, high_open=True), "adam_beta2": Bounds(0, 1, high_open=True),
    "adam_epsilon": above(0, "it keeps AdamW's division finite"), "max_grad_norm": at_least(0),
    "max_skipped_steps": at_least(1), "warmup_steps": at_least(0), "warmup_ratio": UNIT,
    "max_steps": at_least(-1, "-1: num_train_epochs decides"), "num_train_epochs": above(0),
    "seed": SEEDS, "data_seed": SEEDS,
    # output
    "logging_steps": at_least(1), "save_steps": at_least(0), "save_total_limit": at_least(0),
    "collective_timeout": above(0, "seconds a rank waits for the others"),
    # GRPO
    "reward_weights": Bounds(), "num_generations": at_least(2, "GRPO compares completions within a group"),
    "max_completion_length": at_least(1), "temperature": at_least(0), "top_p": Bounds(0, 1, low_open=True),
    "top_k": at_least(0), "beta": at_least(0), "epsilon": at_least(0), "epsilon_high": at_least(0),
    "num_iterations": at_least(1), "ref_model_sync_steps": at_least(1), "ref_model_mixup_alpha": UNIT,
    "ref_ema_decay": Bounds(0, 1, low_open=True, high_open=True), "max_num_gen_batches": at_least(1),
    "overlong_buffer": at_least(0), "overlong_penalty_factor": at_least(0), "gradient_accumulation_steps": at_least(1),
    "log_completions_steps": at_least(0), "eval_steps": at_least(0), "eval_sample_num": at_least(1),
}


def _check_bounds(config) -> None:
    """Every numeric key of ``config`` that is set, against ``NUMERIC_BOUNDS`` (after the types are checked)."""
    for key, bounds in NUMERIC_BOUNDS.items():
        value = getattr(config, key, None)
        items = [(f"{key}[{i}]", v) for i, v in enumerate(value)] if isinstance(value, list) else [(key, value)]
        for where, item in items:
            if item is not None and not bounds.admits(item):
                finite = "" if math.isfinite(item) or str(bounds) == "finite" else "finite and "
                why = f" ({bounds.why})" if bounds.why else ""
                raise ConfigError(f"config key {where!r}: must be {finite}{bounds}, got {item}{why}", keys=(key,))


class JobKeys:
    """What both job configs do once their keys are set: one validation step, types first (so that the rules
    compare numbers with numbers), then the rules on the shared keys (choices, ``NUMERIC_BOUNDS``), then the job's
    own."""

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        _apply_types(self)
        _check_choice(self, "dtype", DTYPES)
        _check_choice(self, "lr_scheduler_type", LR_SCHEDULERS)
        _check_bounds(self)
        for name in self.report_to:
            if name not in REPORT_TO or (name == "none" and len(self.report_to) > 1):
                raise ConfigError(f"config key 'report_to': {name!r} is not one of {', '.join(REPORT_TO)} "
                                  "(none stands alone)", keys=("report_to",))
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
    def prompt_order_seed(self) -> int:
        """TRL's data_seed: the seed of the prompt order alone, when set; else seed."""
        return self.seed if self.data_seed is None else self.data_seed

    def check_machine(self, device: str) -> None:
        """The job's rules that need the machine it runs on (the device, the files the config names);
        ``paddle_r1.trainer.job.prepare_job`` calls it once the device is chosen, before any model loads."""
        self._resolve_auto_resume()

    def _resolve_auto_resume(self) -> None:
        """``resume_from_checkpoint: auto`` becomes "latest" when output_dir holds a complete checkpoint, else None
        (a fresh start), as VLM-R1 resumes by itself; said in one line either way."""
        if self.resume_from_checkpoint != "auto":
            return
        from .trainer.checkpoint import list_checkpoints

        found = list_checkpoints(self.output_dir) if os.path.isdir(self.output_dir) else []
        self.resume_from_checkpoint = "latest" if found else None
        print(f"resume_from_checkpoint auto: {'resuming from ' + found[-1] if found else 'no complete checkpoint in ' + self.output_dir + ', starting fresh'}")


@dataclass
class GRPOConfig(OutputKeys, OptimizerKeys, DataKeys, ModelKeys, JobKeys):
    """``paddle-r1 train``: the shared keys (model, data, optimizer, output) and GRPO's own."""

    # completions per device and micro-step, as in TRL, VLM-R1 and EasyDistill: a multiple of num_generations, since
    # each device generates whole groups (prompts per device = this / num_generations); None: num_generations
    per_device_train_batch_size: Optional[int] = None
    sharding: str = ""  # "" | stage1 (optimizer state split over ranks) | stage2 (+ gradients; GPU/XPU)

    # rewards
    reward_funcs: list[str] = field(default_factory=lambda: ["format", "iou"])
    reward_weights: Optional[list[float]] = None
    reward_kwargs: dict[str, dict] = field(default_factory=dict)  # {reward name: {keyword: value}} passed to that reward

    # rollout
    num_generations: int = 8
    max_completion_length: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    rollout_engine: str = "auto"  # auto: one_token where it runs (Qwen2/2.5-VL), else layers (the model's own)

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
    ref_model_update: str = ""  # "" (sync when sync_ref_model, else none) | none | sync | ema
    ref_ema_decay: float = 0.99  # ema: ref <- decay * ref + (1 - decay) * policy after every step

    # algorithm variants (formulas in paddle_r1/trainer/loss.py and dynamic_sampling.py)
    adv_estimator: str = "grpo"  # grpo (scaled as scale_rewards says) | rloo | reinforce_plus_plus | dr_grpo
    kl_estimator: str = "k3"  # k1 | k2 | k3
    use_kl_loss: bool = True  # false: beta * sum_t KL is subtracted from each completion's reward instead
    importance_sampling_level: str = "token"  # token | sequence (GSPO)
    dynamic_sampling: bool = False  # DAPO: drop groups whose rewards all tie, refill from further prompt batches
    max_num_gen_batches: int = 4  # dynamic sampling: prompt batches drawn at most per micro-batch
    overlong_buffer: int = 0  # DAPO soft overlong penalty over the last N tokens before max_completion_length; 0: off
    overlong_penalty_factor: float = 1.0  # the penalty at max_completion_length

    # optimisation and output beyond the shared keys
    gradient_accumulation_steps: int = 1
    log_completions_steps: int = 1  # write completions.jsonl every N steps (0: never)

    # held-out evaluation: greedy answers scored by eval_reward, logged as eval/score (paddle_r1.evaluation.heldout)
    eval_steps: int = 0  # every N steps, plus before the first and after the last step; 0: off
    eval_data_path: Optional[str] = None  # a file in any data format; images relative to image_root or the file
    eval_sample_num: Optional[int] = None  # a seeded random subset of that many samples; None: all
    eval_reward: str = "iou_accuracy"  # the task's accuracy reward (counting, iou_accuracy, math, ...)

    def check_own_keys(self) -> None:
        _check_choice(self, "rollout_engine", ROLLOUT_ENGINES)
        _check_choice(self, "loss_type", ("grpo", "bnpo", "dr_grpo", "dapo"))
        _check_choice(self, "scale_rewards", ("group", "batch", "none"))
        _check_choice(self, "ref_model_update", ("", "none", "sync", "ema"))
        _check_choice(self, "adv_estimator", ("grpo", "rloo", "reinforce_plus_plus", "dr_grpo"))
        _check_choice(self, "kl_estimator", ("k1", "k2", "k3"))
        _check_choice(self, "importance_sampling_level", ("token", "sequence"))
        if self.overlong_buffer >= self.max_completion_length:
            raise ConfigError(f"config key 'overlong_buffer': {self.overlong_buffer} must be below "
                              f"max_completion_length {self.max_completion_length}",
                              keys=("overlong_buffer", "max_completion_length"))
        _check_choice(self, "sharding", SHARDING_STAGES)
        self._check_batch()
        self._check_rewards()
        self._check_reference()
        if self.eval_steps and not self.eval_data_path:
            raise ConfigError("config key 'eval_data_path' is required when eval_steps > 0",
                              keys=("eval_data_path", "eval_steps"))

    def _check_batch(self) -> None:
        """per_device_train_batch_size counts completions (TRL's meaning); a device generates whole groups."""
        batch, group = self.per_device_train_batch_size, self.num_generations
        if batch is not None and batch % group:
            raise ConfigError(
                f"config keys 'per_device_train_batch_size' and 'num_generations': per_device_train_batch_size counts "
                f"completions (as in TRL), {batch} is not a multiple of num_generations {group}; each device generates "
                f"whole groups here, so use {max(1, round(batch / group)) * group} ({max(1, round(batch / group))} "
                f"prompt(s) x {group}). TRL and VLM-R1 may spread a group over devices (their global batch, ranks x "
                f"per_device_train_batch_size, must divide); for the same global batch give each device whole groups "
                f"and fewer devices or gradient_accumulation_steps", keys=("per_device_train_batch_size", "num_generations"))

    @property
    def prompts_per_device(self) -> int:
        """Prompts each device takes per micro-step: per_device_train_batch_size / num_generations (one when unset)."""
        return (self.per_device_train_batch_size or self.num_generations) // self.num_generations

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
class SFTConfig(OutputKeys, OptimizerKeys, DataKeys, ModelKeys, JobKeys):
    """``paddle-r1 sft``: supervised fine-tuning on the answers built from the solutions, before GRPO.

    The shared keys keep their names and meanings, so one model / data block serves both jobs; the result is
    output_dir/checkpoint-N, a model folder GRPO's model_name_or_path can name.
    """

    answer_template: str = DEFAULT_ANSWER_TEMPLATE  # the target text; must contain {Answer}
    per_device_train_batch_size: int = 8  # samples per device and micro-step (SFT has no generations)
    learning_rate: float = 1e-5
    output_dir: str = "output_sft"
    save_steps: int = 0  # 0: only at the end

    def check_own_keys(self) -> None:
        if "{Answer}" not in self.answer_template:
            raise ConfigError(f"config key 'answer_template': {self.answer_template!r} has no {{Answer}}",
                              keys=("answer_template",))


def _check_known(cls, values: dict, source: str) -> None:
    unknown = sorted(set(values) - set(cls.__dataclass_fields__))
    if unknown:
        raise ConfigError(f"{source}: unknown config key(s) {', '.join(map(repr, unknown))}")


def config_from_dict(cls, values: dict, sources: dict[str, str]):
    """Build and validate ``cls`` from ``values``; ``sources`` says where each key was set (a file, "command
    line"), and an error is prefixed with the sources of the keys it names (keys left at their defaults have none).
    """
    try:
        return cls(**values)
    except ConfigError as e:
        where = list(dict.fromkeys(sources[key] for key in e.keys if key in sources))
        if not where:
            raise
        raise ConfigError(f"{', '.join(where)}: {e}", e.keys) from None


def read_config_file(path: str) -> dict:
    if not os.path.isfile(path):
        raise ConfigError(f"config file not found: {path}")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        values = _load_json(text) if path.endswith(".json") else _load_yaml(text)
    except DuplicateKey as e:
        raise ConfigError(f"{path}: {e}") from None
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        raise ConfigError(f"{path}: cannot parse: {e}") from e
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys to values")
    return values


def _split_overrides(args: list[str]) -> dict[str, list[str]]:
    """``--key v1 v2``, ``--key=v`` and a bare ``--flag`` -> {key: [texts]} (a flag has none)."""
    texts: dict[str, list[str]] = {}
    key = None
    for arg in args:
        if arg.startswith("--"):
            key, eq, text = arg[2:].partition("=")
            key = key.replace("-", "_")  # --output-dir is --output_dir; the value keeps its dashes
            texts[key] = [text] if eq else []
            key = None if eq else key  # --key=value takes exactly that value
        elif key is None:
            raise ConfigError(f"command line: expected --key value, got {arg!r}")
        else:
            texts[key].append(arg)
    return texts


YAML_NULLS = ("null", "Null", "NULL", "~", "")


def _read_text(key: str, text: str, annotation) -> Any:
    """A command-line value: the text as typed for a string key, else read as yaml (numbers, true/false, lists)."""
    if _split_optional(annotation)[0] is str:
        return text
    try:
        return _load_yaml(text)
    except (yaml.YAMLError, DuplicateKey) as e:
        raise ConfigError(f"command line: --{key}: cannot read {text!r} ({e})", keys=(key,)) from None


def _read_texts(key: str, texts: list[str], annotation) -> Any:
    """The value of ``--key texts...`` as TRL's HfArgumentParser takes it: no text is true for a true/false key (a
    flag) or a key ``cls`` lacks (a peer's flag, see ``SOURCE_KEYS``), and an error for any other; yaml's null unsets
    a key that may be null (``--data_path null``); a list key takes every text as one item, or one yaml list
    ``"[a, b]"`` (a text in brackets; ``"[qk]_proj"`` is an item); any other key one value."""
    inner, optional = _split_optional(annotation)
    if not texts:
        if annotation is not None and inner is not bool:
            raise ConfigError(f"command line: --{key} needs a value (only a true/false key may be given alone)",
                              keys=(key,))
        return True
    if optional and len(texts) == 1 and texts[0] in YAML_NULLS:
        return None
    one_yaml_list = len(texts) == 1 and texts[0].strip().startswith("[") and texts[0].strip().endswith("]")
    if typing.get_origin(inner) is list and not one_yaml_list:
        return [_read_text(key, text, typing.get_args(inner)[0]) for text in texts]
    values = [_read_text(key, text, annotation) for text in texts]
    return values[0] if len(values) == 1 else values


def parse_overrides(args: list[str], cls=None) -> dict[str, Any]:
    """``["--learning_rate", "1e-5", "--reward_funcs", "iou", "format", "--beta=0"]`` ->
    ``{"learning_rate": 1e-05, "reward_funcs": ["iou", "format"], "beta": 0}``. With ``cls``, each key is read as
    its declared type asks (see ``_read_texts``); without it, or for a key ``cls`` lacks, every text is yaml."""
    types = typing.get_type_hints(cls) if cls else {}
    return {key: _read_texts(key, texts, types.get(key)) for key, texts in _split_overrides(args).items()}


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
        mapped["reward_funcs"] = [name.removesuffix("_reward") if isinstance(name, str) else name
                                  for name in _one_or_many(mapped["reward_funcs"])]
    return mapped


# ---- the peers' keys: PaddleMIX r1_mllm, VLM-R1 (open-r1-multimodal), R1-V, TRL -------------------------------
# Each key is translated to paddle_r1's keys with its source's meaning, or accepted with one printed line saying
# what it does here. A converter takes (value, every key given) and returns ({paddle_r1 key: value}, note).
BUILTIN_DATASETS = ("synthetic_rec",)
VLM_R1_TEMPLATES = {  # VLM-R1's Qwen question template per --task_type (vlm_modules/qwen_module.py); others: the default
    "rec": DEFAULT_QUESTION_TEMPLATE + " Output the final answer in JSON format.",
    "ic": "{Question} First thinks about the reasoning process in the mind and then provides the user with the answer. "
          "The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags, "
          "respectively, i.e., <think> reasoning process here </think><answer> json format answer here </answer>",
    "odLength": "First thinks about the reasoning process in the mind and then provides the user with the answer. The "
                "reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags, "
                "respectively, i.e., <think> reasoning process here </think><answer> answer here </answer>\n{Question}",
}


@dataclass(frozen=True)
class SourceKey:
    source: str  # whose key it is
    convert: Any  # (value, every key given) -> ({paddle_r1 key: value}, note printed once)


def _alias(key: str):
    return lambda value, given: ({key: value}, f"read as {key}")


def _no_effect(note: str):
    return lambda value, given: ({}, note)


def _dtype_flag(dtype: str):
    """TrainingArguments' bf16 / fp16 flags: true picks the dtype, false says nothing about it."""
    return lambda value, given: ({"dtype": dtype}, f"read as dtype: {dtype}") if value is True else \
        ({}, "false: nothing to do (dtype names the precision here)")


def _torch_dtype(value, given):
    if value == "auto":
        return {}, "auto: dtype names the precision here (default float32)"
    return {"dtype": value}, "read as dtype"


def _single_device_degree(value, given):
    """Tensor / pipeline / sequence parallelism are not offered: a degree of 1 is what runs, more is an error."""
    if value in (None, -1, 0, 1):
        return {}, "1: nothing to do (data parallel with optional sharding is what runs here)"
    raise ConfigError(f"degree {value}: tensor, pipeline and sequence parallelism are not offered by paddle_r1; "
                      "use data parallel with sharding (stage1 / stage2)")


def _attention(value, given):
    if value == "flash_attention_2":
        return {"attn_implementation": "sdpa"}, "read as sdpa: Paddle's scaled_dot_product_attention, flash " \
                                                "attention on sm80+ in bf16/fp16"
    return {"attn_implementation": value}, None


def _dataset_name(value, given):
    """paddle_r1's built-in set; else PaddleMIX's and VLM-R1 grpo_rec.py's mixture yaml (or a data path), unless
    the data is named otherwise (VLM-R1's grpo_jsonl.py reads data_file_paths and ignores dataset_name)."""
    if value is None or value in BUILTIN_DATASETS:
        return {"dataset_name": value}, None
    if "data_file_paths" in given or "data_path" in given:
        return {}, "not read: data_file_paths / data_path name the data (as in VLM-R1's grpo_jsonl.py)"
    return {"data_path": value}, "read as data_path (PaddleMIX's data_config yaml, a data file or folder)"


def _colon_list(key: str, given: dict, count: int) -> list:
    """VLM-R1's ':'-separated per-file list, one item per data file (or one item for all)."""
    items = str(given[key]).split(":")
    if len(items) == 1:
        items = items * count
    if len(items) != count:
        raise ConfigError(f"config key {key!r}: {len(items)} items for {count} data_file_paths (':'-separated)")
    return items


def _data_file_paths(value, given):
    """VLM-R1's data_file_paths / image_folders / reward_method (':'-separated, one per file) -> a mixture yaml
    (one entry per file) in the temp folder, named by its content so that every rank reads the same file."""
    import hashlib
    import tempfile

    files = str(value).split(":")
    folders = _colon_list("image_folders", given, len(files)) if "image_folders" in given else [None] * len(files)
    methods = _colon_list("reward_method", given, len(files)) if given.get("reward_method") else [None] * len(files)
    entries = [{"json_path": os.path.abspath(path),
                **({"image_root": os.path.abspath(folder)} if folder else {}),
                **({"reward_method": method} if method else {})}
               for path, folder, method in zip(files, folders, methods)]
    text = yaml.safe_dump({"datasets": entries}, sort_keys=False)
    mixture = os.path.join(tempfile.gettempdir(), f"paddle_r1-data-{hashlib.sha1(text.encode()).hexdigest()[:12]}.yaml")
    if not os.path.isfile(mixture):
        partial = f"{mixture}.{os.getpid()}"
        with open(partial, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(partial, mixture)
    return {"data_path": mixture}, f"read as data_path: {mixture}, one mixture entry per file (with image_folders " \
                                   "and reward_method)"


def _read_with_data_file_paths(key: str):
    def convert(value, given):
        if "data_file_paths" not in given:
            raise ConfigError(f"config key {key!r} goes with data_file_paths (VLM-R1's ':'-separated lists)")
        return {}, None  # data_file_paths' note covers it

    return convert


def _task_type(value, given):
    template = VLM_R1_TEMPLATES.get(value, DEFAULT_QUESTION_TEMPLATE)
    return {"question_template": template}, "read as VLM-R1's question_template for this task type"


PADDLEMIX, VLM_R1, TRL = "PaddleMIX r1_mllm", "VLM-R1", "TRL / transformers"
SOURCE_KEYS: dict[str, SourceKey] = {
    # the keys PaddleMIX's run_grpo_*.sh pass
    "recompute": SourceKey(PADDLEMIX, _alias("gradient_checkpointing")),
    "bf16": SourceKey(TRL, _dtype_flag("bfloat16")),
    "fp16": SourceKey(TRL, _dtype_flag("float16")),
    "fp16_opt_level": SourceKey(PADDLEMIX, _no_effect("dtype names the precision; AdamW keeps float32 master weights")),
    "amp_master_grad": SourceKey(PADDLEMIX, _no_effect("AdamW always keeps float32 master weights here")),
    "attn_implementation": SourceKey(TRL, _attention),
    "dataset_name": SourceKey(PADDLEMIX, _dataset_name),
    "max_prompt_length": SourceKey(TRL, _no_effect("prompts are not truncated here (cutting a prompt cuts its image "
                                                   "tokens); max_pixels bounds their length")),
    "do_train": SourceKey(TRL, _no_effect("paddle-r1 train always trains")),
    "overwrite_output_dir": SourceKey(TRL, _no_effect("output_dir is reused; resume_from_checkpoint decides whether its "
                                                      "checkpoints are continued")),
    "logging_dir": SourceKey(TRL, _no_effect("logs go to output_dir (metrics.jsonl, visualdl/)")),
    "dataloader_num_workers": SourceKey(TRL, _no_effect("images are opened lazily by the training process")),
    "save_strategy": SourceKey(TRL, _no_effect("checkpoints every save_steps steps")),
    "run_name": SourceKey(TRL, _no_effect("output_dir names the run")),
    "sharding_parallel_degree": SourceKey(PADDLEMIX, _no_effect("sharding (stage1 / stage2) spans all ranks here")),
    "tensor_parallel_degree": SourceKey(PADDLEMIX, _single_device_degree),
    "pipeline_parallel_degree": SourceKey(PADDLEMIX, _single_device_degree),
    "sep_parallel_degree": SourceKey(PADDLEMIX, _single_device_degree),
    "hybrid_parallel_topo_order": SourceKey(PADDLEMIX, _no_effect("one data-parallel group: no topology to order")),
    # VLM-R1's keys (run_scripts/*.sh, multinode_training_args.yaml)
    "freeze_vision_modules": SourceKey(VLM_R1, _alias("freeze_vision")),
    "data_file_paths": SourceKey(VLM_R1, _data_file_paths),
    "image_folders": SourceKey(VLM_R1, _read_with_data_file_paths("image_folders")),
    "reward_method": SourceKey(VLM_R1, _read_with_data_file_paths("reward_method")),
    "task_type": SourceKey(VLM_R1, _task_type),
    "torch_dtype": SourceKey(TRL, _torch_dtype),
    "use_peft": SourceKey(TRL, _alias("lora")),
    "lora_r": SourceKey(TRL, _alias("lora_rank")),
    "lora_task_type": SourceKey(TRL, _no_effect("LoRA adapts the language model's projections here")),
    "deepspeed": SourceKey(TRL, _no_effect("DeepSpeed does not apply to Paddle; sharding: stage1 / stage2 splits the "
                                           "optimizer state")),
}


def from_source_keys(values: dict, source: str, given: dict) -> dict:
    """``values`` with the peers' keys (``SOURCE_KEYS``) translated, one printed line for each; ``given`` is every
    key given (file and command line), for converters that read their companions. A translated key that disagrees
    with the same key given by its own name in ``source`` is an error naming both."""
    out = {key: value for key, value in values.items() if key not in SOURCE_KEYS}
    for key in (k for k in values if k in SOURCE_KEYS):
        entry = SOURCE_KEYS[key]
        try:
            mapped, note = entry.convert(values[key], given)
        except ConfigError as e:
            raise ConfigError(f"{source}: {key} ({entry.source}): {e}", keys=(key,)) from None
        for target, value in mapped.items():
            if target != key and target in out and out[target] != value:
                raise ConfigError(f"{source}: config keys {key!r} ({entry.source}) and {target!r} disagree: "
                                  f"{values[key]!r} reads as {target}={value!r}, but {target}={out[target]!r}")
            out[target] = value
        if note:
            print(f"{source}: {key} {values[key]!r} ({entry.source}): {note}")
    return out


def load_config(cls, path: Optional[str] = None, overrides: Optional[list[str]] = None):
    """Read ``path`` (yaml or json, optional; EasyDistill job configs are translated), apply command-line
    overrides, translate the peers' keys (``SOURCE_KEYS``), and validate; an error names the file or the command
    line that set the key at fault. The file's folder is remembered in ``CONFIG_FOLDERS``: user rewards
    (``"my_rewards:fn"``) are looked for there too."""
    values = read_config_file(path) if path else {}
    if "job_type" in values:
        values = from_easydistill(values, path)
    command_line = parse_overrides(overrides or [], cls)
    context = {**values, **command_line}
    values = from_source_keys(values, path, context)
    _check_known(cls, values, path)
    command_line = from_source_keys(command_line, "command line", context)
    _check_known(cls, command_line, "command line")  # so that a typo on the command line is not blamed on the file
    sources = {**dict.fromkeys(values, path), **dict.fromkeys(command_line, "command line")}
    config = config_from_dict(cls, {**values, **command_line}, sources)
    if path:
        remember_config_folder(os.path.dirname(os.path.abspath(path)))
    return config


# Folders of the config files loaded in this process: a user reward named "my_rewards:fn" is looked for there
# (after sys.path and the working folder), as ``python -m`` run beside the config would find it.
CONFIG_FOLDERS: list[str] = []


def remember_config_folder(folder: str) -> None:
    if folder not in CONFIG_FOLDERS:
        CONFIG_FOLDERS.append(folder)
