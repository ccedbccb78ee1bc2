"""The sampling settings a model folder's ``generation_config.json`` gives, read as vLLM and transformers read them.

vLLM serves a model with these as the defaults of a request (``--generation-config auto``, its default), and
transformers' ``generate`` applies them too, the repetition penalty even when decoding greedily
(``do_sample=False``): the published evaluation scripts of R1-V and VLM-R1 call it so on checkpoints whose file comes
from Qwen2-VL / Qwen2.5-VL Instruct (top_k 1, repetition_penalty 1.05). ``do_sample`` is not read, as vLLM does not.
"""
from __future__ import annotations

import json
import math
import os

from ..checkpoints.manifest import CheckpointError

GENERATION_CONFIG = "generation_config.json"
# name: (lowest, highest, integer): the values a request may give (``serve``), and a file's must be within
SAMPLING_BOUNDS = {"temperature": (0.0, 2.0, False), "top_p": (1e-6, 1.0, False), "top_k": (-1, 2 ** 31 - 1, True),
                   "min_p": (0.0, 1.0, False), "repetition_penalty": (1e-6, 2.0, False)}


def within(value, low, high, integer: bool) -> bool:
    """Whether ``value`` is a number (an int where ``integer``; never a bool) in [low, high], finite."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        return False
    return math.isfinite(value) and low <= value <= high


def generation_defaults(model_folder: str) -> dict:
    """The sampling settings ``model_folder``'s generation_config.json gives (``SAMPLING_BOUNDS``' names, and
    ``max_tokens`` from ``max_new_tokens``); {} without the file. A file that is not a JSON object, or a value out of
    bounds, is a ``CheckpointError`` naming the file and key."""
    path = os.path.join(model_folder, GENERATION_CONFIG)
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
    for name in [*SAMPLING_BOUNDS, "max_new_tokens"]:
        value = config.get(name)
        if value is None:
            continue
        low, high, integer = SAMPLING_BOUNDS.get(name, (1, math.inf, True))
        if not within(value, low, high, integer):
            raise CheckpointError(f"{path}: {name} {value!r} is not {'an integer' if integer else 'a number'} in "
                                  f"[{low}, {high}]")
        defaults["max_tokens" if name == "max_new_tokens" else name] = value
    return defaults
