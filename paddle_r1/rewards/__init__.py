"""Reward registry.

A reward is ``fn(completions: list[str], **columns) -> list[float | None]``: one score per completion.
``columns`` holds, per completion, the sample's columns (``solution`` and any extra field) and the rollout's
facts (``image_sizes``, ``input_sizes``, ``coord_system``). A reward never raises on model text: what it cannot
parse scores 0.0. ``None`` means "not applicable here" and is left out of the weighted sum. A solution the
reward cannot read is bad data: it raises ``BadSolution`` and the sample is scored None and counted.

Two kinds of entries in ``REWARDS``:

- a plain function; its settings (``reward_kwargs``) are the keyword parameters with defaults it names,
  e.g. ``gaussian_point(..., alpha=0.5, **_)``;
- a class (a reward with state: a worker process, counters, an HTTP client); its settings are the keyword
  arguments of ``__init__``, which checks them, and an instance is made per run and called with the columns.
  Its counters go through ``count``, which reports to whatever the ``RewardManager`` injected.

``paddle_r1.rewards.manager.RewardManager`` resolves names, binds and checks settings once, builds the columns
and calls the rewards; this module only names them.
"""
from __future__ import annotations

import importlib
import importlib.machinery
import os
import sys
from typing import Callable

RewardFn = Callable[..., list]
REWARDS: dict[str, RewardFn] = {}


class BadSolution(ValueError):
    """A sample's solution is not of the kind the reward scores: bad data, not model text."""


class CountedReward:
    """Base of the rewards that count events (timeouts, failed requests): ``count(key, n)`` hands them to
    ``report``, which the manager sets to add ``rewards/<name>/<key>`` to the step's metrics (no-op by
    default)."""

    def report(self, key: str, n: float) -> None:
        """Replaced by the manager; counts are dropped when nobody listens."""

    def count(self, key: str, n: float = 1) -> None:
        self.report(key, n)


def register(name: str):
    def wrap(fn: RewardFn) -> RewardFn:
        REWARDS[name] = fn
        return fn

    return wrap


def get_reward(name: str) -> RewardFn:
    """A registered reward (function or class) by name, or a user's own as ``"package.module:function"``."""
    if name in REWARDS:
        return REWARDS[name]
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            fn = getattr(import_user_module(module_name), attr)
        except (ImportError, AttributeError) as e:
            raise KeyError(f"reward {name!r}: cannot load {attr!r} from module {module_name!r} ({e})") from e
        if not callable(fn):
            raise KeyError(f"reward {name!r} is not callable")
        return fn
    raise KeyError(f"unknown reward {name!r}; known: {', '.join(sorted(REWARDS))}, or 'module.path:function'")


def import_user_module(module_name: str):
    """``module_name`` from sys.path, else from the working folder or a loaded config file's folder
    (``config.CONFIG_FOLDERS``): the console script does not put the working folder on sys.path as ``python -m``
    does, and users keep their reward file beside their config. A folder is added at the end of sys.path, so it
    never shadows an installed module."""
    from ..config import CONFIG_FOLDERS

    top = module_name.partition(".")[0]
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name != top:
            raise  # the module was found, and something it imports is missing
        for folder in [os.getcwd(), *CONFIG_FOLDERS]:
            if importlib.machinery.PathFinder.find_spec(top, [folder]) is not None:
                if folder not in sys.path:
                    sys.path.append(folder)
                return importlib.import_module(module_name)
        raise


from .families import answers, boxes, caption, detection, format, gui, judge, multibox, ocr, products  # noqa: E402,F401,I001
