"""DAPO's dynamic sampling (arXiv 2503.14476): groups whose G rewards all tie carry no learning signal (their
advantages are all 0), so they are dropped and the batch is refilled from further prompt batches; EasyR1's online
filtering band (``filter_low``, ``filter_high``) drops too the groups whose mean score says they are solved or hopeless.

Here: picking the groups of a rollout that are kept (decided on every rank's completions of the group), and joining
the kept groups of several rollouts into one (prompts re-padded on the left, completions on the right, images and
clips concatenated in order).
"""
from __future__ import annotations

import warnings
from typing import Optional, Sequence

import numpy as np
import paddle

from ..generation.rollout import PromptBatch, Rollout, episode_fields, join_media


def kept_groups(table, filter_key: str = "overall", reward_names: Sequence[str] = (),
                filter_low: Optional[float] = None,
                filter_high: Optional[float] = None) -> np.ndarray:
    """Per group of ``table`` (``groups.GroupTable``: every rank's completions), whether dynamic sampling keeps it:
    its scored rewards (NaN: unscored) are not all equal (std > 0 over at least two), and, with EasyR1's filtering
    band, the mean of ``filter_key`` over its completions (``overall``: the reward; else that reward function's
    scores, None left out) lies strictly between ``filter_low`` and ``filter_high`` (either may be None: no bound)."""
    informative = []
    for values in table.rewards:
        scored = values[~np.isnan(values)]
        informative.append(scored.size > 1 and scored.max() > scored.min())
    keep = np.asarray(informative, dtype=bool)
    if filter_low is None and filter_high is None:
        return keep
    values = table.rewards if filter_key == "overall" else table.scores[:, :, list(reward_names).index(filter_key)]
    with warnings.catch_warnings():  # a group no completion of which was scored: mean NaN, outside every band
        warnings.simplefilter("ignore", RuntimeWarning)
        means = np.nanmean(values, axis=1)
    inside = np.ones_like(keep)
    if filter_low is not None:
        inside &= means > filter_low
    if filter_high is not None:
        inside &= means < filter_high
    return keep & inside


def select_groups(rollout: Rollout, groups: list[int], images_per_prompt: list[int],
                  videos_per_prompt: Optional[list[int]] = None) -> Rollout:
    """The rollout restricted to ``groups`` (prompt indices), with their completions, images and clips (a clip's
    patches, grid and seconds per frame pair)."""
    g = rollout.num_generations
    prompt = rollout.prompt
    rows = paddle.to_tensor(groups, dtype="int64")
    completion_rows = paddle.to_tensor([i * g + k for i in groups for k in range(g)], dtype="int64")
    selected = PromptBatch(input_ids=prompt.input_ids[rows], attention_mask=prompt.attention_mask[rows],
                           **prompt.media_rows(groups, images_per_prompt, videos_per_prompt or [0] * prompt.size))
    return Rollout(prompt=selected, num_generations=g, completion_ids=rollout.completion_ids[completion_rows],
                   completion_mask=rollout.completion_mask[completion_rows],
                   truncated=rollout.truncated[completion_rows],
                   sampling_logp=None if rollout.sampling_logp is None else rollout.sampling_logp[completion_rows],
                   **_episode_rows(rollout, completion_rows.tolist()))


def _episode_rows(rollout: Rollout, rows: list[int]) -> dict:
    """A multi-turn rollout's episode fields of ``rows`` (nothing for a single-turn one)."""
    if not rollout.multi_turn:
        return {}
    images, videos = rollout.episode_media_counts
    return dict(episode_mask=rollout.episode_mask[paddle.to_tensor(rows, dtype="int64")],
                episode_images_per_row=[images[r] for r in rows], episode_videos_per_row=[videos[r] for r in rows],
                **episode_fields(rollout.episode_media.media_rows(rows, images, videos)))


def _pad(x: paddle.Tensor, width: int, value, left: bool) -> paddle.Tensor:
    missing = width - x.shape[1]
    if missing == 0:
        return x
    filler = paddle.full([x.shape[0], missing], value, dtype=x.dtype)
    return paddle.concat([filler, x] if left else [x, filler], axis=1)


def concat_rollouts(rollouts: list[Rollout], pad_token_id: int) -> Rollout:
    """One rollout holding the groups of ``rollouts`` in order."""
    if len(rollouts) == 1:
        return rollouts[0]
    prompt_width = max(r.prompt.input_ids.shape[1] for r in rollouts)
    completion_width = max(r.completion_ids.shape[1] for r in rollouts)
    prompt = PromptBatch(
        input_ids=paddle.concat([_pad(r.prompt.input_ids, prompt_width, pad_token_id, True) for r in rollouts]),
        attention_mask=paddle.concat([_pad(r.prompt.attention_mask, prompt_width, 0, True) for r in rollouts]),
        **join_media([r.prompt for r in rollouts]))
    return Rollout(
        prompt=prompt, num_generations=rollouts[0].num_generations,
        completion_ids=paddle.concat([_pad(r.completion_ids, completion_width, pad_token_id, False) for r in rollouts]),
        completion_mask=paddle.concat([_pad(r.completion_mask, completion_width, 0, False) for r in rollouts]),
        truncated=paddle.concat([r.truncated for r in rollouts]),
        sampling_logp=None if any(r.sampling_logp is None for r in rollouts) else paddle.concat(
            [_pad(r.sampling_logp, completion_width, 0.0, False) for r in rollouts]),
        **_joined_episodes(rollouts, completion_width))


def _joined_episodes(rollouts: list[Rollout], width: int) -> dict:
    """The episode fields of multi-turn ``rollouts`` joined in order (nothing for single-turn ones)."""
    if not rollouts[0].multi_turn:
        return {}
    counts = [r.episode_media_counts for r in rollouts]
    return dict(
        episode_mask=paddle.concat([_pad(r.episode_mask, width, 0, False) for r in rollouts]),
        episode_images_per_row=[n for images, _ in counts for n in images],
        episode_videos_per_row=[n for _, videos in counts for n in videos],
        **episode_fields(join_media([r.episode_media for r in rollouts])))
