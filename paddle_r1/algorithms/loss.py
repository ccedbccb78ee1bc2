"""The policy loss: TRL 1.16's loss types (``LOSS_TYPE_RULES``: one objective and one normalisation each, formulas in
their docstrings), the KL estimators (``KL_ESTIMATES``), the importance-sampling levels (``LOG_RATIO_LEVELS``), and the
masks (off-policy, high-entropy); each loss type, estimator and level is one entry of its registry
(``registry.Registry``), which the config reads. The log-probs it takes are ``algorithms.logprobs``'; the advantages
``algorithms.advantages``'."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from .registry import Need, Registry, paddle

KL_ESTIMATES = Registry("kl_estimator")  # Schulman, "Approximating KL divergence": d = ref_t - logp_t per sampled token


@KL_ESTIMATES.register("k1", "logp - ref")
def k1(delta):
    """k1 = -d = logp - ref: unbiased, but negative for some tokens."""
    return -delta


@KL_ESTIMATES.register("k2", "(logp - ref)^2 / 2")
def k2(delta):
    """k2 = d^2 / 2: biased, low variance, never negative."""
    return 0.5 * delta * delta


@KL_ESTIMATES.register("k3", "exp(ref - logp) - (ref - logp) - 1")
def k3(delta):
    """k3 = exp(d) - d - 1: unbiased, low variance, never negative (TRL's and verl's low_var_kl)."""
    return paddle.exp(delta) - delta - 1


def kl_divergence(logp: paddle.Tensor, ref_logp: paddle.Tensor, estimator: str = "k3") -> paddle.Tensor:
    """Per-token estimate of KL(policy || reference) from sampled tokens by the named estimator (``KL_ESTIMATES``),
    from d = ref_t - logp_t."""
    return KL_ESTIMATES.implementation(estimator)(ref_logp - logp)


LOG_RATIO_LEVELS = Registry("importance_sampling_level")  # (log_ratio, mask) -> the log-ratio the weight is made of


@LOG_RATIO_LEVELS.register("token", "one ratio per token, exp(logp_t - old_logp_t)")
def token_level(log_ratio, mask):
    """w_t = exp(logp_t - old_t)."""
    return log_ratio


@LOG_RATIO_LEVELS.register("sequence", "GSPO, as TRL: one ratio per completion, exp(mean_t(logp - old_logp)); the "
                           "clip_ratio/* metrics then count completions, not tokens, as TRL 1.16 logs them")
def sequence_level(log_ratio, mask):
    """GSPO (arXiv 2507.18071): every token of completion i weighted by exp(sum_t m (logp - old) / sum_t m)."""
    return (log_ratio * mask).sum(axis=1, keepdim=True) / mask.sum(axis=1, keepdim=True).clip(min=1.0)


@dataclass(frozen=True)
class SamplerCorrection:
    """A mode of the rollout/training mismatch correction (TRL 1.16's ``vllm_importance_sampling_mode``): one ratio
    per token or one per completion, and outside [clip_min, clip_max] truncated to the bound or set to 0."""

    per_completion: bool
    truncate: bool


SAMPLER_CORRECTIONS = Registry("importance_sampling_mode")  # d_t = m_t (old_t - sampled_t), NaN (not sampled) -> 0
SAMPLER_CORRECTIONS.add("token_truncate", SamplerCorrection(per_completion=False, truncate=True),
                        "rho_t = clip(exp(d_t), importance_sampling_clip_min, importance_sampling_clip_max)")
SAMPLER_CORRECTIONS.add("token_mask", SamplerCorrection(per_completion=False, truncate=False),
                        "rho_t = exp(d_t), 0 outside [importance_sampling_clip_min, importance_sampling_clip_max]")
SAMPLER_CORRECTIONS.add("sequence_truncate", SamplerCorrection(per_completion=True, truncate=True),
                        "one rho per completion, clip(exp(sum_t d_t), clip_min, clip_max)")
SAMPLER_CORRECTIONS.add("sequence_mask", SamplerCorrection(per_completion=True, truncate=False),
                        "one rho per completion, exp(sum_t d_t), 0 outside [clip_min, clip_max]: the completion leaves "
                        "the loss")


def sampler_ratio(old_logp, sampling_logp, mask, mode: str, clip_min: Optional[float], clip_max: Optional[float]
                  ) -> paddle.Tensor:
    """TRL 1.16's importance-sampling correction of the mismatch between the rollout's sampler and the training
    forward (its ``vllm_importance_sampling_ratio``): d_t = m_t (old_t - sampled_t), old the training forward's
    log-probs at rollout time, sampled the rollout's own (``Rollout.sampling_logp``; NaN, a token not sampled, gives
    d_t = 0); rho = exp(d_t) per token [N, T], or exp(sum_t d_t) per completion [N, 1]; then truncated to
    [clip_min, clip_max] or set to 0 outside it (``SAMPLER_CORRECTIONS``: the mode; a bound None is no bound). The
    loss multiplies each token's policy loss by rho (vespo adds log rho to its sequence weight)."""
    correction = SAMPLER_CORRECTIONS.implementation(mode)
    diff = (old_logp - sampling_logp) * mask.astype(old_logp.dtype)
    diff = paddle.where(paddle.isnan(diff), paddle.zeros_like(diff), diff)
    if correction.per_completion:
        diff = diff.sum(axis=1, keepdim=True)
    ratio = paddle.exp(diff)
    if correction.truncate:
        return paddle.clip(ratio, min=clip_min, max=clip_max)
    outside = paddle.zeros_like(ratio, dtype="bool")
    if clip_min is not None:
        outside = outside | (ratio < clip_min)
    if clip_max is not None:
        outside = outside | (ratio > clip_max)
    return paddle.where(outside, paddle.zeros_like(ratio), ratio)


def sampler_values(old_logp, sampling_logp, ratio, mask) -> tuple[np.ndarray, np.ndarray]:
    """The values TRL 1.16 logs of the correction, of one micro-batch: |old_t - sampled_t| over the completion tokens
    the sampler scored (not NaN), and rho over the completion tokens (per token) or every completion (per
    completion)."""
    mask, ratio, sampled = mask.numpy() > 0, ratio.numpy(), sampling_logp.numpy()
    deltas = np.abs(old_logp.numpy() - sampled)[mask & ~np.isnan(sampled)]
    return deltas, ratio.reshape(-1) if ratio.shape[1] == 1 else ratio[mask]


def sampler_statistics(deltas: np.ndarray, ratios: np.ndarray) -> dict[str, float]:
    """What TRL 1.16 logs of the correction over one generation batch of a process (``sampler_values`` of its
    micro-batches, joined): the mean and max of the |old_t - sampled_t| ``deltas``, the min, mean and max of the rho
    ``ratios``; 0 where there is none."""
    def of(values, reduce):
        return float(reduce(values)) if values.size else 0.0

    return {"sampling/sampling_logp_difference/mean": of(deltas, np.mean),
            "sampling/sampling_logp_difference/max": of(deltas, np.max),
            "sampling/importance_sampling_ratio/min": of(ratios, np.min),
            "sampling/importance_sampling_ratio/mean": of(ratios, np.mean),
            "sampling/importance_sampling_ratio/max": of(ratios, np.max)}


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
    use_adaptive_entropy: bool = False  # the bonus is on with a coefficient of 0 too (``entropy_control``)
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
    sampler_ratio: Optional[paddle.Tensor] = None  # rho of ``sampler_ratio``, with the mismatch correction on


def clipped_objective(w: _Weights, s: LossSettings):
    """grpo, bnpo, dr_grpo, dapo, luspo: PPO's clipped surrogate
    l_t = -min(min(w, delta) A, clip(w, 1 - eps_low, 1 + eps_high) A);
    ``delta`` (INTELLECT-2's two-sided clipping; None: off) caps w, which only a negative advantage reaches.
    Logged: the fractions clipped below (w < 1 - eps_low, A < 0), above (w > 1 + eps_high, A > 0) and either, and
    TRL's ``clip_ratio/low_min`` / ``high_max``: the least and the most of the completions' own fractions (a
    completion without tokens left out)."""
    clipped = paddle.clip(w.weight, 1 - s.epsilon_low, 1 + s.epsilon_high)
    weight = w.weight if s.delta is None else paddle.clip(w.weight, max=s.delta)
    per_token = -paddle.minimum(weight * w.advantages, clipped * w.advantages)
    low = (weight < 1 - s.epsilon_low) & (w.advantages < 0)
    high = (weight > 1 + s.epsilon_high) & (w.advantages > 0)
    return per_token, {"clip_ratio/low_mean": _masked_mean(low, w.mask),
                       "clip_ratio/high_mean": _masked_mean(high, w.mask),
                       "clip_ratio/region_mean": _masked_mean(low | high, w.mask),
                       "clip_ratio/low_min": float(np.nanmin(_per_completion(low, w.mask))),
                       "clip_ratio/high_max": float(np.nanmax(_per_completion(high, w.mask)))}


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
    ``vespo_lambda_pos``) for A >= 0, else the ``_neg`` pair, lambda at least 1e-4. With the sampler's correction
    (per-token rho), sum_t clip(ln rho_t, ln 1e-8, 20) is added to the sum inside W (over every position, as TRL).
    Logged: ``vespo/phi_seq_mean``."""
    floor = math.log(1e-8)
    with paddle.no_grad():
        log_w = (w.log_ratio.clip(-20.0, 20.0) * w.mask).sum(axis=1, keepdim=True)
        if w.sampler_ratio is not None:
            log_w = log_w + paddle.log(w.sampler_ratio).clip(floor, 20.0).sum(axis=1, keepdim=True)
        log_w = log_w.clip(floor, 20.0)
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
    """A loss type's implementation: its objective and its normalisation (formulas in their docstrings)."""

    objective: Callable  # (_Weights, LossSettings) -> (per-token loss, its logged statistics)
    normalisation: Callable  # (per-token loss, mask, num_items_in_batch, settings) -> the micro-batch's loss
    per_micro_batch: bool = True  # divided by gradient_accumulation_steps (not when normalised by the step's tokens)
    weighs_sampler_ratio: bool = False  # takes the sampler's correction rho into its objective (else l_t times rho)


LOSS_TYPE_RULES = Registry("loss_type")  # TRL 1.16's loss types, in its order
LOSS_TYPE_RULES.add("grpo", LossType(clipped_objective, per_sequence_mean),
                    "l = -min(w A, clip(w, 1 - epsilon, 1 + epsilon_high) A), mean_i(sum_t l m / sum_t m); logs "
                    "clip_ratio/* (the clipped ones)")
LOSS_TYPE_RULES.add("bnpo", LossType(clipped_objective, token_mean), "same l, sum l m / sum m over the micro-batch")
LOSS_TYPE_RULES.add("dr_grpo", LossType(clipped_objective, fixed_length_mean),
                    "same l, sum l m / (N max_completion_length)")
LOSS_TYPE_RULES.add("dapo", LossType(clipped_objective, step_token_mean, per_micro_batch=False),
                    "same l, sum l m / T_step")
LOSS_TYPE_RULES.add("luspo", LossType(clipped_objective, sequence_sum_mean),
                    "same l, mean_i(sum_t l m), a completion weighs by its length (use with importance_sampling_level "
                    "sequence)")
LOSS_TYPE_RULES.add("cispo", LossType(cispo_objective, step_token_mean, per_micro_batch=False),
                    "l = -sg(min(w, epsilon_high)) A logp_t (MiniMax-M1, ScaleRL; sg: no gradient through "
                    "the weight), sum l m / T_step; logs cispo_clip_ratio (w > epsilon_high, A > 0)",
                    needs=(Need("epsilon_high", "caps the importance weight itself at epsilon_high (ScaleRL's eps_max; "
                                "5.0 recommended); set it (unset, it would be epsilon, {config.epsilon})"),))
LOSS_TYPE_RULES.add("sapo", LossType(sapo_objective, per_sequence_mean),
                    "l = -sigmoid(tau (w - 1)) 4 / tau A, tau = sapo_temperature_pos if A > 0 else "
                    "sapo_temperature_neg, normalised as grpo")
LOSS_TYPE_RULES.add("vespo", LossType(vespo_objective, step_token_mean, per_micro_batch=False,
                                      weighs_sampler_ratio=True),
                    "l = -sg(phi(W)) A logp_t (token level), W = exp(clip(sum_t m clip(logp - old, -20, 20), ln 1e-8, "
                    "20)) the completion's weight, phi(W) = exp(lambda + k ln W - lambda W) (k, lambda: vespo_*_pos if "
                    "A >= 0, else vespo_*_neg), sum l m / T_step; logs vespo/phi_seq_mean")


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
              entropy_mask: Optional[paddle.Tensor] = None, sampler_ratio: Optional[paddle.Tensor] = None,
              sampling_logp: Optional[paddle.Tensor] = None) -> tuple[paddle.Tensor, dict[str, float]]:
    """The micro-batch's policy loss as TRL 1.16's ``_compute_loss`` makes it, and the statistics it logs under
    TRL's names. For N completions of T tokens, mask m:

    w = exp(logp_t - old_logp_t) per token, or for every token of completion i exp(sum_t m (logp - old) / sum_t m)
    (``importance_sampling_level`` sequence: GSPO, arXiv 2507.18071; ``LOG_RATIO_LEVELS``);
    l_t = the loss type's objective (``LOSS_TYPE_RULES``: clipped, cispo, sapo, vespo), times the off-policy mask
    (``off_policy_mask_threshold``; measured from ``sampling_logp``, the rollout's own log-probs, when given, else
    from old_logp), the high-entropy mask (``entropy_mask``, from ``top_entropy_quantile``) and the sampler's
    correction rho (``sampler_ratio``, [N, T] or [N, 1]; vespo takes it into its weight instead);
    plus beta * kl_t, kl_t = ``kl_divergence(logp, ref, kl_estimator)`` (k3 by default), times w with
    ``use_bias_correction_kl``; then the loss type's normalisation, divided by ``gradient_accumulation_steps``
    unless it divides by the step's tokens. With ``entropy_coef`` c: minus c * sum H m' / sum m' /
    gradient_accumulation_steps, H the policy's entropies, m' the mask times the high-entropy mask (with
    ``use_adaptive_entropy`` c is the step's from ``entropy_control.AdaptiveEntropy``, 0 included).
    """
    loss_type = LOSS_TYPE_RULES.implementation(settings.loss_type)
    mask = mask.astype(logp.dtype)
    log_ratio = logp - old_logp
    level_log_ratio = LOG_RATIO_LEVELS.implementation(settings.importance_sampling_level)(log_ratio, mask)
    adv = advantages.unsqueeze(1)
    weights = _Weights(logp, log_ratio, paddle.exp(level_log_ratio), adv, mask, sampler_ratio)
    per_token, stats = loss_type.objective(weights, settings)
    if settings.off_policy_mask_threshold is not None:
        behaviour = old_logp if sampling_logp is None else sampling_logp
        per_token = per_token * off_policy_mask(adv, logp, behaviour, mask, settings.off_policy_mask_threshold)
    if entropy_mask is not None:
        per_token = per_token * entropy_mask
    if sampler_ratio is not None and not loss_type.weighs_sampler_ratio:
        per_token = per_token * sampler_ratio
    kl = None
    if settings.beta != 0.0:
        kl = kl_divergence(logp, ref_logp, settings.kl_estimator)
        if settings.use_bias_correction_kl:
            kl = kl * weights.weight
        per_token = per_token + settings.beta * kl
    policy_loss = loss_type.normalisation(per_token, mask, num_items_in_batch, settings)
    loss = policy_loss / settings.gradient_accumulation_steps if loss_type.per_micro_batch else policy_loss
    if settings.entropy_coef != 0.0 or settings.use_adaptive_entropy:
        bonus_mask = mask if entropy_mask is None else mask * entropy_mask
        entropy = (entropies * bonus_mask).sum() / bonus_mask.sum().clip(min=1.0)
        loss = loss - settings.entropy_coef * entropy / settings.gradient_accumulation_steps
        stats.update({"policy_loss": float(policy_loss), "entropy_coef": settings.entropy_coef})
    with paddle.no_grad():
        stats["kl"] = float((kl * mask).sum() / mask.sum().clip(min=1.0)) if kl is not None else 0.0
    return loss, stats


def _per_completion(flags: paddle.Tensor, mask: paddle.Tensor) -> np.ndarray:
    """TRL 1.16's ``masked_seq_mean``: per completion the mean of ``flags`` over its tokens (NaN without any), or the
    completion's one value ([N, 1])."""
    flags, mask = flags.astype(mask.dtype).numpy(), mask.numpy()
    if flags.shape[1] == 1:
        return flags[:, 0]
    with np.errstate(invalid="ignore"):
        return (flags * mask).sum(axis=1) / mask.sum(axis=1)


def _masked_mean(flags: paddle.Tensor, mask: paddle.Tensor) -> float:
    """TRL 1.16's ``global_masked_mean`` on one process: with a value per token ([N, T]) its mean over the
    completion tokens; with one per completion ([N, 1]: GSPO's ratios, VESPO's phi) its mean over completions,
    every row counted."""
    with paddle.no_grad():
        flags = flags.astype(mask.dtype)
        if flags.shape[1] == 1:
            return float(flags.mean())
        return float((flags * mask).sum() / mask.sum().clip(min=1.0))
