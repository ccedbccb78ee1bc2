"""A step's metrics as statistics that combine over ranks into the numbers of the whole global batch.

Each rank describes what it saw, not a finished number: a mean is its (total, count), a counter its sum, a
standard deviation the values themselves. All ranks' statistics are gathered in one collective whose shape does
not depend on what happened locally (a pickled dict: a counter that exists on one rank only, a reward that failed
on one rank, are just more keys), and every rank combines them the same way. One process runs the same
combination over its own statistics, so a 2-rank run logs what one process over the same global batch logs.

The combinations follow TRL 1.16 (``GRPOTrainer._generate_and_score_completions``, which gathers rewards over
processes before computing them): means weighted by how many values each rank had; ``Std`` is TRL's ``nanstd``
(Bessel-corrected, NaN left out) over the gathered values; counters are summed; ``*/max`` is the maximum, ``*/min`` the
minimum.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Union

import numpy as np

from .distributed import gather_objects


@dataclass
class Mean:
    """sum(values) / count(values) over all ranks; NaN when no rank had a value."""

    total: float
    count: float

    @classmethod
    def of(cls, values) -> "Mean":
        """Over the values that are not NaN."""
        values = np.asarray(values, dtype="float64").reshape(-1)
        kept = values[~np.isnan(values)]
        return cls(float(kept.sum()), float(kept.size))

    @classmethod
    def one(cls, value: float) -> "Mean":
        """A rank's single value, weighted like every other rank's (a per-rank figure: loss, seconds); NaN is
        no value."""
        return cls.of([value])


@dataclass
class Sum:
    """A counter: the ranks' counts added."""

    value: float


@dataclass
class Max:
    value: float


@dataclass
class Min:
    value: float


@dataclass
class Std:
    """TRL's ``nanstd`` over every rank's values: sqrt(sum (x - mean)^2 / (n - 1)), NaN left out, NaN for n < 2."""

    values: np.ndarray

    @classmethod
    def of(cls, values) -> "Std":
        values = np.asarray(values, dtype="float64").reshape(-1)
        return cls(values[~np.isnan(values)])


@dataclass
class Same:
    """A value every rank holds alike (the learning rate, the reduced gradient norm)."""

    value: float


Stat = Union[Mean, Sum, Max, Min, Std, Same]


def as_stat(value) -> Stat:
    """A statistic as it is; a plain number is one every rank holds alike."""
    return value if isinstance(value, (Mean, Sum, Max, Min, Std, Same)) else Same(float(value))


def merge(old: Stat, new: Stat) -> Stat:
    """Two statistics of one key as one: from one rank (a counter counted twice in a step, a mean over two
    rollouts) or from two ranks (``combine``); ``Same`` keeps the later value."""
    if type(old) is not type(new):
        raise TypeError(f"cannot merge a {type(old).__name__} with a {type(new).__name__}")
    if isinstance(old, Mean):
        return Mean(old.total + new.total, old.count + new.count)
    if isinstance(old, Sum):
        return Sum(old.value + new.value)
    if isinstance(old, Max):
        return Max(max(old.value, new.value))
    if isinstance(old, Min):
        return Min(min(old.value, new.value))
    if isinstance(old, Std):
        return Std(np.concatenate([old.values, new.values]))
    return new


def value_of(stat: Stat) -> float:
    """The number a statistic stands for."""
    if isinstance(stat, Mean):
        return stat.total / stat.count if stat.count else float("nan")
    if isinstance(stat, Std):
        return float(stat.values.std(ddof=1)) if stat.values.size > 1 else float("nan")
    return float(stat.value)


def combine(per_rank: list[dict[str, Stat]]) -> dict[str, float]:
    """The global batch's metrics from every rank's statistics, merged as one rank's are (``merge``; ranks without a
    key contribute nothing to it), keys in a stable order."""
    keys = sorted({key for stats in per_rank for key in stats})
    return {key: value_of(functools.reduce(merge, [stats[key] for stats in per_rank if key in stats]))
            for key in keys}


def reduce_step_metrics(stats: dict[str, Stat], world_size: int) -> dict[str, float]:
    """Every rank's ``stats`` gathered (one ``all_gather_object``, the same call on every rank whatever its keys)
    and combined; one process combines its own."""
    return combine(gather_objects(stats, world_size, "the step's metrics"))
