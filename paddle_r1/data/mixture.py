"""Dataset mixtures: a yaml listing sources and how many records to take from each (seed 000,
PaddleMIX ``data_config/rec.yaml``)::

    datasets:
      - json_path: data/refcoco_train.jsonl
        sampling_strategy: "random:50%"     # all | first:N | end:N | random:N | first:10% | ...
        image_root: data/coco                # optional
        reward_method: iou                   # optional: for rows that name none
        format: rec                          # optional: else detected from the fields
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Optional

import numpy as np
import yaml

from ..config.reading.files import DuplicateKey, load_yaml
from .samples import DataError

ENTRY_KEYS = {"json_path", "sampling_strategy", "image_root", "reward_method", "format"}
_STRATEGY = re.compile(r"^(first|end|random):(\d+(?:\.\d+)?)(%?)$")


@dataclass
class Source:
    path: str
    sampling_strategy: str = "all"
    image_root: Optional[str] = None
    reward_method: Optional[str] = None
    format: Optional[str] = None


def check_strategy(strategy: str, where: str) -> None:
    if strategy != "all" and not _STRATEGY.match(strategy):
        raise DataError(f"{where}: sampling_strategy {strategy!r} is not all, first:N, end:N, random:N "
                        "or a percentage such as random:50%")


def sample_indices(count: int, strategy: str, seed: int) -> list[int]:
    """Indices of the records a strategy keeps, in file order; random picks are seeded."""
    if strategy == "all":
        return list(range(count))
    kind, amount, percent = _STRATEGY.match(strategy).groups()
    n = round(count * float(amount) / 100) if percent else int(float(amount))
    n = max(0, min(n, count))
    if kind == "first":
        return list(range(n))
    if kind == "end":
        return list(range(count - n, count))
    return sorted(np.random.default_rng(seed).choice(count, size=n, replace=False).tolist())


def _read_yaml(path: str):
    """A mixture yaml's values, read as config files are (``load_yaml``): a key given twice (``datasets:`` twice,
    where two mixtures were pasted into one) is an error naming both lines, not the last list alone."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        return load_yaml(text)
    except DuplicateKey as e:
        raise DataError(f"{path}: {e}") from None
    except yaml.YAMLError as e:
        raise DataError(f"{path}: cannot parse yaml: {e}") from e


def is_mixture(path: str) -> bool:
    """Whether the yaml at ``path`` is a mixture (a mapping with ``datasets:``) rather than a config file."""
    try:
        values = _read_yaml(path)
    except (OSError, UnicodeDecodeError, DataError):
        return False
    return isinstance(values, dict) and "datasets" in values


def read_mixture(path: str) -> list[Source]:
    config = _read_yaml(path)
    entries = config.get("datasets") if isinstance(config, dict) else None
    if not isinstance(entries, list) or not entries:
        raise DataError(f"{path}: expected a 'datasets:' list of entries with json_path")
    base = os.path.dirname(path)
    sources = []
    for i, entry in enumerate(entries):
        where = f"{path}: datasets[{i}]"
        if not isinstance(entry, dict) or "json_path" not in entry:
            raise DataError(f"{where}: each entry needs a json_path")
        unknown = sorted(set(entry) - ENTRY_KEYS)
        if unknown:
            raise DataError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}")
        strategy = str(entry.get("sampling_strategy", "all"))
        check_strategy(strategy, where)
        data_path = entry["json_path"]
        if not os.path.isabs(data_path) and not os.path.exists(data_path):
            data_path = os.path.join(base, data_path)  # relative to the yaml when not to the working dir
        sources.append(Source(path=data_path, sampling_strategy=strategy, image_root=entry.get("image_root"),
                              reward_method=entry.get("reward_method"), format=entry.get("format")))
    return sources
