"""T-GRPO (Video-R1, Feng et al. 2025, arXiv:2503.21776): reward a group for answers that need the clip's order.

For each video prompt the policy also answers the same clip with its frames shuffled (``video.shuffled_frames``).
With p the mean accuracy of the prompt's G ordered completions and p~ that of its shuffled ones,

    r_i <- r_i + alpha      for every ordered completion i with accuracy_i > 0.1, when p >= mu * p~

(alpha = ``temporal_grpo_bonus``, 0.3; mu = ``temporal_grpo_ratio``, 0.8; the accuracy is the first reward function's
score, as Video-R1 reads its ``rewards_per_func[:, 0]``). The shuffled completions take no part in the loss: they only
decide the bonus. Video-R1 adds alpha to the accuracy column before summing the rewards (its weights are all 1); here
the accuracy score gets alpha and the weighted reward w_0 * alpha, so that a weighted sum stays the sum of its
weighted columns. Video-R1 takes p and p~ over a device's batch, one prompt in its scripts; here over each prompt's
group. An accuracy that does not apply (a reward's None, NaN) counts as 0, as in Video-R1's float tensor of rewards.
"""
from __future__ import annotations

import numpy as np

CORRECT_ABOVE = 0.1  # Video-R1's threshold on the accuracy score for an answer to earn the bonus


def temporal_bonus(scores: np.ndarray, rewards: np.ndarray, shuffled: np.ndarray, group: int, ratio: float,
                   bonus: float, weight: float) -> tuple[np.ndarray, np.ndarray]:
    """In place on a micro-batch of whole groups (``group`` completions a prompt row, in row order): ``scores``
    [N, F] and ``rewards`` [N] get the bonus where it is earned. ``shuffled`` [P]: each row's p~ (NaN: a row without
    a clip, left as it is). Returns (p of the rows with a clip, whether each earned the bonus)."""
    clips = ~np.isnan(shuffled)
    accuracy = np.nan_to_num(scores[:, 0], nan=0.0).reshape(-1, group)
    ordered = accuracy.mean(axis=1)
    earned = clips & (ordered >= ratio * np.nan_to_num(shuffled, nan=0.0))
    correct = (np.repeat(earned, group) & (accuracy.reshape(-1) > CORRECT_ABOVE)).nonzero()[0]
    scores[correct, 0] += bonus
    rewards[correct] += weight * bonus
    return ordered[clips], earned[clips]
