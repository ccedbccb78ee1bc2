"""The GRPO objective: per-token log-probs of the completions, group advantages, and the policy loss (with TRL's
loss-type normalisations).

Log-probs are computed without a full [N, T, vocab] log-softmax: the decoder runs once over prompt +
completion; the LM head and log-softmax then run on chunks of at most ``chunk_size`` completion positions. With
gradients on and more than one chunk, each chunk is recomputed in the backward pass, so only one chunk's logits exist at a time in
either direction. The recompute is Paddle's reentrant one: the non-reentrant one (``use_reentrant=False``) keeps
every chunk's recomputed logits until the whole backward ends, so its peak grew with the total tokens
(2 x 1024 tokens at vocab 151,936, chunk 128: +2.4 GB against +0.26 GB; ``benchmarks/logprob_memory.py``).
The training forward also asks for the policy's entropy at each completion position (the ``entropy`` metric),
read from the same chunk's softmax.
"""
from __future__ import annotations

from dataclasses import dataclass

import paddle
from paddle.autograd import PyLayer
from paddle.distributed.fleet.utils import recompute

from ..generation.rollout import Rollout
from ..models.forward import (RepeatedPrompt, embed_inputs, recomputes_layers, repeat_rows, rope_positions,
                              text_decoder, text_positions)


class _TargetLogSoftmax(PyLayer):
    """log softmax(logits)[target] for each row of [N, V] float32 logits; gradient g * (onehot(target) - softmax).
    One softmax kernel serves both directions; the log-sum-exp is read back from the softmax at each row's largest
    logit (a probability >= 1/V there, so it never underflows: no clamp as in ``cross_entropy``, which stops at
    -64); targets are picked by flat index (``take_along_axis`` cost as much as the softmax here on CPU).

    With ``with_entropy`` also each row's entropy H = -sum_v p_v log p_v = log-sum-exp - sum_v p_v logit_v, from
    the same softmax (a batched dot product per row: no [N, V] temporary), as a second output without gradient
    (a metric; ``mark_non_differentiable``, and ``backward`` ignores the zeros it receives for it). Rounding can
    leave a peaked row's entropy a hair below 0; it is clipped there. The float32 dot product over the vocabulary
    is within ~2e-3 of float64 at vocab 151,936 with logits up to ~30 (exact to ~1e-5 at small vocabularies)."""

    @staticmethod
    def forward(ctx, logits, targets, with_entropy=False):
        probs = paddle.nn.functional.softmax(logits, axis=-1)
        offsets = paddle.arange(logits.shape[0], dtype=targets.dtype) * logits.shape[1]
        top = paddle.gather(probs.reshape([-1]), offsets + logits.argmax(axis=-1))
        log_normalizer = logits.max(axis=-1) - paddle.log(top)
        picked = offsets + targets
        ctx.save_for_backward(probs, picked)
        logp = paddle.gather(logits.reshape([-1]), picked) - log_normalizer
        if not with_entropy:
            return logp
        expected_logit = paddle.bmm(probs.unsqueeze(1), logits.unsqueeze(2)).reshape([-1])
        entropy = (log_normalizer - expected_logit).clip(min=0.0)
        ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    def backward(ctx, grad, *_entropy_grad):
        probs, picked = ctx.saved_tensor()
        flat = (probs * -grad.unsqueeze(-1)).reshape([-1])
        paddle.scatter_(flat, picked, paddle.gather(flat, picked) + grad)
        return flat.reshape(probs.shape), None


def _token_logprobs(lm_head, hidden: paddle.Tensor, targets: paddle.Tensor, temperature: float,
                    with_entropy: bool = False):
    logits = lm_head(hidden).astype("float32")
    if temperature > 0 and temperature != 1:
        logits = logits / temperature
    return _TargetLogSoftmax.apply(logits, targets, with_entropy)


def chunked_token_logprobs(lm_head, hidden: paddle.Tensor, targets: paddle.Tensor, chunk_size: int,
                           temperature: float = 1.0, with_entropy: bool = False):
    """log softmax(lm_head(hidden) / temperature)[targets], shape of ``targets``, ``chunk_size`` rows at a time.
    When one chunk holds every row there is no memory to bound: no slicing and no recompute.

    ``with_entropy``: (log-probs, entropies), the entropy of softmax(lm_head(hidden) / temperature) at every
    position, from the same pass over each chunk (recomputed chunks compute it again in the backward, one dot
    product per row); the entropies carry no gradient."""
    shape = targets.shape
    flat_hidden = hidden.reshape([-1, hidden.shape[-1]])
    flat_targets = targets.reshape([-1])
    if flat_targets.shape[0] <= chunk_size:
        pieces = [_token_logprobs(lm_head, flat_hidden, flat_targets, temperature, with_entropy)]
    else:
        use_recompute = not flat_hidden.stop_gradient
        pieces = []
        for start in range(0, flat_targets.shape[0], chunk_size):
            h = flat_hidden[start:start + chunk_size]
            t = flat_targets[start:start + chunk_size]
            if use_recompute:
                pieces.append(recompute(_token_logprobs, lm_head, h, t, temperature, with_entropy,
                                        use_reentrant=True))
            else:
                pieces.append(_token_logprobs(lm_head, h, t, temperature, with_entropy))
    if not with_entropy:
        return _joined(pieces, shape)
    return _joined([p[0] for p in pieces], shape), _joined([p[1] for p in pieces], shape).detach()


def _joined(pieces: list, shape) -> paddle.Tensor:
    return (pieces[0] if len(pieces) == 1 else paddle.concat(pieces)).reshape(shape)


def completion_logprobs(model, rollout: Rollout, chunk_size: int, temperature: float = 1.0,
                        with_entropy: bool = False):
    """[B*G, T] log-probs of ``rollout.completion_ids`` under ``model`` (grad flows if enabled); with
    ``with_entropy`` (log-probs, [B*G, T] entropies of the policy at each completion position, no gradient).

    The prompt goes through the decoder once per prompt and its K/V are repeated for its G completions
    (``RepeatedPrompt``). Each row runs whole instead under gradient checkpointing (a recomputed layer's K/V are
    made without gradient, so a shared prompt would get none from the completions) and for Qwen3-VL (its DeepStack
    features enter through the full model's forward)."""
    inputs = _completion_inputs(model, rollout)
    shared = inputs[0].deepstack is None and not recomputes_layers(text_decoder(model).config)
    hidden = (_shared_prompt_hidden if shared else _full_rows_hidden)(model, rollout, inputs)
    return chunked_token_logprobs(model.lm_head, hidden, rollout.completion_ids, chunk_size, temperature,
                                  with_entropy)


def _completion_inputs(model, rollout: Rollout):
    """The prompts' embeddings (images once per prompt; ``InputEmbeddings``) and M-RoPE positions, the completions'
    embeddings and positions (continuing each prompt's), and the 2D mask over prompt + completion of every row."""
    prompt, g = rollout.prompt, rollout.num_generations
    prompt_embeds = embed_inputs(model, prompt.input_ids, prompt.pixel_values, prompt.image_grid_thw)
    positions, next_position = rope_positions(model, prompt.input_ids, prompt.attention_mask, prompt.image_grid_thw)
    completion_embeds = text_decoder(model).embed_tokens(rollout.completion_ids).astype(prompt_embeds.embeds.dtype)
    completion_positions = text_positions(repeat_rows(next_position, g), rollout.completion_ids.shape[1])
    prompt_mask = repeat_rows(prompt.attention_mask, g)
    mask = paddle.concat([prompt_mask, paddle.ones_like(rollout.completion_ids, dtype=prompt_mask.dtype)], axis=1)
    return prompt_embeds, positions, completion_embeds, completion_positions, mask


def _shared_prompt_hidden(model, rollout: Rollout, inputs) -> paddle.Tensor:
    g, text = rollout.num_generations, text_decoder(model)
    prompt_embeds, positions, completion_embeds, completion_positions, mask = inputs
    prompt_out = text(inputs_embeds=prompt_embeds.embeds, attention_mask=rollout.prompt.attention_mask,
                      position_ids=positions, use_cache=True, return_dict=True)
    hidden = text(inputs_embeds=completion_embeds, attention_mask=mask, position_ids=completion_positions,
                  past_key_values=RepeatedPrompt(prompt_out.past_key_values, g), use_cache=True,
                  return_dict=True).last_hidden_state
    # the prompt's last state predicts the first completion token, completion state i the token i + 1
    return paddle.concat([repeat_rows(prompt_out.last_hidden_state[:, -1:], g), hidden[:, :-1]], axis=1)


def _full_rows_hidden(model, rollout: Rollout, inputs) -> paddle.Tensor:
    g = rollout.num_generations
    prompt_embeds, positions, completion_embeds, completion_positions, mask = inputs
    embeds = prompt_embeds.repeat(g).append(completion_embeds)
    positions = paddle.concat([repeat_rows(positions, g, axis=1), completion_positions], axis=2)
    hidden = model.model(**embeds.model_inputs(), attention_mask=mask, position_ids=positions, use_cache=False,
                         return_dict=True).last_hidden_state
    prompt_len, completion_len = rollout.prompt.input_ids.shape[1], rollout.completion_ids.shape[1]
    # the state at position i predicts token i + 1
    return hidden[:, prompt_len - 1: prompt_len - 1 + completion_len]


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
    return _zero_nan(advantages)


def _zero_nan(x: paddle.Tensor) -> paddle.Tensor:
    return paddle.where(paddle.isnan(x), paddle.zeros_like(x), x)


def rloo_advantages(rewards: paddle.Tensor, num_generations: int, **_) -> paddle.Tensor:
    """RLOO (arXiv 2402.14740): A_i = r_i - mean_{j != i} r_j over the scored completions of i's group, which is
    k / (k - 1) * (r_i - mean(group)) for k scored completions; 0 for a group with fewer than two."""
    valid = ~paddle.isnan(rewards)
    grouped, grouped_valid = rewards.reshape([-1, num_generations]), valid.reshape([-1, num_generations])
    count = grouped_valid.astype(rewards.dtype).sum(axis=1, keepdim=True)
    centered = grouped - _nan_mean(grouped, grouped_valid, axis=1)
    scale = paddle.where(count > 1, count / (count - 1), paddle.full_like(count, float("nan")))
    return _zero_nan((centered * scale).reshape([-1]))


def reinforce_plus_plus_advantages(rewards: paddle.Tensor, num_generations: int, mask: paddle.Tensor,
                                   **_) -> paddle.Tensor:
    """REINFORCE++ (arXiv 2501.03262) with an outcome reward, as EasyR1 computes it: every completion token's
    return is the completion's reward (gamma 1), whitened over all completion tokens of the batch:
    A_i = (r_i - mu) / sqrt(var + 1e-8), mu and the unbiased var over tokens (a completion weighs by its length);
    no group baseline."""
    valid = ~paddle.isnan(rewards)
    lengths = mask.astype(rewards.dtype).sum(axis=1) * valid.astype(rewards.dtype)
    filled = paddle.where(valid, rewards, paddle.zeros_like(rewards))
    tokens = lengths.sum()
    mean = (filled * lengths).sum() / tokens
    variance = (((filled - mean) ** 2) * lengths).sum() / (tokens - 1).clip(min=1.0)
    return _zero_nan(paddle.where(valid, (filled - mean) / (variance + 1e-8).sqrt(), paddle.zeros_like(rewards)))


def dr_grpo_advantages(rewards: paddle.Tensor, num_generations: int, **_) -> paddle.Tensor:
    """Dr. GRPO (arXiv 2503.20783): A_i = r_i - mean(group), not divided by any std."""
    return group_advantages(rewards, num_generations, "none")


ADVANTAGE_ESTIMATORS = {
    # EasyR1's adv_estimator names; "grpo" divides as scale_rewards says (TRL's key)
    "grpo": lambda rewards, num_generations, scale_rewards="group", **_: group_advantages(
        rewards, num_generations, scale_rewards),
    "rloo": rloo_advantages,
    "reinforce_plus_plus": reinforce_plus_plus_advantages,
    "dr_grpo": dr_grpo_advantages,
}


def advantages_for(estimator: str, rewards: paddle.Tensor, num_generations: int, mask: paddle.Tensor,
                   scale_rewards: str = "group") -> paddle.Tensor:
    """The advantage of each completion by the named estimator (config key ``adv_estimator``)."""
    return ADVANTAGE_ESTIMATORS[estimator](rewards, num_generations, mask=mask, scale_rewards=scale_rewards)


def kl_divergence(logp: paddle.Tensor, ref_logp: paddle.Tensor, estimator: str = "k3") -> paddle.Tensor:
    """Per-token estimate of KL(policy || reference) from sampled tokens (Schulman, "Approximating KL
    divergence"), d = ref_t - logp_t:  k1 = -d;  k2 = d^2 / 2;  k3 = exp(d) - d - 1 (>= 0, low variance)."""
    delta = ref_logp - logp
    if estimator == "k1":
        return -delta
    if estimator == "k2":
        return 0.5 * delta * delta
    if estimator == "k3":
        return paddle.exp(delta) - delta - 1
    raise ValueError(f"unknown kl_estimator {estimator!r}")


def overlong_penalty(lengths, max_completion_length: int, buffer: int, factor: float):
    """DAPO's soft overlong punishment (arXiv 2503.14476), added to the reward: 0 up to L_max - buffer, then
    -factor * (L - (L_max - buffer)) / buffer in the last ``buffer`` tokens, -factor at L_max."""
    start = max_completion_length - buffer
    return [-factor * min(max(length - start, 0), buffer) / buffer for length in lengths]


@dataclass
class LossStats:
    kl: float
    clip_low: float
    clip_high: float
    clip_region: float


def grpo_loss(logp, old_logp, ref_logp, advantages, mask, *, beta: float, epsilon_low: float,
              epsilon_high: float, loss_type: str, max_completion_length: int,
              num_items_in_batch: float | None = None, kl_estimator: str = "k3",
              importance_sampling_level: str = "token") -> tuple[paddle.Tensor, LossStats]:
    """Clipped policy-gradient loss with a KL penalty.

    ratio_t = exp(logp_t - old_logp_t)  (importance_sampling_level "token"), or for every token of sequence i
    ratio_i = exp(sum_t m_t (logp_t - old_logp_t) / sum_t m_t)  ("sequence": GSPO, arXiv 2507.18071, as TRL)
    l_t = -min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A) + beta * kl_t
    kl_t = ``kl_divergence(logp, ref, kl_estimator)``, k3 by default: exp(ref_t - logp_t) - (ref_t - logp_t) - 1
    (beta 0: no KL term in the loss; with use_kl_loss off the trainer puts it in the reward instead).

    Normalisation over the mask m (N rows, T tokens):
    grpo: mean_i( sum_t l m / sum_t m );  bnpo: sum l m / sum m;
    dr_grpo: sum l m / (N * max_completion_length);  dapo: sum l m / num_items_in_batch
    (completion tokens in the whole optimizer step, across accumulation micro-batches).
    """
    mask = mask.astype(logp.dtype)
    log_ratio = logp - old_logp
    if importance_sampling_level == "sequence":
        log_ratio = ((log_ratio * mask).sum(axis=1, keepdim=True) / mask.sum(axis=1, keepdim=True).clip(min=1.0))
    elif importance_sampling_level != "token":
        raise ValueError(f"unknown importance_sampling_level {importance_sampling_level!r}")
    ratio = paddle.exp(log_ratio)
    adv = advantages.unsqueeze(1)
    clipped = paddle.clip(ratio, 1 - epsilon_low, 1 + epsilon_high)
    per_token = -paddle.minimum(ratio * adv, clipped * adv)
    kl = None
    if beta != 0.0:
        kl = kl_divergence(logp, ref_logp, kl_estimator)
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
        low = (ratio < 1 - epsilon_low) & (adv < 0)
        high = (ratio > 1 + epsilon_high) & (adv > 0)
        stats = LossStats(
            kl=float((kl * mask).sum() / tokens) if kl is not None else 0.0,
            clip_low=_clipped_fraction(low, mask),
            clip_high=_clipped_fraction(high, mask),
            clip_region=_clipped_fraction(low | high, mask),
        )
    return loss, stats


def _clipped_fraction(clipped: paddle.Tensor, mask: paddle.Tensor) -> float:
    """TRL 1.16's clip ratios: with a ratio per token ([N, T]) the fraction of completion tokens clipped; with one
    ratio per completion ([N, 1], GSPO) the fraction of completions clipped, every row counted."""
    clipped = clipped.astype(mask.dtype)
    if clipped.shape[1] == 1:
        return float(clipped.mean())
    return float((clipped * mask).sum() / mask.sum().clip(min=1.0))
