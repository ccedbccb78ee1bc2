"""What an evaluation command names, found before Paddle loads: the model folders (a run's output folder stands for
its checkpoints) and each dataset's benchmark file, so that a wrong name stops the command in a second instead of
after the models before it were loaded and evaluated."""
from __future__ import annotations

import os
import re

from ..checkpoints.folders import list_checkpoints


def checkpoint_label(model_path: str) -> str:
    """"step 300" for .../checkpoint-300, else the folder's name."""
    name = os.path.basename(os.path.normpath(model_path))
    match = re.fullmatch(r"checkpoint-(\d+)", name)
    return f"step {match.group(1)}" if match else name


def expand_model_paths(paths: list[str]) -> list[str]:
    """A training run's output folder stands for its checkpoints, in the order the run wrote them."""
    expanded = []
    for path in paths:
        found = [] if os.path.isfile(os.path.join(path, "config.json")) else list_checkpoints(path)
        expanded.extend(found or [path])
    return expanded


def benchmark_file(data_root: str, dataset: str) -> str:
    """``DATA_ROOT/<dataset>.json``, else ``.jsonl``; FileNotFoundError naming both when neither is there."""
    for extension in (".json", ".jsonl"):
        candidate = os.path.join(data_root, dataset + extension)
        if os.path.isfile(candidate):
            return candidate
    raise FileNotFoundError(f"no {dataset}.json or {dataset}.jsonl in {data_root}")
