"""Reward registry.

A reward is ``fn(completions: list[str], **columns) -> list[float | None]``: one score per
completion. ``columns`` holds, per completion, the sample's columns (``solution`` and any extra
field) and the rollout's facts (``image_sizes``, ``input_sizes``, ``coord_system``). A reward never
raises on model text: what it cannot parse scores 0.0. ``None`` means "not applicable here" and is
left out of the weighted sum.
"""
from __future__ import annotations

import importlib
from typing import Callable

RewardFn = Callable[..., list]
REWARDS: dict[str, RewardFn] = {}


def register(name: str):
    def wrap(fn: RewardFn) -> RewardFn:
        REWARDS[name] = fn
        return fn

    return wrap


def get_reward(name: str) -> RewardFn:
    """A registered reward by name, or a user's own as ``"package.module:function"``."""
    if name in REWARDS:
        return REWARDS[name]
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            fn = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as e:
            raise KeyError(f"reward {name!r}: cannot load {attr!r} from module {module_name!r} ({e})") from e
        if not callable(fn):
            raise KeyError(f"reward {name!r} is not callable")
        return fn
    raise KeyError(f"unknown reward {name!r}; known: {', '.join(sorted(REWARDS))}, or 'module.path:function'")


from . import answers, boxes, caption, detection, format, gui, judge, multibox, products  # noqa: E402,F401,I001
