"""Where rewards are registered by name (``register``), and the two types the families share: ``BadSolution`` and
``CountedReward``. The families import this module to register themselves; it imports none of them
(``rewards.lookup`` does)."""
from __future__ import annotations

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
