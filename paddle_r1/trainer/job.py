"""What every training job (GRPO, SFT) does before it loads a model: check the keys that need this machine (the
device, the model folder, the files named, a writable output folder), pick the device, and read its samples
(printing the one-line report of skipped records). A user mistake found here costs seconds, not a model load."""
from __future__ import annotations

from typing import Optional

import paddle

from ..config.paths import check_writable
from ..errors import ConfigError
from ..cpu_math import tune_cpu_math
from ..job_data import load_from_config
from ..models.coords import COORD_SYSTEMS
from ..models.families import check_video
from ..models.loading import model_family
from ..models.model_path import naming_the_model_key
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
