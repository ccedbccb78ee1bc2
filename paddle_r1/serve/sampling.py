"""A request's sampling settings, and their defaults from the served checkpoint, as vLLM's chat completions take them.

A request may give ``temperature``, ``top_p``, ``top_k``, ``min_p`` and ``repetition_penalty`` (vLLM's extra
parameters beside OpenAI's; ``top_k`` -1 or 0: all tokens). One it leaves out takes the value the checkpoint's
``generation_config.json`` gives (``models/generation_defaults.py``, vLLM's ``--generation-config auto``: the Qwen2-VL
and Qwen2.5-VL Instruct files give top_k 1 and repetition_penalty 1.05, so vLLM answers such a checkpoint greedily with
that penalty unless the request says otherwise), else the neutral value. The file's ``max_new_tokens`` is the default
``max_tokens`` (within the server's ``--max_tokens`` ceiling).
"""
from __future__ import annotations

from typing import Callable

from ..generation.rollout import SamplingParams
from ..models.generation_defaults import SAMPLING_BOUNDS

NEUTRAL = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0}  # vLLM's


def request_sampling(body: dict, defaults: dict, max_tokens: int, number: Callable) -> SamplingParams:
    """The ``SamplingParams`` of a request ``body`` that asks for ``max_tokens``: each setting of ``NEUTRAL`` from the
    body (checked by ``number(body, name, default, low, high, integer)``, which raises the request's error), else from
    ``defaults`` (``generation_defaults``), else neutral."""
    values = {name: number(body, name, defaults.get(name, neutral), *SAMPLING_BOUNDS[name])
              for name, neutral in NEUTRAL.items()}
    top_k = max(values.pop("top_k"), 0)  # -1: vLLM's "all tokens", 0 here
    return SamplingParams(max_new_tokens=max_tokens, logprobs=False, top_k=top_k,
                          **{name: float(value) for name, value in values.items()})
