"""A request's sampling settings, and their defaults from the served checkpoint, as vLLM's chat completions take them.

A request may give ``temperature``, ``top_p``, ``top_k``, ``min_p`` and ``repetition_penalty`` (vLLM's extra
parameters beside OpenAI's; ``top_k`` -1 or 0: all tokens). One it leaves out takes the value the checkpoint's
``generation_config.json`` gives (vLLM's ``--generation-config auto``, its default: the Qwen2-VL and Qwen2.5-VL
Instruct files give top_k 1 and repetition_penalty 1.05, so vLLM answers such a checkpoint greedily with that penalty
unless the request says otherwise), else the neutral value. The file's ``max_new_tokens`` is the default
``max_tokens`` (within the server's ``--max_tokens`` ceiling); its ``do_sample`` is not read, as vLLM does not.
"""
from __future__ import annotations

import json
import math
import os
from typing import Callable

from ..checkpoints.manifest import CheckpointError
from ..generation.rollout import SamplingParams

# name: (neutral value, lowest, highest, integer)
REQUEST_SAMPLING = {"temperature": (1.0, 0.0, 2.0, False), "top_p": (1.0, 1e-6, 1.0, False),
                    "top_k": (0, -1, 2 ** 31 - 1, True), "min_p": (0.0, 0.0, 1.0, False),
                    "repetition_penalty": (1.0, 1e-6, 2.0, False)}
GENERATION_CONFIG = "generation_config.json"


def checkpoint_sampling_defaults(checkpoint: str) -> dict:
    """The sampling settings ``checkpoint``'s generation_config.json gives (``REQUEST_SAMPLING``'s names, and
    ``max_tokens`` from ``max_new_tokens``), each within the bounds a request's must be; {} without the file. A file
    that is not a JSON object, or a value out of bounds, is a ``CheckpointError`` naming the file and key."""
    path = os.path.join(checkpoint, GENERATION_CONFIG)
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as f:
        try:
            config = json.load(f)
        except ValueError as e:
            raise CheckpointError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    defaults = {}
    for name in [*REQUEST_SAMPLING, "max_new_tokens"]:
        value = config.get(name)
        if value is None:
            continue
        _, low, high, integer = REQUEST_SAMPLING.get(name, (None, 1, math.inf, True))
        if not _within(value, low, high, integer):
            raise CheckpointError(f"{path}: {name} {value!r} is not {'an integer' if integer else 'a number'} in "
                             f"[{low}, {high}]")
        defaults["max_tokens" if name == "max_new_tokens" else name] = value
    return defaults


def _within(value, low, high, integer: bool) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        return False
    return math.isfinite(value) and low <= value <= high


def request_sampling(body: dict, defaults: dict, max_tokens: int, number: Callable) -> SamplingParams:
    """The ``SamplingParams`` of a request ``body`` that asks for ``max_tokens``: each of ``REQUEST_SAMPLING`` from the
    body (checked by ``number(body, name, default, low, high, integer)``, which raises the request's error), else from
    ``defaults`` (``checkpoint_sampling_defaults``), else neutral."""
    values = {name: number(body, name, defaults.get(name, neutral), low, high, integer)
              for name, (neutral, low, high, integer) in REQUEST_SAMPLING.items()}
    values["top_k"] = max(values["top_k"], 0)  # -1: vLLM's "all tokens", 0 here
    return SamplingParams(max_new_tokens=max_tokens, logprobs=False, **{k: float(v) if k != "top_k" else v
                                                                        for k, v in values.items()})
