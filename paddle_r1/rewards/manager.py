"""The one place rewards are resolved, bound to their settings, fed their columns and combined.

Built once per run from the config (``reward_funcs``, ``reward_weights``, ``reward_kwargs``), before any model
loads: an unknown reward, an unknown setting or a setting the reward refuses is a ``ConfigError`` naming the
reward and the key. The trainer, the held-out evaluation and the benchmark scripts all score through it.

Scores follow TRL 1.16 (``GRPOTrainer._generate_and_score_completions``): a reward's None is NaN in the
per-function table and left out of the weighted sum; a completion no reward could score gets reward NaN, which
the advantages leave out of their group's mean and std and give advantage 0.
"""
from __future__ import annotations

import functools
import inspect
import logging
import math
import threading
import traceback
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from ..errors import ConfigError
from .lookup import get_reward
from .registry import BadSolution, CountedReward

logger = logging.getLogger(__name__)

# What a reward receives as columns, per completion; a reward's settings are its other keyword parameters.
ROLLOUT_COLUMNS = ("image_sizes", "input_sizes", "coord_system", "turns", "tool_calls")
SAMPLE_COLUMNS = ("images", "problem", "solution", "reward_method")


class RewardError(RuntimeError):
    """A reward raised on a batch (a bug in the reward, often the user's own): names the reward, the exception
    and where it was raised."""


@dataclass
class Scores:
    per_function: np.ndarray  # [N, F] float32, NaN where a reward returned None
    rewards: np.ndarray  # [N] float32 weighted sum over the functions that scored; NaN where none did
    counters: dict  # "rewards/<name>/<key>" -> count, for the step's metrics


def reward_columns(samples: list[dict], image_sizes: list, input_sizes: list, coord_system: str,
                   repeat: int = 1, turns: Optional[list] = None, tool_calls: Optional[list] = None
                   ) -> dict[str, list]:
    """Per completion: every column of its sample (extra fields included) and the rollout's facts, each sample's
    values repeated ``repeat`` times (its G completions are contiguous). A multi-turn rollout adds, per completion,
    ``turns`` (the episode's turns: ``{"role": "assistant", "text"}`` and ``{"role": "tool", "name", "arguments",
    "text", "images"}``, the images as PIL images) and ``tool_calls`` (``{"name", "arguments", "error"}`` of each call
    run; error None when the tool answered)."""
    keys = {k for s in samples for k in s}
    columns = {key: [s.get(key) for s in samples for _ in range(repeat)] for key in keys}
    columns["image_sizes"] = [sizes for sizes in image_sizes for _ in range(repeat)]
    columns["input_sizes"] = [sizes for sizes in input_sizes for _ in range(repeat)]
    columns["coord_system"] = [coord_system] * (len(samples) * repeat)
    if turns is not None:
        columns.update(turns=turns, tool_calls=tool_calls)
    return columns


def config_folders(config) -> tuple:
    """Where a config's user rewards may sit besides sys.path and the working folder: its file's folder."""
    return (config.config_folder,) if config.config_folder else ()


def _settings_of(fn: Callable) -> list[str]:
    """A reward function's settings: its keyword parameters with defaults that are not columns."""
    columns = set(ROLLOUT_COLUMNS) | set(SAMPLE_COLUMNS)
    return [name for name, p in inspect.signature(fn).parameters.items()
            if p.default is not inspect.Parameter.empty and name not in columns
            and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]


def bind_reward(name: str, settings: dict, folders: tuple = ()) -> Callable:
    """The reward ``name`` ready to call with columns only: a class made with ``settings`` (its ``__init__``
    checks them), or a function with ``settings`` bound after checking that it names each one and that it
    accepts their values (a call on an empty batch runs its own checks). A user's reward module is looked for in
    ``folders`` too (the config file's)."""
    where = f"config key 'reward_kwargs.{name}'"
    try:
        entry = get_reward(name, folders)
    except KeyError as e:
        raise ConfigError(f"config key 'reward_funcs': {e.args[0]}") from None
    if isinstance(entry, type):
        try:
            return entry(**settings)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{where}: {e}") from None
    if not settings:
        return entry
    known = _settings_of(entry)
    unknown = sorted(set(settings) - set(known))
    if unknown:
        raise ConfigError(f"{where}: unknown setting(s) {', '.join(map(repr, unknown))}; reward {name!r} takes "
                          f"{', '.join(map(repr, known)) or 'no settings'}")
    bound = functools.partial(entry, **settings)
    required = [p for p, spec in list(inspect.signature(entry).parameters.items())[1:]
                if spec.default is inspect.Parameter.empty
                and spec.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]
    try:
        bound([], **{p: [] for p in required})
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {e}") from None
    return bound


class RewardManager:
    def __init__(self, names: list[str], weights: Optional[list] = None, settings: Optional[dict] = None,
                 folders: tuple = ()):
        settings = settings or {}
        self.names = list(names)
        self.weights = np.asarray(weights if weights is not None else [1.0] * len(self.names), dtype="float32")
        self._counts: dict[str, float] = defaultdict(float)
        self._lock = threading.Lock()
        self._warned: set = set()
        self.functions = [self._bind(name, settings.get(name, {}), folders) for name in self.names]

    @classmethod
    def from_config(cls, config) -> "RewardManager":
        return cls(config.reward_funcs, config.reward_weights, config.reward_kwargs, folders=config_folders(config))

    def _bind(self, name: str, settings: dict, folders: tuple) -> Callable:
        fn = bind_reward(name, settings, folders)
        if isinstance(fn, CountedReward):  # its counts go to the step's metrics

            def report(key: str, n: float, prefix=f"rewards/{name}/") -> None:
                with self._lock:
                    self._counts[prefix + key] += n

            fn.report = report
        return fn

    def count(self, key: str, n: float = 1) -> None:
        with self._lock:
            self._counts[key] += n

    def pop_counters(self) -> dict:
        with self._lock:
            counts, self._counts = dict(self._counts), defaultdict(float)
        return counts

    def score(self, completions: list[str], columns: dict) -> Scores:
        """Every reward on every completion, the weighted sum, and the counters gathered since the last call."""
        table = np.full((len(completions), len(self.functions)), np.nan, dtype="float32")
        for j, (name, fn) in enumerate(zip(self.names, self.functions)):
            values = self._call(name, fn, completions, columns)
            if not isinstance(values, (list, tuple)) or len(values) != len(completions):
                got = len(values) if isinstance(values, (list, tuple)) else type(values).__name__
                raise RewardError(f"reward {name!r} returned {got} scores for {len(completions)} completions")
            table[:, j] = [self._as_score(name, v) for v in values]
        return Scores(per_function=table, rewards=self.combine(table), counters=self.pop_counters())

    def combine(self, table: np.ndarray) -> np.ndarray:
        """r_i = sum_f w_f * s_if over the functions that scored completion i; NaN when none did."""
        valid = ~np.isnan(table)
        rewards = np.where(valid, table * self.weights, 0.0).sum(axis=1).astype("float32")
        rewards[~valid.any(axis=1)] = np.nan
        return rewards

    def _as_score(self, name: str, value) -> float:
        """None -> NaN (not applicable). A NaN or infinite score is the reward's failure: it scores 0.0, is counted
        as rewards/<name>/non_finite and warned about once (a NaN must not pass for "not applicable", nor an
        infinity poison the advantages)."""
        if value is None:
            return np.nan
        try:
            score = float(value)
        except (TypeError, ValueError):
            raise RewardError(f"reward {name!r} returned {value!r}, not a number or None") from None
        if math.isfinite(score):
            return score
        self.count(f"rewards/{name}/non_finite")
        if name not in self._warned:
            self._warned.add(name)
            logger.warning("reward %r returned %s; scored 0.0 and counted in rewards/%s/non_finite", name, score, name)
        return 0.0

    def _call(self, name: str, fn: Callable, completions: list[str], columns: dict) -> list:
        """``fn`` on the whole batch. When a sample's solution is unusable (``BadSolution``: bad data, not model
        text), each completion is scored on its own: the bad ones score None, are named once and counted."""
        try:
            return self._guarded(name, fn, completions, columns)
        except BadSolution:
            pass
        values = []
        for i, text in enumerate(completions):
            try:
                values.extend(self._guarded(name, fn, [text], {k: v[i:i + 1] for k, v in columns.items()}))
            except BadSolution as e:
                if (name, str(e)) not in self._warned:
                    self._warned.add((name, str(e)))
                    problem = columns.get("problem", [None] * len(completions))[i]
                    logger.warning("reward %r cannot score problem %r: %s", name, problem, e)
                self.count(f"rewards/{name}/bad_solutions")
                values.append(None)
        return values

    @staticmethod
    def _guarded(name: str, fn: Callable, completions: list[str], columns: dict) -> list:
        try:
            return fn(completions, **columns)
        except BadSolution:
            raise
        except Exception as e:
            where = traceback.extract_tb(e.__traceback__)[-1]
            raise RewardError(f"reward {name!r} raised {type(e).__name__}: {e} (at {where.filename}:{where.lineno} "
                              f"in {where.name})\n{traceback.format_exc()}") from e
