"""The keys of the peers' configs and command lines, with their sources' meanings: EasyDistill's job json
(``from_easydistill``), and PaddleMIX r1_mllm's, VLM-R1's and TRL's keys (``SOURCE_KEYS``): each is translated to
paddle_r1's keys or accepted with one printed line saying what it does here."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import yaml

from ...synthetic import BUILTIN_DATASETS
from ..keys import DEFAULT_QUESTION_TEMPLATE
from ...errors import ConfigError
from ..values import one_or_many


# EasyDistill job configs (seed 000): {"job_type", "dataset": {...}, "models": {...}, "training": {...}}
EASYDISTILL_RENAMES = {
    "dataset.labeled_path": "data_path",
    "models.student": "model_name_or_path",
    "training.roll_out_num": "num_generations",
    "training.max_length": "max_completion_length",
}
EASYDISTILL_IGNORED = {"training.deepspeed": "DeepSpeed does not apply to Paddle; sharding is chosen in paddle_r1"}


def from_easydistill(values: dict, source: str, known: set) -> dict:
    """Map an EasyDistill json config onto the ``known`` keys (GRPOConfig's); an unknown key is an error naming its
    path."""
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
                                  for name in one_or_many(mapped["reward_funcs"])]
    return mapped


# ---- the peers' keys: PaddleMIX r1_mllm, VLM-R1 (open-r1-multimodal), R1-V, TRL -------------------------------
# Each key is translated to paddle_r1's keys with its source's meaning, or accepted with one printed line saying
# what it does here. A converter takes (value, every key given) and returns ({paddle_r1 key: value}, note).
# VLM-R1's Qwen question template per --task_type (vlm_modules/qwen_module.py); others: the default
VLM_R1_TEMPLATES = {
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


# TRL's generation_kwargs (a GenerationConfig's keys) that paddle_r1's rollout takes, and the config key each sets
GENERATION_KWARGS = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
                     "repetition_penalty": "repetition_penalty", "max_new_tokens": "max_completion_length"}


def _generation_kwargs(value, given):
    """TRL's generation_kwargs (a mapping; JSON text on the command line): each key the rollout has read as its config
    key, ``do_sample`` true as what GRPO does; any other key is an error naming it."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ConfigError(f"expected a mapping (JSON text on the command line), got {value!r}") from None
    if value is None:
        return {}, None
    if not isinstance(value, dict):
        raise ConfigError(f"expected a mapping of generation settings, got {value!r}")
    if value.get("do_sample", True) is not True:
        raise ConfigError("do_sample false: GRPO samples its completions (temperature 0 would make a group's "
                          "completions one answer repeated)")
    unknown = sorted(set(value) - set(GENERATION_KWARGS) - {"do_sample"})
    if unknown:
        raise ConfigError(f"{', '.join(map(repr, unknown))}: not a setting of paddle_r1's rollout, which takes "
                          f"{', '.join([*GENERATION_KWARGS, 'do_sample'])}")
    mapped = {GENERATION_KWARGS[name]: setting for name, setting in value.items() if name != "do_sample"}
    return mapped, f"read as {', '.join(f'{k}: {v}' for k, v in mapped.items()) or 'nothing to change'}"


def _chat_template_kwargs(value, given):
    if value:
        raise ConfigError("not offered: prompts are the checkpoint's chat template as it is, with no keyword "
                          "arguments; put what the prompt should say in question_template or system_prompt")
    return {}, "empty: nothing to pass"


def _use_vllm(value, given):
    if value is True:
        raise ConfigError("paddle_r1 rolls out with its own decode step on Paddle (vLLM runs on PyTorch; a "
                          "checkpoint can be served by vLLM: docs/reference.md, Serve); leave use_vllm out")
    return {}, "false: the rollout is paddle_r1's own decode step"


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
    # TRL's correction of the mismatch between vLLM's sampler and the training forward: here, this project's rollout
    "vllm_importance_sampling_correction": SourceKey(TRL, _alias("importance_sampling_correction")),
    "vllm_importance_sampling_mode": SourceKey(TRL, _alias("importance_sampling_mode")),
    "vllm_importance_sampling_clip_max": SourceKey(TRL, _alias("importance_sampling_clip_max")),
    "vllm_importance_sampling_clip_min": SourceKey(TRL, _alias("importance_sampling_clip_min")),
    "vllm_importance_sampling_cap": SourceKey(TRL, _alias("importance_sampling_clip_max")),  # TRL's deprecated name
    "generation_kwargs": SourceKey(TRL, _generation_kwargs),
    "use_vllm": SourceKey(TRL, _use_vllm),
    "chat_template_kwargs": SourceKey(TRL, _chat_template_kwargs),
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
