"""A generation batch's groups over all ranks (or a block's: the fewest micro-steps of a generation batch whose
completions are whole groups, ``resume.BatchLayout``, which dynamic sampling draws at a time): what advantages,
dynamic sampling and ``frac_reward_zero_std`` are computed on, as TRL 1.16 computes them on rewards gathered from
every process.

A rank holds slices of the completions (``sampler.rank_share``): whole groups, or parts of groups whose other
completions are on the neighbouring ranks or micro-steps. Each rank sends, per completion, its group's key (its
block's origin, the refill batch of dynamic sampling and the prompt's place in the block's draw), its generation
index, reward,
per-function scores and length; one ``all_gather_object`` brings every rank the same table, [groups, G], with NaN
where no rank holds a completion (a skipped sample) or no reward scored it. NaN is what the estimators already leave
out of a group's mean and std, and give advantage 0 (TRL's rule for unscored completions), so a group missing a
completion is computed on the completions it has. Every rank then takes the rows of its own completions.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import paddle

from ..parallel.distributed import gather_objects
from .advantages import advantages_for, normalize_then_sum_advantages


@dataclass
class GroupTable:
    """Every completion of a block over all ranks: one row per group (sorted by key), one column per
    generation."""

    rewards: np.ndarray  # [P, G] float32 (as the rewards, and TRL's), NaN: unscored or held by no rank
    scores: np.ndarray  # [P, G, F] each reward function's score, NaN: None, unscored or held by no rank
    lengths: np.ndarray  # [P, G] completion tokens (0 where no rank holds one)
    local: np.ndarray  # this rank's completions, in its row order: flat positions p * G + g in the table
    # [P, G] float32 beta * sum_t kl_t with the KL in the reward (use_kl_loss false), else None: subtracted from the
    # rewards for the advantages only (dynamic sampling and frac_reward_zero_std look at the task's rewards)
    kl_penalties: Optional[np.ndarray] = None

    @property
    def num_generations(self) -> int:
        return self.rewards.shape[1]

    def local_rows(self, values: np.ndarray) -> np.ndarray:
        """A per-completion table value ([P, G, ...]) at this rank's completions."""
        return values.reshape(-1, *values.shape[2:])[self.local]

    def local_groups(self, per_group: np.ndarray) -> np.ndarray:
        """A per-group value ([P]) at this rank's completions."""
        return per_group[self.local // self.num_generations]

    def zero_std(self) -> np.ndarray:
        """Per group, whether its scored rewards have zero std (TRL: ``isclose(nanstd(group), 0)``; a group with
        fewer than two scored completions has std NaN, not zero)."""
        flags = []
        for values in self.rewards:
            kept = values[~np.isnan(values)]
            flags.append(kept.size > 1 and np.isclose(kept.std(ddof=1), 0.0, rtol=1e-5, atol=1e-8))
        return np.asarray(flags, dtype=bool)

    def advantages(self, estimator: str, scale_rewards: str, aggregation: str = "sum_then_normalize",
                   weights: Optional[list[float]] = None) -> paddle.Tensor:
        """This rank's advantages, computed on the whole table: ``adv_estimator`` on the weighted sums
        (``multi_objective_aggregation`` sum_then_normalize), or GDPO on the per-function scores
        (normalize_then_sum)."""
        g = self.num_generations
        if aggregation == "normalize_then_sum":
            every = normalize_then_sum_advantages(paddle.to_tensor(self.scores.reshape(-1, self.scores.shape[2])),
                                                  weights, g)
        else:
            rewards = self.rewards if self.kl_penalties is None else self.rewards - self.kl_penalties
            every = advantages_for(estimator, paddle.to_tensor(rewards.reshape(-1)), g,
                                   paddle.to_tensor(self.lengths.reshape(-1)), scale_rewards)
        return paddle.to_tensor(every.numpy()[self.local])


def gather_groups(keys: list, generations: list[int], rewards: np.ndarray, scores: np.ndarray, lengths: np.ndarray,
                  num_generations: int, world_size: int, where: str,
                  kl_penalties: Optional[np.ndarray] = None) -> GroupTable:
    """Every rank's completions in one table (one collective; the same call on every rank whatever it holds).
    ``keys`` and ``generations``: per completion of this rank, its group's key (comparable, alike on every rank
    holding the group) and its generation index in the group; ``kl_penalties`` given on every rank or on none."""
    mine = {"keys": list(keys), "generations": np.asarray(generations, dtype=np.int64),
            "rewards": np.asarray(rewards, dtype=np.float32), "scores": np.asarray(scores, dtype=np.float32),
            "lengths": np.asarray(lengths, dtype=np.float32),
            "kl_penalties": None if kl_penalties is None else np.asarray(kl_penalties, dtype=np.float32)}
    parts = gather_objects(mine, world_size, where)
    order = {key: row for row, key in enumerate(sorted({key for part in parts for key in part["keys"]}))}
    functions = scores.shape[1]
    table = GroupTable(rewards=np.full((len(order), num_generations), np.nan, dtype=np.float32),
                       scores=np.full((len(order), num_generations, functions), np.nan, dtype=np.float32),
                       lengths=np.zeros((len(order), num_generations), dtype=np.float32),
                       local=np.zeros(0, dtype=np.int64),
                       kl_penalties=None if kl_penalties is None else np.full((len(order), num_generations), np.nan,
                                                                               dtype=np.float32))
    for part in parts:
        rows = np.asarray([order[key] for key in part["keys"]], dtype=np.int64)
        positions = rows * num_generations + part["generations"]
        table.rewards.reshape(-1)[positions] = part["rewards"]
        table.scores.reshape(-1, functions)[positions] = part["scores"]
        table.lengths.reshape(-1)[positions] = part["lengths"]
        if table.kl_penalties is not None:
            table.kl_penalties.reshape(-1)[positions] = part["kl_penalties"]
    rows = np.asarray([order[key] for key in mine["keys"]], dtype=np.int64)
    table.local = rows * num_generations + mine["generations"]
    return table
