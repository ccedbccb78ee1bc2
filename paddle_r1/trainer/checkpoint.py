"""Checkpoints: a folder ``from_pretrained`` loads as it is, plus the state an exact resume needs.

``checkpoint-N/`` holds the model (config, safetensors), the processor files (tokenizer, chat
template, preprocessor config), ``optimizer.pdopt`` (AdamW moments and the LR scheduler, keyed by
structured parameter names so they survive a new process; with sharding one ``optimizer.shardR.pdopt``
per rank, each holding that rank's share), ``rng_state.pkl``, ``trainer_state.json``
(step and data position) and, when needed, ``ref_model/`` and the rollout buffer. It is written to
``checkpoint-N.tmp`` and renamed only when complete, so an interrupted save never leaves a
half-written newest checkpoint.
"""
from __future__ import annotations

import json
import os
import pickle
import random
import re
import shutil
from typing import Optional

import numpy as np
import paddle

STATE_FILE = "trainer_state.json"
_CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
_OPTIMIZER_RE = re.compile(r"^optimizer(\.shard\d+)?\.pdopt$")


def _rename_by_prefix(key: str, names: dict[str, str]) -> str:
    """Replace the longest leading parameter name in an accumulator key (``<param>_moment1_0``)."""
    best = max((n for n in names if key == n or key.startswith(n + "_")), key=len, default=None)
    return key if best is None else names[best] + key[len(best):]


def optimizer_state(optimizer, model) -> dict:
    to_structured = {p.name: name for name, p in model.named_parameters()}
    state = {}
    for key, value in optimizer.state_dict().items():
        if key == "master_weights":
            value = {to_structured.get(k, k): v for k, v in value.items()}
        elif key != "LR_Scheduler":
            key = _rename_by_prefix(key, to_structured)
        state[key] = value
    return state


def load_optimizer_state(optimizer, model, state: dict) -> None:
    to_runtime = {name: p.name for name, p in model.named_parameters()}
    restored = {}
    for key, value in state.items():
        if key == "master_weights":
            value = {to_runtime.get(k, k): v for k, v in value.items()}
        elif key != "LR_Scheduler":
            key = _rename_by_prefix(key, to_runtime)
        restored[key] = value
    optimizer.set_state_dict(restored)


def save_optimizer(folder: str, optimizer, model, shard: Optional[int] = None) -> None:
    """``optimizer.pdopt``, or ``optimizer.shard<shard>.pdopt`` for one rank's share under sharding."""
    name = "optimizer.pdopt" if shard is None else f"optimizer.shard{shard}.pdopt"
    paddle.save(optimizer_state(optimizer, model), os.path.join(folder, name))


def read_optimizer_state(folder: str) -> dict:
    """The checkpoint's optimizer state, its shards merged: a run resumes on any number of ranks, sharded or not
    (a sharded optimizer keeps the entries of its own share)."""
    files = sorted(name for name in os.listdir(folder) if _OPTIMIZER_RE.match(name))
    if not files:
        raise FileNotFoundError(f"{folder}: no optimizer state (optimizer.pdopt or optimizer.shardN.pdopt)")
    state: dict = {}
    for name in files:
        for key, value in paddle.load(os.path.join(folder, name)).items():
            if key == "master_weights":
                state.setdefault(key, {}).update(value)
            else:
                state[key] = value
    return state


def rng_state() -> dict:
    return {"paddle": paddle.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def set_rng_state(state: dict) -> None:
    paddle.set_rng_state(state["paddle"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


def checkpoint_dir(output_dir: str, step: int) -> str:
    return os.path.join(output_dir, f"checkpoint-{step}")


def begin_checkpoint(output_dir: str, step: int) -> str:
    """A fresh ``checkpoint-N.tmp`` folder to write into."""
    tmp = checkpoint_dir(output_dir, step) + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    return tmp


def finish_checkpoint(tmp: str, final: str, *, write_model, policy, processor, optimizer, trainer_state: dict,
                      reference=None, save_total_limit: Optional[int] = None) -> str:
    """Write the model (``write_model(folder)``), processor, optimizer (None: each rank wrote its shard), RNG
    and trainer state into ``tmp``, then rename it to ``final``."""
    write_model(tmp)
    processor.save_pretrained(tmp)
    if reference is not None:
        reference.save_pretrained(os.path.join(tmp, "ref_model"))
    if optimizer is not None:
        save_optimizer(tmp, optimizer, policy)
    with open(os.path.join(tmp, "rng_state.pkl"), "wb") as f:
        pickle.dump(rng_state(), f)
    for junk in os.listdir(tmp):  # paddleformers' save-completion markers
        if junk.startswith("saved_signal_"):
            os.remove(os.path.join(tmp, junk))
    with open(os.path.join(tmp, STATE_FILE), "w", encoding="utf-8") as f:
        json.dump(trainer_state, f, indent=2)
    if os.path.exists(final):
        shutil.rmtree(final)
    os.replace(tmp, final)
    if save_total_limit:
        for old in list_checkpoints(os.path.dirname(final))[:-save_total_limit]:
            shutil.rmtree(old)
    return final


def list_checkpoints(output_dir: str) -> list[str]:
    """Complete checkpoints (renamed, with a trainer state), oldest first."""
    if not os.path.isdir(output_dir):
        return []
    found = []
    for name in os.listdir(output_dir):
        match = _CHECKPOINT_RE.match(name)
        path = os.path.join(output_dir, name)
        if match and os.path.isfile(os.path.join(path, STATE_FILE)):
            found.append((int(match.group(1)), path))
    return [path for _, path in sorted(found)]


def resolve_checkpoint(spec: str, output_dir: str) -> str:
    """``"latest"`` -> newest complete checkpoint in output_dir; a path -> that folder, checked."""
    if spec == "latest":
        found = list_checkpoints(output_dir)
        if not found:
            raise FileNotFoundError(f"resume_from_checkpoint: no complete checkpoint in {output_dir}")
        return found[-1]
    if not os.path.isfile(os.path.join(spec, STATE_FILE)):
        raise FileNotFoundError(f"resume_from_checkpoint: {spec} is not a complete checkpoint (no {STATE_FILE})")
    return spec


def load_trainer_state(path: str) -> dict:
    with open(os.path.join(path, STATE_FILE), encoding="utf-8") as f:
        return json.load(f)


def load_rng_state(path: str) -> None:
    with open(os.path.join(path, "rng_state.pkl"), "rb") as f:
        set_rng_state(pickle.load(f))
