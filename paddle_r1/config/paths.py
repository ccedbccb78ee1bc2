"""The folders a job or a command writes, checked before any model loads (nothing here imports Paddle)."""
from __future__ import annotations

import os
import tempfile
from typing import Optional

from ..errors import ConfigError


def file_in_the_way(path: str) -> Optional[str]:
    """The file that keeps ``path`` from being a folder: ``path`` itself or the nearest of its parents that exists,
    when that is not a folder; else None."""
    existing = path
    while existing and not os.path.exists(existing):
        existing = os.path.dirname(existing)
    return existing if existing and not os.path.isdir(existing) else None


def check_writable(folder: str, key: str, option: bool = False) -> None:
    """Create ``folder`` and write and remove a file in it, so that a read-only output folder is a message naming
    the config key ``key`` (``option``: the command's option ``--key``) now rather than an OSError at the first
    save. The probe file's name is unique per process: every rank of a distributed run checks at once."""
    try:
        os.makedirs(folder, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write_probe_"):
            pass
    except OSError as e:
        blocker = file_in_the_way(folder)
        reason = f"{blocker} is a file, not a folder" if blocker else e.strerror or e
        named = f"--{key}" if option else f"config key {key!r}"
        raise ConfigError(f"{named}: cannot write to {folder}: {reason}", keys=(key,)) from None
