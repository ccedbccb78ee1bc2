"""The GRPO objective: per-token log-probs of the completions, group advantages, and the policy loss (with TRL's
loss-type normalisations).

Log-probs are computed without a full [N, T, vocab] log-softmax: the decoder runs once over prompt +
completion; the LM head and log-softmax then run on chunks of at most ``chunk_size`` completion positions. With
gradients on, each chunk is recomputed in the backward pass, so only one chunk's logits exist at a time in
either direction. The recompute is Paddle's reentrant one: the non-reentrant one (``use_reentrant=False``) keeps
every chunk's recomputed logits until the whole backward ends, so its peak grew with the total tokens
(2 x 1024 tokens at vocab 151,936, chunk 128: +2.4 GB against +0.26 GB; ``benchmarks/logprob_memory.py``).
"""
from __future__ import annotations

from dataclasses import dataclass

import paddle
from paddle.distributed.fleet.utils import recompute

from ..generation.rollout import Rollout
from ..models.forward import embed_inputs, repeat_rows, rope_positions, text_positions


def _token_logprobs(lm_head, hidden: paddle.Tensor, targets: paddle.Tensor, temperature: float) -> paddle.Tensor:
    logits = lm_head(hidden).astype("float32")
    if temperature > 0:
        logits = logits / temperature
    target_logits = paddle.take_along_axis(logits, targets.unsqueeze(-1), axis=-1).squeeze(-1)
    return target_logits - paddle.logsumexp(logits, axis=-1)


def chunked_token_logprobs(lm_head, hidden: paddle.Tensor, targets: paddle.Tensor, chunk_size: int,
                           temperature: float = 1.0) -> paddle.Tensor:
    """log softmax(lm_head(hidden) / temperature)[targets], shape of ``targets``, ``chunk_size`` rows at a time."""
    shape = targets.shape
    flat_hidden = hidden.reshape([-1, hidden.shape[-1]])
    flat_targets = targets.reshape([-1])
    use_recompute = not flat_hidden.stop_gradient
    pieces = []
    for start in range(0, flat_targets.shape[0], chunk_size):
        h = flat_hidden[start:start + chunk_size]
        t = flat_targets[start:start + chunk_size]
        if use_recompute:
            pieces.append(recompute(_token_logprobs, lm_head, h, t, temperature, use_reentrant=True))
        else:
            pieces.append(_token_logprobs(lm_head, h, t, temperature))
    return paddle.concat(pieces).reshape(shape)


def completion_logprobs(model, rollout: Rollout, chunk_size: int, temperature: float = 1.0) -> paddle.Tensor:
    """[B*G, T] log-probs of ``rollout.completion_ids`` under ``model`` (grad flows if enabled)."""
    prompt, g = rollout.prompt, rollout.num_generations
    prompt_embeds = embed_inputs(model, prompt.input_ids, prompt.pixel_values, prompt.image_grid_thw)
    positions, next_position = rope_positions(model, prompt.input_ids, prompt.attention_mask, prompt.image_grid_thw)
    completion_len = rollout.completion_ids.shape[1]
    completion_embeds = model.model.get_input_embeddings()(rollout.completion_ids)
    embeds = paddle.concat([repeat_rows(prompt_embeds, g), completion_embeds.astype(prompt_embeds.dtype)], axis=1)
    positions = paddle.concat([repeat_rows(positions, g, axis=1),
                               text_positions(repeat_rows(next_position, g), completion_len)], axis=2)
    prompt_mask = repeat_rows(prompt.attention_mask, g)
    attention_mask = paddle.concat([prompt_mask, paddle.ones_like(rollout.completion_ids, dtype=prompt_mask.dtype)], axis=1)
    hidden = model.model(inputs_embeds=embeds, attention_mask=attention_mask, position_ids=positions,
                         use_cache=False, return_dict=True).last_hidden_state
    prompt_len = prompt.input_ids.shape[1]
    # the state at position i predicts token i + 1
    hidden = hidden[:, prompt_len - 1: prompt_len - 1 + completion_len]
    return chunked_token_logprobs(model.lm_head, hidden, rollout.completion_ids, chunk_size, temperature)


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
    if scale_rewards not in ("group", "batch", "none"):
        raise ValueError(f"scale_rewards must be group, batch or none, got {scale_rewards!r}")
    valid = ~paddle.isnan(rewards)
    grouped, grouped_valid = rewards.reshape([-1, num_generations]), valid.reshape([-1, num_generations])
    advantages = (grouped - _nan_mean(grouped, grouped_valid, axis=1)).reshape([-1])
    if scale_rewards == "group":
        advantages = advantages / (paddle.repeat_interleave(_nan_std(grouped, grouped_valid, axis=1).reshape([-1]),
                                                            num_generations) + 1e-4)
    elif scale_rewards == "batch":
        advantages = advantages / (_nan_std(rewards, valid) + 1e-4)
    return paddle.where(paddle.isnan(advantages), paddle.zeros_like(advantages), advantages)


@dataclass
class LossStats:
    kl: float
    clip_low: float
    clip_high: float
    clip_region: float


def grpo_loss(logp, old_logp, ref_logp, advantages, mask, *, beta: float, epsilon_low: float,
              epsilon_high: float, loss_type: str, max_completion_length: int,
              num_items_in_batch: float | None = None) -> tuple[paddle.Tensor, LossStats]:
    """Clipped policy-gradient loss with a k3 KL penalty.

    ratio_t = exp(logp_t - old_logp_t)
    l_t = -min(ratio_t * A, clip(ratio_t, 1 - eps_low, 1 + eps_high) * A) + beta * kl_t
    kl_t = exp(ref_t - logp_t) - (ref_t - logp_t) - 1          (k3 estimator, >= 0)

    Normalisation over the mask m (N rows, T tokens):
    grpo: mean_i( sum_t l m / sum_t m );  bnpo: sum l m / sum m;
    dr_grpo: sum l m / (N * max_completion_length);  dapo: sum l m / num_items_in_batch
    (completion tokens in the whole optimizer step, across accumulation micro-batches).
    """
    mask = mask.astype(logp.dtype)
    ratio = paddle.exp(logp - old_logp)
    adv = advantages.unsqueeze(1)
    clipped = paddle.clip(ratio, 1 - epsilon_low, 1 + epsilon_high)
    per_token = -paddle.minimum(ratio * adv, clipped * adv)
    kl = None
    if beta != 0.0:
        delta = ref_logp - logp
        kl = paddle.exp(delta) - delta - 1
        per_token = per_token + beta * kl
    tokens = mask.sum().clip(min=1.0)
    if loss_type == "grpo":
        loss = ((per_token * mask).sum(axis=1) / mask.sum(axis=1).clip(min=1.0)).mean()
    elif loss_type == "bnpo":
        loss = (per_token * mask).sum() / tokens
    elif loss_type == "dr_grpo":
        loss = (per_token * mask).sum() / (logp.shape[0] * max_completion_length)
    elif loss_type == "dapo":
        denominator = tokens if num_items_in_batch is None else num_items_in_batch
        loss = (per_token * mask).sum() / denominator
    else:
        raise ValueError(f"unknown loss_type {loss_type!r}")

    with paddle.no_grad():
        low = ((ratio < 1 - epsilon_low) & (adv < 0)).astype(mask.dtype)
        high = ((ratio > 1 + epsilon_high) & (adv > 0)).astype(mask.dtype)
        stats = LossStats(
            kl=float((kl * mask).sum() / tokens) if kl is not None else 0.0,
            clip_low=float((low * mask).sum() / tokens),
            clip_high=float((high * mask).sum() / tokens),
            clip_region=float(((low + high) * mask).sum() / tokens),
        )
    return loss, stats
