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
and calls the rewards; ``registry`` names them, ``lookup`` finds them (``load_builtin_rewards()`` fills ``REWARDS`` with
the built-in families, which importing this package does not do).
"""
from .lookup import get_reward, load_builtin_rewards
from .registry import REWARDS, BadSolution, CountedReward, register

__all__ = ["REWARDS", "BadSolution", "CountedReward", "get_reward", "load_builtin_rewards", "register"]
