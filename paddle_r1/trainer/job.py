"""What every training job (GRPO, SFT) does before it loads a model: check the model and coordinate keys,
pick the device, and read its samples (printing the one-line report of skipped records)."""
from __future__ import annotations

from typing import Optional

import paddle

from ..config import ConfigError
from ..data.loader import load_from_config
from ..models.coords import COORD_SYSTEMS


def prepare_job(config, samples: Optional[list[dict]] = None) -> list[dict]:
    """The job's samples (``samples`` when given, else those its config names); ConfigError before any loading."""
    if not config.model_name_or_path:
        raise ConfigError("config key 'model_name_or_path' is required")
    if config.coord_system is not None and config.coord_system not in COORD_SYSTEMS:
        raise ConfigError(f"config key 'coord_system': {config.coord_system!r} is not one of {COORD_SYSTEMS}")
    paddle.set_device(config.device or ("gpu" if paddle.is_compiled_with_cuda() else "cpu"))
    if samples is None:
        samples, report = load_from_config(config)
        if report.summary():
            print(report.summary())
    if not samples:
        raise ConfigError("the dataset is empty")
    return samples
