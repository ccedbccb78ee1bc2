"""Checkpoints: a folder ``from_pretrained`` loads as it is, plus the state an exact resume needs.

``checkpoint-N/`` holds the model (config, safetensors), the processor files (tokenizer, chat
template, preprocessor config: the source model's own, ``models/source_files.py``), a model
card, ``optimizer.pdopt`` (AdamW moments and the LR scheduler, keyed by
structured parameter names so they survive a new process; with sharding one ``optimizer.shardR.pdopt``
per rank, each holding that rank's share) and ``rng_state.pkl`` (both ``training_state.py``'s), ``trainer_state.json``
(step and data position) and, when needed, ``ref_model/`` and the rollout buffer. It is written to
``checkpoint-N.tmp`` and renamed only when complete, so an interrupted save never leaves a
half-written newest checkpoint. Re-saving a step moves the old folder aside (``checkpoint-N.old``) before the new
one is renamed in, so a complete copy of step N exists at every instant; listing and resuming accept the aside
copy while it is the only one.

Checkpoints are ordered by when they were written (``save_order`` in ``trainer_state.json``), not by step: after
a resume from an older step, the resumed run's new checkpoints are the newest, and rotation
(``save_total_limit``) and ``--resume latest`` follow them rather than a higher step left by the abandoned run.

Each checkpoint carries ``manifest.json`` (``manifest.py``), and is verified before it is used: resuming checks
every file against it and parses the small ones a resume reads (``verify_checkpoint``); ``latest`` passes over a
checkpoint that fails, saying which and why, and an explicitly named one is refused.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import pickle
import re
import shutil
from typing import Optional

from ..errors import ConfigError
from .manifest import MANIFEST_FILE, CheckpointError, broken, check_manifest, files_under, has_manifest, write_manifest

STATE_FILE = "trainer_state.json"
RNG_FILE = "rng_state.pkl"
MANIFEST_KEY = "manifest"  # in trainer_state.json: the manifest written with it (so a deleted one is noticed)
ORDER_KEY = "save_order"  # in trainer_state.json: how many saves into output_dir came before this one
ASIDE = ".old"  # checkpoint-N.old: the previous checkpoint-N while its replacement is renamed in
_CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)(\.old)?$")
class NoSpaceError(OSError):
    """The disk filled while saving: the partial folder is removed and the message names the checkpoint to
    resume from."""


def checkpoint_dir(output_dir: str, step: int) -> str:
    return os.path.join(output_dir, f"checkpoint-{step}")


def begin_checkpoint(output_dir: str, step: int) -> str:
    """A fresh ``checkpoint-N.tmp`` folder to write into."""
    tmp = checkpoint_dir(output_dir, step) + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    return tmp


def _folder_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names
               if not os.path.islink(os.path.join(root, name)))


def remove_unfinished_checkpoints(output_dir: str, echo=print) -> list[str]:
    """Remove the ``checkpoint-N.tmp`` folders a save cut short left (kill -9, a full disk, the grace period of a
    stop), each said through ``echo`` with its size: never resumed from, they would hold the disk space a next save
    may need. Called at a run's start, before anything saves."""
    if not os.path.isdir(output_dir):
        return []
    removed = []
    for name in sorted(os.listdir(output_dir)):
        path = os.path.join(output_dir, name)
        if name.startswith("checkpoint-") and name.endswith(".tmp") and os.path.isdir(path):
            size = _folder_bytes(path)
            shutil.rmtree(path)
            echo(f"removed {path} ({size / 2 ** 20:.1f} MiB), left by a save that did not finish")
            removed.append(path)
    return removed


RUN_LOGS = ("metrics.jsonl", "completions.jsonl")
TRACKER_FOLDERS = ("visualdl",)  # a tracker's folder of the run's curves, which a second run would add to


def previous_run(output_dir: str) -> list[str]:
    """What a run left in ``output_dir``, by name: its checkpoint folders (complete or aside; a ``.tmp`` one a cut save
    left is removed at every start) and its logs that hold rows."""
    if not os.path.isdir(output_dir):
        return []
    names = sorted(os.listdir(output_dir), key=lambda name: (len(name), name))
    checkpoints = [n for n in names if _CHECKPOINT_RE.match(n) and os.path.isdir(os.path.join(output_dir, n))]
    logs = [n for n in RUN_LOGS if os.path.isfile(os.path.join(output_dir, n))
            and os.path.getsize(os.path.join(output_dir, n)) > 0]
    return checkpoints + logs


def claim_for_fresh_start(output_dir: str, overwrite: bool, echo=print) -> None:
    """A fresh start's ``output_dir``. One that holds another run (``previous_run``) is a ``ConfigError``: the new
    run's logs would follow the old one's rows (``plot`` and ``view`` would read two histories as one) and its saves
    replace the old checkpoints one by one. With ``overwrite`` (TRL's ``overwrite_output_dir``) that run's
    checkpoints, logs and tracker folders are removed first, said through ``echo``."""
    found = previous_run(output_dir)
    if not found:
        return
    if not overwrite:
        shown = ", ".join(found if len(found) <= 4 else found[:3] + ["...", found[-1]])
        raise ConfigError(f"config key 'output_dir': {output_dir} holds another run ({shown}); "
                          "resume_from_checkpoint latest (paddle-r1 train --resume latest) continues it, "
                          "overwrite_output_dir true removes it and starts over, or give another output_dir",
                          keys=("output_dir",))
    for name in found + [n for n in TRACKER_FOLDERS if os.path.isdir(os.path.join(output_dir, n))]:
        path = os.path.join(output_dir, name)
        if os.path.isdir(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    echo(f"overwrite_output_dir: removed the previous run in {output_dir} ({', '.join(found)})")


def _is_disk_full(error: BaseException) -> bool:
    """ENOSPC, raised as it is or wrapped by a library (its cause or context)."""
    while error is not None:
        if isinstance(error, OSError) and error.errno == errno.ENOSPC:
            return True
        error = error.__cause__ or error.__context__
    return False


@contextlib.contextmanager
def removed_if_disk_fills(tmp: str):
    """Around writes into ``checkpoint-N.tmp``: if the disk fills, remove the partial folder and raise
    ``NoSpaceError`` saying which complete checkpoint a resume would use."""
    try:
        yield
    except NoSpaceError:
        raise
    except Exception as e:
        if not _is_disk_full(e):
            raise
        shutil.rmtree(tmp, ignore_errors=True)
        found = list_checkpoints(os.path.dirname(tmp))
        newest = f"{os.path.basename(found[-1])} is the newest complete one" if found else \
            "there is no complete checkpoint yet"
        name = os.path.basename(tmp)[:-len(".tmp")]
        raise NoSpaceError(errno.ENOSPC, f"no space left while saving {name}; {newest}") from e


def finish_checkpoint(tmp: str, final: str, *, write_model, policy, optimizer, trainer_state: dict,
                      reference=None, save_total_limit: Optional[int] = None) -> str:
    """Write the model folder (``write_model(folder)``: weights, config, processor files, model card), optimizer
    (None: each rank wrote its shard), RNG and trainer state (plus its ``save_order``) into ``tmp``, then the manifest
    of all of it, then put it in place of ``final`` and keep the ``save_total_limit`` most recently written
    checkpoints."""
    from .training_state import rng_state, save_optimizer  # Paddle's: listing and verifying need none

    output_dir = os.path.dirname(final)
    with removed_if_disk_fills(tmp):
        write_model(tmp)
        if reference is not None:
            reference.save_pretrained(os.path.join(tmp, "ref_model"))
        if optimizer is not None:
            save_optimizer(tmp, optimizer, policy)
        with open(os.path.join(tmp, RNG_FILE), "wb") as f:
            pickle.dump(rng_state(), f)
        for junk in os.listdir(tmp):  # paddleformers' save-completion markers
            if junk.startswith("saved_signal_"):
                os.remove(os.path.join(tmp, junk))
        with open(os.path.join(tmp, STATE_FILE), "w", encoding="utf-8") as f:
            json.dump({**trainer_state, ORDER_KEY: _next_save_order(output_dir), MANIFEST_KEY: MANIFEST_FILE}, f,
                      indent=2)
        write_manifest(tmp)  # last: every file of every rank is in place
    _replace(tmp, final)
    if save_total_limit:
        for old in list_checkpoints(output_dir)[:-save_total_limit]:
            _remove_checkpoint(old)
    return final


def _replace(tmp: str, final: str) -> None:
    """Rename ``tmp`` to ``final`` without a moment where neither is complete: an existing ``final`` is moved
    aside first and deleted only once the new one is in place."""
    aside = final + ASIDE
    if os.path.exists(final):
        shutil.rmtree(aside, ignore_errors=True)  # left by a kill after the last rename-in: final supersedes it
        os.replace(final, aside)
    os.replace(tmp, final)
    shutil.rmtree(aside, ignore_errors=True)


def _remove_checkpoint(path: str) -> None:
    """A rotated-out checkpoint and any aside copy of the same step."""
    final = path[:-len(ASIDE)] if path.endswith(ASIDE) else path
    shutil.rmtree(final, ignore_errors=True)
    shutil.rmtree(final + ASIDE, ignore_errors=True)


def _read_state(path: str) -> Optional[dict]:
    """A folder's trainer state, or None when it has none or it is unreadable (not a complete checkpoint). Its
    values are checked when the checkpoint is verified."""
    try:
        return _read_json(path, STATE_FILE)
    except (OSError, ValueError):
        return None


def _checkpoint_folders(output_dir: str) -> list[tuple[int, str]]:
    """(step, folder) of every ``checkpoint-N`` and ``checkpoint-N.old``; checkpoint-N sorts before its aside copy."""
    if not os.path.isdir(output_dir):
        return []
    matches = ((_CHECKPOINT_RE.match(name), name) for name in sorted(os.listdir(output_dir)))
    return [(int(match.group(1)), os.path.join(output_dir, name)) for match, name in matches if match]


def _complete_checkpoints(output_dir: str) -> list[tuple[tuple[int, int], str]]:
    """((save order, step), folder) of each complete checkpoint, one per step: ``checkpoint-N``, or its aside
    copy when a replacement was cut off before being renamed in. Checkpoints written before ``save_order``
    existed come first, by step."""
    by_step: dict[int, tuple[tuple[int, int], str]] = {}
    for step, path in _checkpoint_folders(output_dir):  # a complete final folder wins over its aside copy
        state = _read_state(path)
        if state is not None:
            by_step.setdefault(step, ((state.get(ORDER_KEY, -1), step), path))
    return sorted(by_step.values())


def _unreadable_checkpoints(output_dir: str) -> list[str]:
    """Renamed-in checkpoints (they hold a trainer state or a manifest) whose trainer state cannot be read: not
    listed, since their save order is unknown, but reported when resuming from ``latest``."""
    return [path for _, path in _checkpoint_folders(output_dir)
            if (os.path.exists(os.path.join(path, STATE_FILE)) or has_manifest(path)) and _read_state(path) is None]


def _next_save_order(output_dir: str) -> int:
    return max((order for (order, _), _ in _complete_checkpoints(output_dir)), default=-1) + 1


def list_checkpoints(output_dir: str) -> list[str]:
    """Complete checkpoints (renamed, with a trainer state), oldest written first. Not verified: hashing every
    checkpoint at every save would cost minutes; ``resolve_checkpoint`` verifies the one it picks."""
    return [path for _, path in _complete_checkpoints(output_dir)]


def resolve_checkpoint(spec: str, output_dir: str, echo=print) -> Optional[str]:
    """The checkpoint to resume from, verified (``verify_checkpoint``). ``"latest"``: the most recently written
    complete checkpoint in output_dir that verifies, each one passed over said through ``echo`` with why (one whose
    trainer state cannot be read, so whose place in the order is unknown, is reported first). ``"auto"``: the same
    when output_dir holds a complete checkpoint, else None (a fresh start), as VLM-R1 resumes by itself; said in one
    line either way. A path: that folder (or its aside copy, when a re-save of that step was cut off before renaming
    the new one in), refused with ``CheckpointError`` when it fails."""
    if spec == "auto":
        if not os.path.isdir(output_dir) or not (list_checkpoints(output_dir) or _unreadable_checkpoints(output_dir)):
            echo(f"resume_from_checkpoint auto: no complete checkpoint in {output_dir}, starting fresh")
            return None
        path = _newest_verified(output_dir, echo)
        echo(f"resume_from_checkpoint auto: resuming from {path}")
        return path
    if spec == "latest":
        return _newest_verified(output_dir, echo)
    aside = spec.rstrip("/\\") + ASIDE
    path = aside if not os.path.exists(spec) and _read_state(aside) is not None else spec
    if not os.path.isfile(os.path.join(path, STATE_FILE)) and not has_manifest(path):
        raise FileNotFoundError(f"resume_from_checkpoint: {spec} is not a complete checkpoint (no {STATE_FILE})")
    try:
        verify_checkpoint(path, echo=echo)
    except CheckpointError as e:
        raise CheckpointError(f"resume_from_checkpoint: {e}") from None
    return path


def _newest_verified(output_dir: str, echo) -> str:
    candidates = _unreadable_checkpoints(output_dir) + list_checkpoints(output_dir)[::-1]
    if not candidates:
        raise FileNotFoundError(f"resume_from_checkpoint: no complete checkpoint in {output_dir}")
    failures = []
    for path in candidates:
        try:
            verify_checkpoint(path, echo=echo)
        except CheckpointError as e:
            echo(f"resume_from_checkpoint latest: skipping {e}")
            failures.append(str(e))
            continue
        if failures:
            echo(f"resume_from_checkpoint latest: resuming from {path}, the newest checkpoint that verifies")
        return path
    raise CheckpointError(f"resume_from_checkpoint latest: no checkpoint in {output_dir} verifies: "
                          + " | ".join(failures))


# files a model load (eval, serve) does not read: optimizer and RNG state, rank files, the reference model
_TRAINING_ONLY = re.compile(r"^ref_model/|\.(pdopt|pdparams|pkl)$")


def verify_checkpoint(path: str, model_only: bool = False, echo=print) -> None:
    """Raise ``CheckpointError`` naming the checkpoint and the file unless ``path`` can be used as it is: every
    file its manifest records is present with its size and SHA-256, then the files read first are parsed (the
    trainer state and its step, the RNG state, config.json, each safetensors header against its file's size, the
    weight files an index names). ``model_only`` (eval, serve): only what loading the model reads.

    A folder without a manifest is parsed only: a checkpoint saved before checkpoints carried one is said so through
    ``echo``; a published model folder has none to expect. A hub id (no local folder) is the hub's business."""
    if not os.path.isdir(path):
        return
    state_present = os.path.exists(os.path.join(path, STATE_FILE))
    if has_manifest(path):
        check_manifest(path, skip=_TRAINING_ONLY.search if model_only else None)
    elif state_present:
        if (_read_state(path) or {}).get(MANIFEST_KEY):
            raise broken(path, f"{MANIFEST_FILE}: missing ({STATE_FILE} says one was saved with it)")
        echo(f"{path}: no {MANIFEST_FILE} (saved before checkpoints carried one): its files are parsed, not verified")
    if not model_only:
        load_trainer_state(path)
        read_rng_state(path)
    elif state_present:  # eval reads the training template from it
        _read_json(path, STATE_FILE)
    _read_json(path, "config.json")
    _check_weight_files(path, model_only)


def _check_weight_files(path: str, model_only: bool) -> None:
    """Every safetensors file opens (its header parses and covers the file: a truncated file fails) and every file
    an index's ``weight_map`` names exists."""
    from safetensors import SafetensorError, safe_open

    problems = []
    for name in files_under(path):
        if model_only and _TRAINING_ONLY.search(name):
            continue
        if name.endswith(".safetensors"):
            try:
                with safe_open(os.path.join(path, name), framework="np"):
                    pass
            except SafetensorError as e:
                problems.append(f"{name}: unreadable ({e})")
        elif name.endswith(".safetensors.index.json"):
            folder = os.path.dirname(name)
            weight_map = _read_json(path, name).get("weight_map", {})
            problems += [f"{os.path.join(folder, shard)}: missing (named by {name})"
                         for shard in sorted(set(weight_map.values()))
                         if not os.path.isfile(os.path.join(path, folder, shard))]
    if problems:
        raise broken(path, *problems)


def _read_json(path: str, name: str) -> dict:
    """The JSON object in ``path/name``; ``CheckpointError`` naming it when it is missing, empty or not one."""
    file = os.path.join(path, name)
    try:
        with open(file, encoding="utf-8") as f:
            value = json.load(f)
    except FileNotFoundError:
        raise broken(path, f"{name}: missing") from None
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise broken(path, f"{name}: empty" if os.path.getsize(file) == 0 else f"{name}: not valid JSON ({e})") \
            from None
    if not isinstance(value, dict):
        raise broken(path, f"{name}: not a JSON object")
    return value


def load_trainer_state(path: str) -> dict:
    state = _read_json(path, STATE_FILE)
    step = state.get("global_step")
    if type(step) is not int or step < 0:
        raise broken(path, f"{STATE_FILE}: global_step is {step!r}, not a whole number of steps")
    return state


def read_rng_state(path: str) -> dict:
    """The saved RNG state. Any failure to unpickle the file is the file's (truncated, overwritten), not a bug:
    unpickling damaged bytes raises almost any exception type."""
    file = os.path.join(path, RNG_FILE)
    try:
        with open(file, "rb") as f:
            state = pickle.load(f)
    except FileNotFoundError:
        raise broken(path, f"{RNG_FILE}: missing") from None
    except Exception as e:  # noqa: BLE001 -- see the docstring
        raise broken(path, f"{RNG_FILE}: unreadable ({type(e).__name__}: {e})") from None
    if not isinstance(state, dict) or not {"paddle", "numpy", "python"} <= set(state):
        raise broken(path, f"{RNG_FILE}: not an RNG state (paddle, numpy, python)")
    return state
