"""The GRPO objective: per-token log-probs of the completions, group advantages, and the policy loss (TRL 1.16's
loss types, each one objective and one normalisation in ``LOSS_TYPES``).

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

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
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

    ``entropy`` "none": the log-probs alone. "metric": also each row's entropy H = -sum_v p_v log p_v =
    log-sum-exp - sum_v p_v z_v, from the same softmax (a batched dot product per row: no [N, V] temporary), as a
    second output without gradient (``mark_non_differentiable``; ``backward`` ignores the zeros it receives for
    it). "gradient": the same entropy with its gradient dH/dz_v = -p_v (z_v - sum_u p_u z_u) (``entropy_coef``'s
    bonus), for which the logits are kept until the backward. Rounding can leave a peaked row's entropy a hair
    below 0; it is clipped there. The float32 dot product over the vocabulary is within ~2e-3 of float64 at vocab
    151,936 with logits up to ~30 (exact to ~1e-5 at small vocabularies)."""

    @staticmethod
    def forward(ctx, logits, targets, entropy="none"):
        probs = paddle.nn.functional.softmax(logits, axis=-1)
        offsets = paddle.arange(logits.shape[0], dtype=targets.dtype) * logits.shape[1]
        top = paddle.gather(probs.reshape([-1]), offsets + logits.argmax(axis=-1))
        log_normalizer = logits.max(axis=-1) - paddle.log(top)
        picked = offsets + targets
        logp = paddle.gather(logits.reshape([-1]), picked) - log_normalizer
        if entropy == "none":
            ctx.save_for_backward(probs, picked)
            return logp
        expected_logit = paddle.bmm(probs.unsqueeze(1), logits.unsqueeze(2)).reshape([-1])
        row_entropy = (log_normalizer - expected_logit).clip(min=0.0)
        if entropy == "gradient":
            ctx.save_for_backward(probs, picked, logits, expected_logit)
        else:
            ctx.save_for_backward(probs, picked)
            ctx.mark_non_differentiable(row_entropy)
        return logp, row_entropy

    @staticmethod
    def backward(ctx, grad, *entropy_grad):
        probs, picked, *for_entropy = ctx.saved_tensor()
        flat = probs * -grad.unsqueeze(-1)
        if for_entropy and entropy_grad[0] is not None:
            logits, expected_logit = for_entropy
            flat = flat - probs * (logits - expected_logit.unsqueeze(-1)) * entropy_grad[0].unsqueeze(-1)
        flat = flat.reshape([-1])
        paddle.scatter_(flat, picked, paddle.gather(flat, picked) + grad)
        return flat.reshape(probs.shape), None


def _token_logprobs(lm_head, hidden: paddle.Tensor, targets: paddle.Tensor, temperature: float,
                    entropy: str = "none"):
    logits = lm_head(hidden).astype("float32")
    if temperature > 0 and temperature != 1:
        logits = logits / temperature
    return _TargetLogSoftmax.apply(logits, targets, entropy)


def chunked_token_logprobs(lm_head, hidden: paddle.Tensor, targets: paddle.Tensor, chunk_size: int,
                           temperature: float = 1.0, with_entropy: bool = False, entropy_gradient: bool = False):
    """log softmax(lm_head(hidden) / temperature)[targets], shape of ``targets``, ``chunk_size`` rows at a time.
    When one chunk holds every row there is no memory to bound: no slicing and no recompute.

    ``with_entropy``: (log-probs, entropies), the entropy of softmax(lm_head(hidden) / temperature) at every
    position, from the same pass over each chunk (recomputed chunks compute it again in the backward, one dot
    product per row); the entropies carry no gradient unless ``entropy_gradient`` (the entropy bonus)."""
    entropy = ("gradient" if entropy_gradient else "metric") if with_entropy else "none"
    shape = targets.shape
    flat_hidden = hidden.reshape([-1, hidden.shape[-1]])
    flat_targets = targets.reshape([-1])
    if flat_targets.shape[0] <= chunk_size:
        pieces = [_token_logprobs(lm_head, flat_hidden, flat_targets, temperature, entropy)]
    else:
        use_recompute = not flat_hidden.stop_gradient
        pieces = []
        for start in range(0, flat_targets.shape[0], chunk_size):
            h = flat_hidden[start:start + chunk_size]
            t = flat_targets[start:start + chunk_size]
            if use_recompute:
                pieces.append(recompute(_token_logprobs, lm_head, h, t, temperature, entropy, use_reentrant=True))
            else:
                pieces.append(_token_logprobs(lm_head, h, t, temperature, entropy))
    if not with_entropy:
        return _joined(pieces, shape)
    entropies = _joined([p[1] for p in pieces], shape)
    return _joined([p[0] for p in pieces], shape), entropies if entropy_gradient else entropies.detach()


def _joined(pieces: list, shape) -> paddle.Tensor:
    return (pieces[0] if len(pieces) == 1 else paddle.concat(pieces)).reshape(shape)


def completion_logprobs(model, rollout: Rollout, chunk_size: int, temperature: float = 1.0,
                        with_entropy: bool = False, entropy_gradient: bool = False):
    """[B*G, T] log-probs of ``rollout.completion_ids`` under ``model`` (grad flows if enabled); with
    ``with_entropy`` (log-probs, [B*G, T] entropies of the policy at each completion position, without gradient
    unless ``entropy_gradient``).

    The prompt goes through the decoder once per prompt and its K/V are repeated for its G completions
    (``RepeatedPrompt``). Each row runs whole instead under gradient checkpointing (a recomputed layer's K/V are
    made without gradient, so a shared prompt would get none from the completions) and for Qwen3-VL (its DeepStack
    features enter through the full model's forward)."""
    inputs = _completion_inputs(model, rollout)
    shared = inputs[0].deepstack is None and not recomputes_layers(text_decoder(model).config)
    hidden = (_shared_prompt_hidden if shared else _full_rows_hidden)(model, rollout, inputs)
    return chunked_token_logprobs(model.lm_head, hidden, rollout.completion_ids, chunk_size, temperature,
                                  with_entropy, entropy_gradient)


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


def advantages_for(estimator: str, rewards: paddle.Tensor, num_generations: int, lengths: paddle.Tensor,
                   scale_rewards: str = "group") -> paddle.Tensor:
    """The advantage of each completion by the named estimator (config key ``adv_estimator``); ``lengths``: each
    completion's tokens."""
    return ADVANTAGE_ESTIMATORS[estimator](rewards, num_generations, lengths=lengths, scale_rewards=scale_rewards)


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


@dataclass(frozen=True)
class LossSettings:
    """The policy loss's settings: GRPOConfig's keys of the same names, read as TRL 1.16 reads them (``of``)."""

    loss_type: str = "grpo"
    beta: float = 0.0  # 0: no KL term in the loss
    epsilon_low: float = 0.2
    epsilon_high: float = 0.2  # cispo: the cap of the importance weight itself (ScaleRL's eps_max)
    max_completion_length: int = 1
    kl_estimator: str = "k3"
    importance_sampling_level: str = "token"
    delta: Optional[float] = None
    sapo_temperature_pos: float = 1.0
    sapo_temperature_neg: float = 1.05
    vespo_k_pos: float = 2.0
    vespo_lambda_pos: float = 3.0
    vespo_k_neg: float = 3.0
    vespo_lambda_neg: float = 2.0
    off_policy_mask_threshold: Optional[float] = None
    use_bias_correction_kl: bool = False
    entropy_coef: float = 0.0
    gradient_accumulation_steps: int = 1

    @classmethod
    def of(cls, config) -> "LossSettings":
        """From a GRPOConfig; the KL is in the loss only with ``use_kl_loss`` (else the trainer puts it in the
        reward)."""
        own = {f.name: getattr(config, f.name) for f in dataclasses.fields(cls)
               if f.name not in ("beta", "epsilon_low", "epsilon_high")}
        return cls(**own, beta=config.beta if config.use_kl_loss else 0.0, epsilon_low=config.epsilon,
                   epsilon_high=config.clip_high)


@dataclass
class _Weights:
    """What every loss type starts from, for N completions of T tokens: the policy's log-probs, the per-token
    log-ratio to the old policy, the importance weight w (coef_1: per token [N, T], or per completion [N, 1] at
    sequence level), the advantages [N, 1] and the float mask."""

    logp: paddle.Tensor
    log_ratio: paddle.Tensor
    weight: paddle.Tensor
    advantages: paddle.Tensor
    mask: paddle.Tensor


def clipped_objective(w: _Weights, s: LossSettings):
    """grpo, bnpo, dr_grpo, dapo, luspo: PPO's clipped surrogate
    l_t = -min(min(w, delta) A, clip(w, 1 - eps_low, 1 + eps_high) A);
    ``delta`` (INTELLECT-2's two-sided clipping; None: off) caps w, which only a negative advantage reaches.
    Logged: the fractions clipped below (w < 1 - eps_low, A < 0), above (w > 1 + eps_high, A > 0) and either."""
    clipped = paddle.clip(w.weight, 1 - s.epsilon_low, 1 + s.epsilon_high)
    weight = w.weight if s.delta is None else paddle.clip(w.weight, max=s.delta)
    per_token = -paddle.minimum(weight * w.advantages, clipped * w.advantages)
    low = (weight < 1 - s.epsilon_low) & (w.advantages < 0)
    high = (weight > 1 + s.epsilon_high) & (w.advantages > 0)
    return per_token, {"clip_ratio/low_mean": _masked_mean(low, w.mask),
                       "clip_ratio/high_mean": _masked_mean(high, w.mask),
                       "clip_ratio/region_mean": _masked_mean(low | high, w.mask)}


def cispo_objective(w: _Weights, s: LossSettings):
    """cispo (MiniMax-M1, arXiv 2506.13585; ScaleRL): the importance weight is clipped, not the advantage-scaled
    one, and carries no gradient: l_t = -sg(min(w, eps_max)) A logp_t, with eps_max = ``epsilon_high``.
    Logged: ``cispo_clip_ratio``, the fraction with w > eps_max and A > 0."""
    capped = paddle.clip(w.weight, max=s.epsilon_high).detach()
    clipped = (w.weight > s.epsilon_high) & (w.advantages > 0)
    return -capped * w.advantages * w.logp, {"cispo_clip_ratio": _masked_mean(clipped, w.mask)}


def sapo_objective(w: _Weights, s: LossSettings):
    """sapo (Soft Adaptive Policy Optimization, arXiv 2511.20347): a smooth gate instead of the clip,
    l_t = -sigmoid(tau (w - 1)) * 4 / tau * A, tau = ``sapo_temperature_pos`` for A > 0, else
    ``sapo_temperature_neg``."""
    tau = paddle.where(w.advantages > 0, paddle.full_like(w.advantages, s.sapo_temperature_pos),
                       paddle.full_like(w.advantages, s.sapo_temperature_neg))
    return -paddle.nn.functional.sigmoid(tau * (w.weight - 1)) * 4 / tau * w.advantages, {}


def vespo_objective(w: _Weights, s: LossSettings):
    """vespo (Variational Sequence-level Soft Policy Optimization, arXiv 2602.10693): l_t = -sg(phi(W)) A logp_t
    with W = exp(clip(sum_t m_t clip(log_ratio_t, -20, 20), ln 1e-8, 20)) the sequence's importance weight and
    phi(W) = exp(lambda + k ln W - lambda W) (phi(1) = 1; non-finite values 0); (k, lambda) = (``vespo_k_pos``,
    ``vespo_lambda_pos``) for A >= 0, else the ``_neg`` pair, lambda at least 1e-4. Logged: ``vespo/phi_seq_mean``."""
    floor = math.log(1e-8)
    with paddle.no_grad():
        log_w = (w.log_ratio.clip(-20.0, 20.0) * w.mask).sum(axis=1, keepdim=True).clip(floor, 20.0)
        nonnegative = w.advantages >= 0
        k = paddle.where(nonnegative, paddle.full_like(log_w, s.vespo_k_pos), paddle.full_like(log_w, s.vespo_k_neg))
        lam = paddle.where(nonnegative, paddle.full_like(log_w, s.vespo_lambda_pos),
                           paddle.full_like(log_w, s.vespo_lambda_neg)).clip(min=1e-4)
        phi = paddle.exp(lam + k * log_w - lam * paddle.exp(log_w))
        phi = paddle.where(paddle.isfinite(phi), phi, paddle.zeros_like(phi))
    return -phi * w.advantages * w.logp, {"vespo/phi_seq_mean": _masked_mean(phi, w.mask)}


def per_sequence_mean(per_token, mask, num_items_in_batch, s: LossSettings):
    """mean_i( sum_t l m / sum_t m )"""
    return ((per_token * mask).sum(axis=1) / mask.sum(axis=1).clip(min=1.0)).mean()


def token_mean(per_token, mask, num_items_in_batch, s: LossSettings):
    """sum l m / sum m, over the micro-batch"""
    return (per_token * mask).sum() / mask.sum().clip(min=1.0)


def fixed_length_mean(per_token, mask, num_items_in_batch, s: LossSettings):
    """sum l m / (N * max_completion_length)"""
    return (per_token * mask).sum() / (mask.shape[0] * s.max_completion_length)


def step_token_mean(per_token, mask, num_items_in_batch, s: LossSettings):
    """sum l m / num_items_in_batch: the completion tokens of the whole optimizer step (all micro-batches, mean
    over ranks); the micro-batch's own tokens when it is alone"""
    denominator = mask.sum() if num_items_in_batch is None else num_items_in_batch
    return (per_token * mask).sum() / max(float(denominator), 1.0)


def sequence_sum_mean(per_token, mask, num_items_in_batch, s: LossSettings):
    """mean_i( sum_t l m ): each completion weighs by its length (LUSPO, arXiv 2602.05261)"""
    return (per_token * mask).sum(axis=1).mean()


@dataclass(frozen=True)
class LossType:
    objective: Callable  # (_Weights, LossSettings) -> (per-token loss, its logged statistics)
    normalisation: Callable  # (per-token loss, mask, num_items_in_batch, settings) -> the micro-batch's loss
    per_micro_batch: bool = True  # divided by gradient_accumulation_steps (not when normalised by the step's tokens)


LOSS_TYPES = {  # TRL 1.16's loss_type values
    "grpo": LossType(clipped_objective, per_sequence_mean),
    "bnpo": LossType(clipped_objective, token_mean),
    "dr_grpo": LossType(clipped_objective, fixed_length_mean),
    "dapo": LossType(clipped_objective, step_token_mean, per_micro_batch=False),
    "luspo": LossType(clipped_objective, sequence_sum_mean),
    "cispo": LossType(cispo_objective, step_token_mean, per_micro_batch=False),
    "sapo": LossType(sapo_objective, per_sequence_mean),
    "vespo": LossType(vespo_objective, step_token_mean, per_micro_batch=False),
}


def off_policy_mask(advantages, logp, old_logp, mask, threshold: float) -> paddle.Tensor:
    """DeepSeek-V3.2's off-policy sequence mask (``off_policy_mask_threshold``, its delta): [N, 1], 0 for a
    completion with A < 0 whose mean over its tokens of old_logp - logp exceeds the threshold, else 1."""
    kl = old_logp - logp.detach()
    kl = paddle.where(paddle.isnan(kl), paddle.zeros_like(kl), kl)
    mean_kl = (kl * mask).sum(axis=1, keepdim=True) / mask.sum(axis=1, keepdim=True).clip(min=1.0)
    return ((advantages >= 0) | (mean_kl <= threshold)).astype(mask.dtype)


def entropy_threshold(entropies: np.ndarray, top_entropy_quantile: float) -> Optional[float]:
    """The entropy at quantile q = 1 - ``top_entropy_quantile`` of ``entropies`` (every completion token of the
    micro-batch over all ranks), None when there are none; TRL's ``torch.quantile`` to the last bit: linear
    interpolation in float32, rank q (n - 1) in float32 (so a rank that is whole in exact arithmetic, 0.8 x 25, may
    fall a hair past its token and leave it out), the interpolation one fused multiply-add (PyTorch's ``lerp``:
    from below for weights under 0.5, else from above). numpy's quantile works in float64 and differs there."""
    values = np.sort(np.asarray(entropies, dtype=np.float32).reshape(-1))
    if not values.size:
        return None
    rank = np.float32(1 - top_entropy_quantile) * np.float32(values.size - 1)
    below, above = values[int(np.floor(rank))], values[int(np.ceil(rank))]
    weight, span = rank - np.floor(rank), float(above - below)
    if weight < 0.5:
        return float(np.float32(float(below) + float(weight) * span))
    return float(np.float32(float(above) - span * float(np.float32(1) - weight)))


def high_entropy_mask(entropies: paddle.Tensor, mask: paddle.Tensor, threshold: Optional[float]) -> paddle.Tensor:
    """TRL's ``get_high_entropy_mask``: the completion tokens whose entropy is at least ``threshold`` (the "80/20"
    forking tokens, arXiv 2506.01939); none when ``threshold`` is None."""
    if threshold is None:
        return paddle.zeros_like(mask)
    return ((entropies * mask >= threshold) & (mask > 0)).astype(mask.dtype)


def grpo_loss(logp, old_logp, ref_logp, advantages, mask, settings: LossSettings, *,
              num_items_in_batch: Optional[float] = None, entropies: Optional[paddle.Tensor] = None,
              entropy_mask: Optional[paddle.Tensor] = None) -> tuple[paddle.Tensor, dict[str, float]]:
    """The micro-batch's policy loss as TRL 1.16's ``_compute_loss`` makes it, and the statistics it logs under
    TRL's names. For N completions of T tokens, mask m:

    w = exp(logp_t - old_logp_t) per token, or for every token of completion i exp(sum_t m (logp - old) / sum_t m)
    (``importance_sampling_level`` sequence: GSPO, arXiv 2507.18071);
    l_t = the loss type's objective (``LOSS_TYPES``: clipped, cispo, sapo, vespo), times the off-policy mask
    (``off_policy_mask_threshold``) and the high-entropy mask (``entropy_mask``, from ``top_entropy_quantile``);
    plus beta * kl_t, kl_t = ``kl_divergence(logp, ref, kl_estimator)`` (k3 by default), times w with
    ``use_bias_correction_kl``; then the loss type's normalisation, divided by ``gradient_accumulation_steps``
    unless it divides by the step's tokens. With ``entropy_coef`` c: minus c * sum H m' / sum m' /
    gradient_accumulation_steps, H the policy's entropies, m' the mask times the high-entropy mask.
    """
    loss_type = LOSS_TYPES.get(settings.loss_type)
    if loss_type is None:
        raise ValueError(f"unknown loss_type {settings.loss_type!r}")
    mask = mask.astype(logp.dtype)
    log_ratio = logp - old_logp
    if settings.importance_sampling_level == "sequence":
        level_log_ratio = (log_ratio * mask).sum(axis=1, keepdim=True) / mask.sum(axis=1, keepdim=True).clip(min=1.0)
    elif settings.importance_sampling_level == "token":
        level_log_ratio = log_ratio
    else:
        raise ValueError(f"unknown importance_sampling_level {settings.importance_sampling_level!r}")
    adv = advantages.unsqueeze(1)
    weights = _Weights(logp, log_ratio, paddle.exp(level_log_ratio), adv, mask)
    per_token, stats = loss_type.objective(weights, settings)
    if settings.off_policy_mask_threshold is not None:
        per_token = per_token * off_policy_mask(adv, logp, old_logp, mask, settings.off_policy_mask_threshold)
    if entropy_mask is not None:
        per_token = per_token * entropy_mask
    kl = None
    if settings.beta != 0.0:
        kl = kl_divergence(logp, ref_logp, settings.kl_estimator)
        if settings.use_bias_correction_kl:
            kl = kl * weights.weight
        per_token = per_token + settings.beta * kl
    policy_loss = loss_type.normalisation(per_token, mask, num_items_in_batch, settings)
    loss = policy_loss / settings.gradient_accumulation_steps if loss_type.per_micro_batch else policy_loss
    if settings.entropy_coef != 0.0:
        bonus_mask = mask if entropy_mask is None else mask * entropy_mask
        entropy = (entropies * bonus_mask).sum() / bonus_mask.sum().clip(min=1.0)
        loss = loss - settings.entropy_coef * entropy / settings.gradient_accumulation_steps
        stats.update({"policy_loss": float(policy_loss), "entropy_coef": settings.entropy_coef})
    with paddle.no_grad():
        stats["kl"] = float((kl * mask).sum() / mask.sum().clip(min=1.0)) if kl is not None else 0.0
    return loss, stats


def _masked_mean(flags: paddle.Tensor, mask: paddle.Tensor) -> float:
    """TRL 1.16's ``global_masked_mean`` on one process: with a value per token ([N, T]) its mean over the
    completion tokens; with one per completion ([N, 1]: GSPO's ratios, VESPO's phi) its mean over completions,
    every row counted."""
    with paddle.no_grad():
        flags = flags.astype(mask.dtype)
        if flags.shape[1] == 1:
            return float(flags.mean())
        return float((flags * mask).sum() / mask.sum().clip(min=1.0))
