"""Advantages from rewards: GRPO's group normalisation and the estimators ``adv_estimator`` names (RLOO,
REINFORCE++, Dr. GRPO), GDPO's per-reward normalisation (``multi_objective_aggregation: normalize_then_sum``), and
DAPO's overlong penalty on the reward. Each formula is in its function's docstring; each estimator is one entry of
``ADVANTAGE_ESTIMATORS`` (``registry.Registry``), which the config reads."""
from __future__ import annotations

import numpy as np

from .registry import Registry, paddle

SCALE_REWARDS = ("group", "batch", "none")  # group_advantages' divisor
ADVANTAGE_ESTIMATORS = Registry("adv_estimator")  # EasyR1's adv_estimator names


def _nan_mean(x: paddle.Tensor, valid: paddle.Tensor, axis=None) -> paddle.Tensor:
    """Mean over the entries where ``valid``; NaN where there are none."""
    count = valid.astype(x.dtype).sum(axis=axis, keepdim=axis is not None)
    return paddle.where(valid, x, paddle.zeros_like(x)).sum(axis=axis, keepdim=axis is not None) / count


def _nan_std(x: paddle.Tensor, valid: paddle.Tensor, axis=None) -> paddle.Tensor:
    """Unbiased std over the entries where ``valid`` (TRL's ``nanstd``); NaN with fewer than two."""
    count = valid.astype(x.dtype).sum(axis=axis, keepdim=axis is not None)
    deviation = paddle.where(valid, x - _nan_mean(x, valid, axis), paddle.zeros_like(x))
    variance = (deviation * deviation).sum(axis=axis, keepdim=axis is not None) / (count - 1)
    return paddle.where(count > 1, variance.sqrt(), paddle.full_like(variance, float("nan")))


def group_advantages(rewards: paddle.Tensor, num_generations: int, scale_rewards: str = "group") -> paddle.Tensor:
    """A_i = r_i - mean(group), divided by std(group) ("group"), std(batch) ("batch") or 1 ("none").

    Rows are grouped contiguously: completions 0..G-1 belong to prompt 0, and so on. std is the unbiased sample
    std (as TRL's ``torch.std``); 1e-4 keeps a flat group finite. A reward of NaN (no reward function scored
    that completion) is left out of the means and stds and gets advantage 0 (TRL 1.16's nanmean / nanstd /
    nan_to_num).
    """
    if scale_rewards not in SCALE_REWARDS:
        raise ValueError(f"scale_rewards must be one of {SCALE_REWARDS}, got {scale_rewards!r}")
    valid = ~paddle.isnan(rewards)
    grouped, grouped_valid = rewards.reshape([-1, num_generations]), valid.reshape([-1, num_generations])
    advantages = (grouped - _nan_mean(grouped, grouped_valid, axis=1)).reshape([-1])
    if scale_rewards == "group":
        advantages = advantages / (paddle.repeat_interleave(_nan_std(grouped, grouped_valid, axis=1).reshape([-1]),
                                                            num_generations) + 1e-4)
    elif scale_rewards == "batch":
        advantages = advantages / (_nan_std(rewards, valid) + 1e-4)
    return _zero_nan(advantages)


def _zero_nan(x: paddle.Tensor) -> paddle.Tensor:
    return paddle.where(paddle.isnan(x), paddle.zeros_like(x), x)


@ADVANTAGE_ESTIMATORS.register("grpo", "(r - mean_group) / std as scale_rewards says")
def grpo_advantages(rewards: paddle.Tensor, num_generations: int, scale_rewards: str = "group", **_) -> paddle.Tensor:
    """GRPO: ``group_advantages``, divided as ``scale_rewards`` (TRL's key) says."""
    return group_advantages(rewards, num_generations, scale_rewards)


@ADVANTAGE_ESTIMATORS.register("rloo", "r_i - mean_{j != i} r_j")
def rloo_advantages(rewards: paddle.Tensor, num_generations: int, **_) -> paddle.Tensor:
    """RLOO (arXiv 2402.14740): A_i = r_i - mean_{j != i} r_j over the scored completions of i's group, which is
    k / (k - 1) * (r_i - mean(group)) for k scored completions; 0 for a group with fewer than two."""
    valid = ~paddle.isnan(rewards)
    grouped, grouped_valid = rewards.reshape([-1, num_generations]), valid.reshape([-1, num_generations])
    count = grouped_valid.astype(rewards.dtype).sum(axis=1, keepdim=True)
    centered = grouped - _nan_mean(grouped, grouped_valid, axis=1)
    scale = paddle.where(count > 1, count / (count - 1), paddle.full_like(count, float("nan")))
    return _zero_nan((centered * scale).reshape([-1]))


@ADVANTAGE_ESTIMATORS.register("reinforce_plus_plus", "(r - mu) / sigma over all completion tokens of the batch, no "
                               "group baseline")
def reinforce_plus_plus_advantages(rewards: paddle.Tensor, num_generations: int, lengths: paddle.Tensor,
                                   **_) -> paddle.Tensor:
    """REINFORCE++ (arXiv 2501.03262) with an outcome reward, as EasyR1 computes it: every completion token's
    return is the completion's reward (gamma 1), whitened over all completion tokens of the batch:
    A_i = (r_i - mu) / sqrt(var + 1e-8), mu and the unbiased var over tokens (a completion weighs by its length
    ``lengths``); no group baseline."""
    valid = ~paddle.isnan(rewards)
    lengths = lengths.astype(rewards.dtype) * valid.astype(rewards.dtype)
    filled = paddle.where(valid, rewards, paddle.zeros_like(rewards))
    tokens = lengths.sum()
    mean = (filled * lengths).sum() / tokens
    variance = (((filled - mean) ** 2) * lengths).sum() / (tokens - 1).clip(min=1.0)
    return _zero_nan(paddle.where(valid, (filled - mean) / (variance + 1e-8).sqrt(), paddle.zeros_like(rewards)))


@ADVANTAGE_ESTIMATORS.register("dr_grpo", "r - mean_group")
def dr_grpo_advantages(rewards: paddle.Tensor, num_generations: int, **_) -> paddle.Tensor:
    """Dr. GRPO (arXiv 2503.20783): A_i = r_i - mean(group), not divided by any std."""
    return group_advantages(rewards, num_generations, "none")


def advantages_for(estimator: str, rewards: paddle.Tensor, num_generations: int, lengths: paddle.Tensor,
                   scale_rewards: str = "group") -> paddle.Tensor:
    """The advantage of each completion by the named estimator (config key ``adv_estimator``); ``lengths``: each
    completion's tokens."""
    return ADVANTAGE_ESTIMATORS.implementation(estimator)(rewards, num_generations, lengths=lengths,
                                                          scale_rewards=scale_rewards)


def normalize_then_sum_advantages(scores: paddle.Tensor, weights, num_generations: int) -> paddle.Tensor:
    """GDPO (arXiv 2601.05242; TRL's ``multi_objective_aggregation`` normalize_then_sum) on [N, F] per-function
    scores (NaN: not scored): each function's scores normalised within their group,
    s'_ik = (s_ik - mean_group_k) / (std_group_k + 1e-4), then r_i = sum_k w_k s'_ik over the functions that scored
    it (NaN when none did), then normalised over the batch: A_i = (r_i - mean(r)) / (std(r) + 1e-4); NaN -> 0."""
    functions = scores.shape[1]
    valid = ~paddle.isnan(scores)
    grouped, grouped_valid = scores.reshape([-1, num_generations, functions]), valid.reshape(
        [-1, num_generations, functions])
    normalised = ((grouped - _nan_mean(grouped, grouped_valid, axis=1))
                  / (_nan_std(grouped, grouped_valid, axis=1) + 1e-4)).reshape([-1, functions])
    weight = paddle.to_tensor(list(weights), dtype=scores.dtype).unsqueeze(0)
    rewards = paddle.where(paddle.isnan(normalised), paddle.zeros_like(normalised), normalised * weight).sum(axis=1)
    scored = valid.any(axis=1)
    rewards = paddle.where(scored, rewards, paddle.full_like(rewards, float("nan")))
    return _zero_nan((rewards - _nan_mean(rewards, scored)) / (_nan_std(rewards, scored) + 1e-4))


def overlong_penalty(lengths, max_completion_length: int, buffer: int, factor: float):
    """DAPO's soft overlong punishment (arXiv 2503.14476), added to the reward: 0 up to L_max - buffer, then
    -factor * (L - (L_max - buffer)) / buffer in the last ``buffer`` tokens, -factor at L_max."""
    start = max_completion_length - buffer
    return [-factor * min(max(length - start, 0), buffer) / buffer for length in lengths]


def longest_turns(completion_mask: np.ndarray) -> np.ndarray:
    """Per row, the longest run of the model's own tokens (the 1s of ``completion_mask`` [rows, T]): a single-turn
    completion's length, an episode's longest turn. The overlong penalty's L: ``max_completion_length`` bounds each
    turn of an episode, so the turn nearest to being cut off is what the penalty warns of."""
    longest = run = np.zeros(completion_mask.shape[0], dtype=np.int64)
    for column in completion_mask.T.astype(np.int64):
        run = (run + 1) * column
        longest = np.maximum(longest, run)
    return longest
