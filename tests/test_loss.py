import dataclasses
import json
import math
import os

import numpy as np
import paddle
import pytest

from paddle_r1.rewards.manager import RewardManager
from paddle_r1.algorithms.advantages import advantages_for, group_advantages, normalize_then_sum_advantages
from paddle_r1.algorithms.loss import LossSettings, entropy_threshold, grpo_loss, high_entropy_mask
from paddle_r1.algorithms.groups import GroupTable

T = paddle.to_tensor


def _loss(loss_type, num_items_in_batch=None, **kw):
    logp = T([[-1.0, -2.0, -0.5], [-0.3, -0.2, -0.1]])
    settings = LossSettings(**{**dict(beta=0.0, epsilon_low=0.2, epsilon_high=0.2, loss_type=loss_type,
                                      max_completion_length=4), **kw})
    return grpo_loss(logp, logp, None, T([1.0, -2.0]), T([[1, 1, 0], [1, 1, 1]]), settings,
                     num_items_in_batch=num_items_in_batch)


@pytest.mark.parametrize("loss_type, expected", [
    ("grpo", 0.5),     # mean(-1 over row 0, +2 over row 1)
    ("bnpo", 0.8),     # (-1 * 2 + 2 * 3) / 5 tokens
    ("dr_grpo", 0.5),  # 4 / (2 rows * max_completion_length 4)
])
def test_loss_types_by_hand(loss_type, expected):
    loss, stats = _loss(loss_type)
    assert float(loss) == pytest.approx(expected, abs=1e-6)
    assert stats["kl"] == 0 and stats["clip_ratio/region_mean"] == 0


def test_dapo_divides_by_the_steps_token_count():
    assert float(_loss("dapo", num_items_in_batch=10.0)[0]) == pytest.approx(0.4)
    assert float(_loss("dapo")[0]) == pytest.approx(0.8)  # alone in its step: the micro-batch's tokens


def test_k3_kl_by_hand():
    logp = T([[math.log(0.5)]])
    ref = T([[math.log(0.25)]])
    loss, stats = grpo_loss(logp, logp, ref, T([0.0]), T([[1]]), LossSettings(beta=0.1, loss_type="bnpo"))
    kl = 0.5 - math.log(0.5) - 1  # exp(d) - d - 1 with d = log(0.25 / 0.5)
    assert stats["kl"] == pytest.approx(kl, rel=1e-5)
    assert float(loss) == pytest.approx(0.1 * kl, rel=1e-5)


def test_clipping_and_its_gradient():
    old = T([[0.0, 0.0]])
    logp = T([[math.log(1.5), math.log(1.1)]])
    logp.stop_gradient = False
    loss, stats = grpo_loss(logp, old, None, T([1.0]), T([[1, 1]]), LossSettings(epsilon_high=0.28, loss_type="bnpo"))
    assert float(loss) == pytest.approx(-(1.28 + 1.1) / 2, rel=1e-5)  # ratio 1.5 clipped at 1 + 0.28
    loss.backward()
    np.testing.assert_allclose(logp.grad.numpy(), [[0.0, -1.1 / 2]], rtol=1e-5)  # clipped token: no gradient
    assert stats["clip_ratio/high_mean"] == pytest.approx(0.5) and stats["clip_ratio/low_mean"] == 0
    low, stats = grpo_loss(T([[math.log(0.5)]]), T([[0.0]]), None, T([-1.0]), T([[1]]), LossSettings(loss_type="bnpo"))
    assert float(low) == pytest.approx(0.8) and stats["clip_ratio/low_mean"] == 1.0


def test_group_advantages():
    rewards = T([1.0, 0.0, 3.0, 3.0])
    std = math.sqrt(0.5)  # unbiased std of (1, 0)
    np.testing.assert_allclose(group_advantages(rewards, 2, "group").numpy(),
                               [0.5 / (std + 1e-4), -0.5 / (std + 1e-4), 0, 0], rtol=1e-5)
    batch_std = np.std([1, 0, 3, 3], ddof=1)
    np.testing.assert_allclose(group_advantages(rewards, 2, "batch").numpy(),
                               np.array([0.5, -0.5, 0, 0]) / (batch_std + 1e-4), rtol=1e-5)
    np.testing.assert_allclose(group_advantages(rewards, 2, "none").numpy(), [0.5, -0.5, 0, 0])


def test_weighted_sum_leaves_out_none_and_an_unscored_completion_is_nan():
    table = np.array([[1.0, 0.5], [np.nan, 0.5], [np.nan, np.nan]], "float32")
    manager = RewardManager(["format", "box_format"], weights=[2.0, 4.0])
    np.testing.assert_allclose(manager.combine(table), [4.0, 2.0, np.nan])


def test_unscorable_completions_follow_trl():
    """TRL 1.16: reward NaN rows are left out of the group's mean and std (nanmean / nanstd) and get advantage 0;
    counted as 0.0 instead, they would move the baseline."""
    nan = float("nan")
    rewards = T([1.0, 0.0, nan, 3.0, 5.0, nan])  # groups of 3
    got = group_advantages(rewards, 3, "group").numpy()
    std = math.sqrt(0.5)  # unbiased std of (1, 0) and of (3, 5) is sqrt(2)
    np.testing.assert_allclose(got, [0.5 / (std + 1e-4), -0.5 / (std + 1e-4), 0.0,
                                     -1 / (math.sqrt(2) + 1e-4), 1 / (math.sqrt(2) + 1e-4), 0.0], rtol=1e-5)
    batch_std = np.std([1, 0, 3, 5], ddof=1)
    np.testing.assert_allclose(group_advantages(rewards, 3, "batch").numpy(),
                               np.array([0.5, -0.5, 0, -1, 1, 0]) / (batch_std + 1e-4), rtol=1e-5)
    np.testing.assert_allclose(group_advantages(rewards, 3, "none").numpy(), [0.5, -0.5, 0, -1, 1, 0])
    lone = group_advantages(T([2.0, nan, nan]), 3, "group").numpy()  # one scored completion: std is NaN -> 0
    np.testing.assert_array_equal(lone, [0.0, 0.0, 0.0])


TRL_REFERENCE = os.path.join(os.path.dirname(__file__), "fixtures", "trl_loss_reference.json")
with open(TRL_REFERENCE, encoding="utf-8") as _f:
    _TRL = json.load(_f)
_SETTING_KEYS = {f.name for f in dataclasses.fields(LossSettings)}


@pytest.mark.parametrize("case", _TRL["cases"], ids=lambda c: c["name"])
def test_loss_gradient_and_statistics_equal_trls_compute_loss(case):
    """TRL 1.16's own ``_compute_loss`` on the same float64 tensors (tests/fixtures/make_trl_loss_reference.py),
    every loss type at both importance-sampling levels and each key TRL 1.16 adds (delta, sapo's temperatures,
    vespo's k and lambda, off_policy_mask_threshold, use_bias_correction_kl, top_entropy_quantile, entropy_coef):
    the loss, its gradient (to the log-probs, and to the entropies when the bonus is on) and every statistic TRL
    logs. With one ratio per completion (GSPO) the clip ratios are fractions of completions, per token otherwise."""
    inputs = {k: paddle.to_tensor(np.array(v, dtype="float64")) for k, v in _TRL["inputs"].items()}
    logp, entropies, mask = inputs["logp"], inputs["entropies"], inputs["mask"]
    logp.stop_gradient = entropies.stop_gradient = False
    settings = case["settings"]
    entropy_mask = None
    if settings["top_entropy_quantile"] < 1.0:  # the micro-batch's completion tokens (here: one rank's)
        threshold = entropy_threshold(entropies.numpy()[mask.numpy() > 0], settings["top_entropy_quantile"])
        entropy_mask = high_entropy_mask(entropies.detach(), mask, threshold)
    loss, stats = grpo_loss(logp, inputs["old_logp"], inputs["ref_logp"], inputs["advantages"], mask,
                            LossSettings(**{k: v for k, v in settings.items() if k in _SETTING_KEYS}),
                            num_items_in_batch=float(mask.sum()), entropies=entropies, entropy_mask=entropy_mask)
    loss.backward()
    assert float(loss) == pytest.approx(case["loss"], rel=1e-12, abs=1e-15)
    np.testing.assert_allclose(logp.grad.numpy(), case["grad"], rtol=1e-10, atol=1e-15)
    if case["entropy_grad"] is not None:
        np.testing.assert_allclose(entropies.grad.numpy(), case["entropy_grad"], rtol=1e-10, atol=1e-15)
    else:
        assert entropies.grad is None or not entropies.grad.numpy().any()
    assert set(stats) == set(case["metrics"]) | {"kl"}  # kl is logged (0.0) with beta 0 too
    for name, value in case["metrics"].items():  # TRL counts completions in float32 at sequence level
        assert stats[name] == pytest.approx(value, rel=1e-6), name


_REWARDS = _TRL["rewards"]


@pytest.mark.parametrize("case", _REWARDS["cases"], ids=lambda c: f"{c['multi_objective_aggregation']}-"
                                                                  f"{c['scale_rewards']}")
def test_multi_objective_aggregation_equals_trls(case):
    """TRL 1.16's own lines of ``_generate_and_score_completions`` (from ``unscorable_mask`` to the
    ``frac_reward_zero_std`` metric) on a per-function table with unscored entries and a completion no function
    scored: the advantages of sum_then_normalize (each scale_rewards) and of GDPO's normalize_then_sum, and the
    reward statistics. ``frac_reward_zero_std`` is per group here; TRL compares the batch's std with zero instead
    when it divides by it (scale_rewards batch, normalize_then_sum), so only its group cases are compared."""
    table = np.array([[np.nan if x is None else x for x in row] for row in _REWARDS["table"]], dtype="float64")
    g, weights = _REWARDS["num_generations"], _REWARDS["weights"]
    rewards = RewardManager(["format", "iou", "box_format"], weights=weights).combine(table).astype("float64")
    lengths = np.ones(len(table))
    if case["multi_objective_aggregation"] == "normalize_then_sum":
        got = normalize_then_sum_advantages(paddle.to_tensor(table), weights, g).numpy()
    else:
        got = advantages_for("grpo", paddle.to_tensor(rewards), g, paddle.to_tensor(lengths),
                             case["scale_rewards"]).numpy()
    # the weighted sums are float32 (RewardManager.combine), GDPO's advantages start from the float64 scores
    np.testing.assert_allclose(got, case["advantages"], rtol=1e-5, atol=1e-6)
    metrics = case["metrics"]
    assert np.nanmean(rewards) == pytest.approx(metrics["reward"], rel=1e-6)
    assert np.nanstd(rewards, ddof=1) == pytest.approx(metrics["reward_std"], rel=1e-6)
    for j, name in enumerate(_REWARDS["names"]):  # TRL's nanstd takes Bessel's n / (n - 1) in float32
        assert np.nanmean(table[:, j]) == pytest.approx(metrics[f"rewards/{name}/mean"], rel=1e-12)
        assert np.nanstd(table[:, j], ddof=1) == pytest.approx(metrics[f"rewards/{name}/std"], rel=1e-7)
    if case["multi_objective_aggregation"] == "sum_then_normalize" and case["scale_rewards"] != "batch":
        groups = GroupTable(rewards.reshape(-1, g), table.reshape(-1, g, 3), lengths.reshape(-1, g),
                            local=np.arange(len(table)))
        assert groups.local_groups(groups.zero_std()).mean() == pytest.approx(metrics["frac_reward_zero_std"])
