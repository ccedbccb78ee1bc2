"""What every training job (GRPO, SFT) does before it loads a model: check the keys that need this machine (the
device, the model folder, the files named, a writable output folder), pick the device, read its samples (printing
the one-line report of skipped records) and, on several ranks, check that every rank read the same ones. A user
mistake found here costs seconds, not a model load."""
from __future__ import annotations

import hashlib
import json
from typing import Optional

import paddle

from ..config.paths import check_writable
from ..errors import ConfigError
from ..cpu_math import tune_cpu_math
from ..data.samples import SOURCE_KEY, DataError
from ..job_data import load_from_config
from ..models.coords import COORD_SYSTEMS
from ..models.families import check_video
from ..models.loading import model_family
from ..models.model_path import naming_the_model_key
from ..parallel.distributed import gather_objects
from ..telemetry.trackers import check_installed


def prepare_job(config, samples: Optional[list[dict]] = None) -> list[dict]:
    """The job's samples (``samples`` when given, else those its config names), after ``check_before_loading``."""
    check_before_loading(config)
    if samples is None:
        samples, report = load_from_config(config)
        if report.summary():
            print(report.summary())
    if not samples:
        raise ConfigError("the dataset is empty")
    if any(sample.get("videos") for sample in samples):  # every job carries clips; a family may read none
        check_video(model_family(config.model_name_or_path))
    return samples


def samples_digest(samples: list[dict]) -> str:
    """A hash of what the samples hold, their media paths left out (a node may mount the same data elsewhere)."""
    digest = hashlib.sha256()
    for sample in samples:
        kept = {key: value for key, value in sample.items() if key not in ("images", "videos")}
        digest.update(json.dumps(kept, sort_keys=True, default=str).encode() + b"\n")
    return digest.hexdigest()[:12]


def check_ranks_read_the_same_samples(samples: list[dict], world_size: int, what: str = "samples") -> None:
    """Every rank reads the job's data itself; a row one rank kept and another skipped (an image missing on one
    node's copy of the data, a data file that differs between nodes) would give the ranks different sample lists,
    and the sampler, which draws the same indices on every rank, would then split one prompt's group across different
    prompts: wrong advantages, with nothing to show it. One gather of each rank's count and hash before the model
    loads; if they differ, a second of each rank's row list names the first rows that differ, and every rank raises
    the same ``DataError`` (none waits for another). ``what``: the set, as the message names it."""
    if world_size == 1:
        return
    facts = gather_objects((len(samples), samples_digest(samples)), world_size, "the check of the loaded samples")
    if len(set(facts)) == 1:
        return
    rows = gather_objects([sample.get(SOURCE_KEY, f"sample {i}") for i, sample in enumerate(samples)], world_size,
                          "the rows of the loaded samples")
    lines = []
    for other in range(1, world_size):
        if facts[other] == facts[0]:
            continue
        theirs, ours = set(rows[other]), set(rows[0])
        lacks = [row for row in rows[0] if row not in theirs][:3]
        extra = [row for row in rows[other] if row not in ours][:3]
        difference = "; ".join(filter(None, [lacks and f"lacks {', '.join(lacks)}, which rank 0 kept",
                                             extra and f"kept {', '.join(extra)}, which rank 0 lacks"]))
        lines.append(f"rank {other}: {facts[other][0]} samples against rank 0's {facts[0][0]}; "
                     + (difference or "the same rows with other contents"))
    raise DataError(f"the ranks read different {what} from the same config (the data differ between machines, or "
                    "a file changed while they read it; each rank's log names the rows it skipped): "
                    + " | ".join(lines))


def check_before_loading(config) -> None:
    """The checks that need this machine, before any model loads: the model keys, the trackers' libraries, the
    device (and the job's rules that depend on it), the model folder and its family, a writable output folder."""
    if not config.model_name_or_path:
        raise ConfigError("config key 'model_name_or_path' is required")
    if config.coord_system is not None and config.coord_system not in COORD_SYSTEMS:
        raise ConfigError(f"config key 'coord_system': {config.coord_system!r} is not one of {COORD_SYSTEMS}")
    check_installed(config.trackers)
    device = config.device or ("gpu" if paddle.is_compiled_with_cuda() else "cpu")
    config.check_machine(device)
    if device == "cpu" and config.tune_cpu_math:
        tune_cpu_math()
    try:
        paddle.set_device(device)
    except ValueError as e:  # paddle's message lists the devices it knows
        raise ConfigError(f"config key 'device': {e}", keys=("device",)) from None
    try:
        model_family(config.model_name_or_path)
    except FileNotFoundError as e:  # no such folder, no config.json in it, or a hub id the hub could not give
        raise naming_the_model_key(e) from None
    check_writable(config.output_dir, "output_dir")
