"""A checkpoint's manifest: the size and SHA-256 of every file in the folder, written last at save and checked before
the checkpoint is used (resume, eval, serve).

Without it a flipped byte in the weights or the optimizer state loads without complaint and the run continues from
numbers nobody saved. The manifest is written once everything else is in the ``checkpoint-N.tmp`` folder (each
rank's shard included), through a temporary file renamed into place, before the folder itself is renamed in.

Files are hashed on a few threads (hashlib releases the GIL on large buffers): a 7B checkpoint is about 100 GB, and
its shards hash side by side. ``benchmarks/checkpoint_hashing.py`` measures the rate.
"""
from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Optional

MANIFEST_FILE = "manifest.json"
MANIFEST_VERSION = 1
MAX_HASH_THREADS = 8


class CheckpointError(ValueError):
    """A checkpoint that cannot be used as it is (see ``broken``), or none that can."""


def broken(checkpoint: str, *problems: str) -> CheckpointError:
    """The error for ``checkpoint``: one message naming it and each file at fault with what is wrong (missing,
    size, hash, unparseable)."""
    return CheckpointError(f"checkpoint {checkpoint}: {'; '.join(problems)}")


def sha256_of(path: str) -> str:
    """hashlib's own file loop (256 KiB reads into one buffer): 16 MiB reads were no faster here
    (``benchmarks/checkpoint_hashing.py``)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def sha256_of_files(folder: str, names: list[str], threads: Optional[int] = None) -> dict[str, str]:
    """{relative name: SHA-256} of ``names`` under ``folder``, several files at once."""
    threads = threads or max(1, min(len(names), os.cpu_count() or 1, MAX_HASH_THREADS))
    with ThreadPoolExecutor(threads) as pool:
        digests = pool.map(lambda name: sha256_of(os.path.join(folder, name)), names)
        return dict(zip(names, digests))


def files_under(folder: str) -> list[str]:
    """Every file under ``folder`` as a relative path with ``/`` separators, sorted; the manifest left out."""
    found = []
    for root, _, files in os.walk(folder):
        for name in files:
            relative = os.path.relpath(os.path.join(root, name), folder).replace(os.sep, "/")
            if relative not in (MANIFEST_FILE, MANIFEST_FILE + ".tmp"):
                found.append(relative)
    return sorted(found)


def write_manifest(folder: str) -> str:
    """Record every file under ``folder`` (relative path, size, SHA-256) in ``folder/manifest.json``."""
    names = files_under(folder)
    digests = sha256_of_files(folder, names)
    manifest = {"version": MANIFEST_VERSION,
                "files": {name: {"size": os.path.getsize(os.path.join(folder, name)), "sha256": digests[name]}
                          for name in names}}
    path = os.path.join(folder, MANIFEST_FILE)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)
    return path


def has_manifest(folder: str) -> bool:
    return os.path.isfile(os.path.join(folder, MANIFEST_FILE))


def _read_manifest(folder: str) -> dict:
    path = os.path.join(folder, MANIFEST_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            files = json.load(f)["files"]
        if not all(isinstance(e.get("size"), int) and isinstance(e.get("sha256"), str) for e in files.values()):
            raise ValueError("an entry lacks its size or sha256")
        return files
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise broken(folder, f"{MANIFEST_FILE}: unreadable ({type(e).__name__}: {e})") from None


def check_manifest(folder: str, skip: Optional[Callable[[str], bool]] = None) -> None:
    """Raise ``CheckpointError`` listing every file the manifest records (except those ``skip`` names) that is
    missing, of another size, or whose SHA-256 differs. Files are hashed only once all sizes match: a checkpoint
    already known to be broken is not read through. Files not in the manifest are not checked."""
    expected = {name: entry for name, entry in _read_manifest(folder).items() if skip is None or not skip(name)}
    problems = []
    for name, entry in expected.items():
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            problems.append(f"{name}: missing")
        elif os.path.getsize(path) != entry["size"]:
            problems.append(f"{name}: {os.path.getsize(path)} bytes, {entry['size']} when saved")
    if not problems:
        digests = sha256_of_files(folder, list(expected))
        problems = [f"{name}: SHA-256 differs from the manifest's (the file changed after it was saved)"
                    for name, entry in expected.items() if digests[name] != entry["sha256"]]
    if problems:
        raise broken(folder, *problems)
