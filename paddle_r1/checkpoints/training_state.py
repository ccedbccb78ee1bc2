"""The training state a checkpoint holds beside the model, written and read with Paddle: the optimizer's (AdamW
moments, master weights and the LR scheduler, keyed by structured parameter names so that they survive a new process;
under sharding one file per rank) and the RNGs'. Kept apart from ``folders.py`` so that listing, verifying and
reading checkpoints does not import Paddle (``paddle-r1 view`` reads a run's folders and never needs it)."""
from __future__ import annotations

import os
import random
import re
from typing import Collection, Optional

import numpy as np
import paddle

from ..errors import ConfigError
from .folders import read_rng_state

_OPTIMIZER_RE = re.compile(r"^optimizer(\.shard\d+)?\.pdopt$")


def _owner(key: str, names) -> Optional[str]:
    """The parameter an accumulator key (``<param>_moment1_0``) belongs to: the longest of ``names`` it starts with."""
    return max((n for n in names if key == n or key.startswith(n + "_")), key=len, default=None)


def _rename_by_prefix(key: str, names: dict[str, str]) -> str:
    """Replace the parameter name an accumulator key starts with by ``names[that name]``."""
    owner = _owner(key, names)
    return key if owner is None else names[owner] + key[len(owner):]


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
    """Hand a state read by ``read_optimizer_state`` (host arrays) to the optimizer, which copies the moments into
    its own tensors; master weights are used as they are by paddle, so they become tensors on the device here."""
    to_runtime = {name: p.name for name, p in model.named_parameters()}
    restored = {}
    for key, value in state.items():
        if key == "master_weights":
            value = {to_runtime.get(k, k): paddle.to_tensor(v) for k, v in value.items()}
        elif key != "LR_Scheduler":
            key = _rename_by_prefix(key, to_runtime)
        restored[key] = value
    optimizer.set_state_dict(restored)


def save_optimizer(folder: str, optimizer, model, shard: Optional[int] = None) -> None:
    """``optimizer.pdopt``, or ``optimizer.shard<shard>.pdopt`` for one rank's share under sharding."""
    name = "optimizer.pdopt" if shard is None else f"optimizer.shard{shard}.pdopt"
    paddle.save(optimizer_state(optimizer, model), os.path.join(folder, name))


def _optimizer_files(folder: str, first_shard: Optional[int]) -> list[str]:
    """The checkpoint's optimizer files, ``optimizer.shard<first_shard>.pdopt`` (when there is one) first."""
    files = sorted(name for name in os.listdir(folder) if _OPTIMIZER_RE.match(name))
    if not files:
        raise FileNotFoundError(f"{folder}: no optimizer state (optimizer.pdopt or optimizer.shardN.pdopt)")
    own = f"optimizer.shard{first_shard}.pdopt"
    return [own] + [f for f in files if f != own] if own in files else files


def read_optimizer_state(folder: str, weights: Optional[Collection[str]] = None,
                         first_shard: Optional[int] = None) -> dict:
    """The optimizer state of ``weights`` (structured names of the weights whose state this rank keeps; None: all
    of it), as host (numpy) arrays: ``paddle.load`` would place every tensor on the current device, and a 7B
    model's merged shards do not fit there.

    What a rank reads depends on the layout of the run that resumes, not on the one that saved: the files are read
    one at a time, ``optimizer.shard<first_shard>.pdopt`` first, keeping only the entries of ``weights``, until
    every one of them is found. A sharded run resuming its own layout so reads its own file only; a replicated
    run gathers the whole state from all files, and a sharded run with another rank count or stage gathers its
    share from whichever files hold it (host memory: its share plus one file). A weight found in no file is a
    ``ConfigError`` naming it (the checkpoint was saved with other trainable weights)."""
    wanted = None if weights is None else set(weights)
    files = _optimizer_files(folder, first_shard)
    state: dict = {}
    found: set[str] = set()
    for name in files:
        for key, value in paddle.load(os.path.join(folder, name), return_numpy=True).items():
            if key == "LR_Scheduler":
                state[key] = value
            elif key == "master_weights":
                kept = {k: v for k, v in value.items() if wanted is None or k in wanted}
                state.setdefault(key, {}).update(kept)
            elif wanted is None:
                state[key] = value
            elif (owner := _owner(key, wanted)) is not None:
                state[key] = value
                found.add(owner)
        if wanted is not None and found >= wanted:
            break
    missing = sorted(wanted - found) if wanted is not None else []
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise ConfigError(f"config key 'resume_from_checkpoint': {folder}: the optimizer state ({', '.join(files)}) "
                          f"has nothing for {len(missing)} weight(s) this run trains ({shown}); it was saved by a run "
                          "that trained other weights (freeze_vision, lora, lora_target_modules)",
                          keys=("resume_from_checkpoint",))
    return state


def rng_state() -> dict:
    return {"paddle": paddle.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def set_rng_state(state: dict) -> None:
    paddle.set_rng_state(state["paddle"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


def load_rng_state(path: str) -> None:
    set_rng_state(read_rng_state(path))
