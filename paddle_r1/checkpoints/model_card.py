"""``README.md`` of a checkpoint: the model card a hub page shows when the folder is published as it is.

A folder uploaded without one shows an empty page, and the facts a reader needs to reuse the model (what it was
trained from, on what, rewarded for what, with which algorithm settings, and how it scored on held-out data) are
then only in the run's config and logs, which are not uploaded. The card is generated from the run's config and
its ``metrics.jsonl`` at every save, so it states only what the run did and logged: no claims, no templates to fill.

The YAML front matter is the hub's: ``base_model`` (only when ``model_name_or_path`` is a hub id: a local folder's
hub id is not known, and guessing it from the folder's name is how PaddleMIX's eval went wrong), ``library_name``
(the folder loads with transformers' ``from_pretrained``), ``pipeline_tag`` and ``tags``.
"""
from __future__ import annotations

import json
import os

import yaml

from ..models.model_path import HUB_ID

CARD = "README.md"
# the settings that say which algorithm ran, in this order, when the job has them (GRPO's; SFT has the first few)
ALGORITHM_KEYS = ("learning_rate", "per_device_train_batch_size", "gradient_accumulation_steps", "dtype",
                  "freeze_vision", "min_pixels", "max_pixels", "num_generations", "max_completion_length",
                  "temperature", "loss_type", "beta", "epsilon", "epsilon_high", "num_iterations", "scale_rewards",
                  "adv_estimator", "importance_sampling_level", "mask_truncated_completions", "sync_ref_model")
LORA_KEYS = ("lora_rank", "lora_alpha", "lora_dropout", "lora_target_modules")


def write_model_card(folder: str, config, job: str, family: str, step: int, total_steps: int,
                     metrics_path: str) -> None:
    """``folder/README.md`` for step ``step`` of ``total_steps`` of a ``job`` ("GRPO", "SFT") run of ``config``,
    with the held-out scores ``metrics_path`` (the run's metrics.jsonl) holds up to that step."""
    source = config.model_name_or_path
    front = {"base_model": source} if HUB_ID.fullmatch(source) and not os.path.isdir(source) else {}
    front.update(library_name="transformers", pipeline_tag="image-text-to-text",
                 tags=["paddle_r1", job.lower(), family])
    lines = ["---", yaml.safe_dump(front, sort_keys=False).rstrip(), "---", "",
             f"# {os.path.basename(os.path.normpath(config.output_dir))}: checkpoint-{step}", "",
             f"{job} fine-tune of {_base_model_words(source, front)}, trained with paddle_r1 for {step} of "
             f"{total_steps} steps.", "",
             *_bullets("Data", _data(config)),
             *_bullets("Rewards", _rewards(config)),
             *_bullets("Settings", [f"`{key}`: {_value(getattr(config, key))}" for key in _settings(config)]),
             "## Held-out scores", "", *_scores(config, metrics_path, step)]
    with open(os.path.join(folder, CARD), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def _base_model_words(source: str, front: dict) -> str:
    if "base_model" in front:
        return f"[{source}](https://huggingface.co/{source})"
    return (f"the local model folder `{source}` (its hub id is not recorded: add `base_model: <hub id>` to the front "
            "matter before publishing)")


def _bullets(title: str, items: list[str]) -> list[str]:
    return [f"## {title}", "", *(f"- {item}" for item in items), ""] if items else []


def _data(config) -> list[str]:
    items = []
    if getattr(config, "dataset_name", None):
        items.append(f"built-in set `{config.dataset_name}`")
    if getattr(config, "data_path", None):
        fmt = f" (format `{config.data_format}`)" if getattr(config, "data_format", None) else ""
        items.append(f"`{config.data_path}`{fmt}")
    if getattr(config, "eval_data_path", None):
        items.append(f"held out: `{config.eval_data_path}`, scored by `{config.eval_reward}`")
    return items


def _rewards(config) -> list[str]:
    names = list(getattr(config, "reward_funcs", None) or [])
    weights = getattr(config, "reward_weights", None) or [1.0] * len(names)
    kwargs = getattr(config, "reward_kwargs", None) or {}
    return [f"`{name}`, weight {weight:g}" + (f", settings {json.dumps(kwargs[name])}" if name in kwargs else "")
            for name, weight in zip(names, weights)]


def _settings(config) -> list[str]:
    keys = ALGORITHM_KEYS + (LORA_KEYS if getattr(config, "lora", False) else ())
    return [key for key in keys if getattr(config, key, None) is not None]


def _value(value) -> str:
    return json.dumps(value) if isinstance(value, (list, dict, bool)) or value is None else str(value)


def _scores(config, metrics_path: str, step: int) -> list[str]:
    """A table of the ``eval/score`` rows of metrics.jsonl up to ``step`` (step 0: before training)."""
    rows = []
    if os.path.isfile(metrics_path):
        with open(metrics_path, encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                if "eval/score" in row and row["step"] <= step:
                    rows.append(row)
    if not rows:
        return ["None logged up to this step" + ("" if getattr(config, "eval_data_path", None)
                                                 else " (no eval_data_path was given)") + "."]
    eval_reward = getattr(config, "eval_reward", "")
    return [f"| step | held-out score (`{eval_reward}`) |", "|---|---|",
            *(f"| {row['step']} | {row['eval/score']:.4f} |" for row in rows)]
