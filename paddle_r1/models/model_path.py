"""Where a model comes from, a local folder or a hub id (org/name), checked without importing Paddle: the commands
check ``model_name_or_path`` right after reading their config, so a wrong path is one line before any import."""
from __future__ import annotations

import os
import re

# a hub id: org/name, each starting with a letter or digit (so "./model" and "/abs/model" are paths)
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")


def check_model_path(path: str) -> None:
    """Fail before any hub lookup when ``path`` is no folder and is not a hub id (org/name), or is one whose first
    part is a local folder (``models/Qwen2.5-VL-3B`` beside a ``models/`` folder means a folder, not the hub)."""
    if os.path.isdir(path):
        return
    if HUB_ID.fullmatch(path) is None or os.path.isdir(path.split("/")[0]):
        raise FileNotFoundError(f"model folder not found: {path}")


def check_model_key(path: str) -> None:
    """The config key ``model_name_or_path``, when set, is a folder or a hub id (``check_model_path``). The commands
    call this before importing Paddle; ``trainer.job.check_before_loading`` names an unset key, and checks the
    trackers and the device before the model folder."""
    if not path:
        return
    try:
        check_model_path(path)
    except FileNotFoundError as e:
        raise naming_the_model_key(e) from None


def naming_the_model_key(error: FileNotFoundError) -> FileNotFoundError:
    """``error`` (the model folder or its config.json not found) as a message naming the config key."""
    return FileNotFoundError(f"config key 'model_name_or_path': {error}")
