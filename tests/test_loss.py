import json
import math
import os

import numpy as np
import paddle
import pytest

from paddle_r1.rewards.manager import RewardManager
from paddle_r1.trainer.loss import group_advantages, grpo_loss

T = paddle.to_tensor


def _loss(loss_type, **kw):
    logp = T([[-1.0, -2.0, -0.5], [-0.3, -0.2, -0.1]])
    args = dict(beta=0.0, epsilon_low=0.2, epsilon_high=0.2, loss_type=loss_type, max_completion_length=4)
    args.update(kw)
    return grpo_loss(logp, logp, None, T([1.0, -2.0]), T([[1, 1, 0], [1, 1, 1]]), **args)


@pytest.mark.parametrize("loss_type, expected", [
    ("grpo", 0.5),     # mean(-1 over row 0, +2 over row 1)
    ("bnpo", 0.8),     # (-1 * 2 + 2 * 3) / 5 tokens
    ("dr_grpo", 0.5),  # 4 / (2 rows * max_completion_length 4)
])
def test_loss_types_by_hand(loss_type, expected):
    loss, stats = _loss(loss_type)
    assert float(loss) == pytest.approx(expected, abs=1e-6)
    assert stats.kl == 0 and stats.clip_region == 0


def test_dapo_divides_by_the_steps_token_count():
    assert float(_loss("dapo", num_items_in_batch=10.0)[0]) == pytest.approx(0.4)
    assert float(_loss("dapo")[0]) == pytest.approx(0.8)  # alone in its step: the micro-batch's tokens


def test_k3_kl_by_hand():
    logp = T([[math.log(0.5)]])
    ref = T([[math.log(0.25)]])
    loss, stats = grpo_loss(logp, logp, ref, T([0.0]), T([[1]]), beta=0.1, epsilon_low=0.2, epsilon_high=0.2,
                            loss_type="bnpo", max_completion_length=1)
    kl = 0.5 - math.log(0.5) - 1  # exp(d) - d - 1 with d = log(0.25 / 0.5)
    assert stats.kl == pytest.approx(kl, rel=1e-5)
    assert float(loss) == pytest.approx(0.1 * kl, rel=1e-5)


def test_clipping_and_its_gradient():
    old = T([[0.0, 0.0]])
    logp = T([[math.log(1.5), math.log(1.1)]])
    logp.stop_gradient = False
    loss, stats = grpo_loss(logp, old, None, T([1.0]), T([[1, 1]]), beta=0.0, epsilon_low=0.2, epsilon_high=0.28,
                            loss_type="bnpo", max_completion_length=2)
    assert float(loss) == pytest.approx(-(1.28 + 1.1) / 2, rel=1e-5)  # ratio 1.5 clipped at 1 + 0.28
    loss.backward()
    np.testing.assert_allclose(logp.grad.numpy(), [[0.0, -1.1 / 2]], rtol=1e-5)  # clipped token: no gradient
    assert stats.clip_high == pytest.approx(0.5) and stats.clip_low == 0
    low, stats = grpo_loss(T([[math.log(0.5)]]), T([[0.0]]), None, T([-1.0]), T([[1]]), beta=0.0,
                           epsilon_low=0.2, epsilon_high=0.2, loss_type="bnpo", max_completion_length=1)
    assert float(low) == pytest.approx(0.8) and stats.clip_low == 1.0


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


@pytest.mark.parametrize("case", _TRL["cases"], ids=lambda c: f"{c['loss_type']}-{c['importance_sampling_level']}")
def test_loss_gradient_and_statistics_equal_trls_compute_loss(case):
    """TRL 1.16's own ``_compute_loss`` on the same float64 tensors (tests/fixtures/make_trl_loss_reference.py):
    loss, its gradient, the KL and the clip ratios; with GSPO's one ratio per completion the clip ratios are
    fractions of completions, per token otherwise."""
    inputs = {k: paddle.to_tensor(np.array(v, dtype="float64")) for k, v in _TRL["inputs"].items()}
    logp = inputs["logp"]
    logp.stop_gradient = False
    settings = _TRL["settings"]
    loss, stats = grpo_loss(logp, inputs["old_logp"], inputs["ref_logp"], inputs["advantages"], inputs["mask"],
                            beta=settings["beta"], epsilon_low=settings["epsilon_low"],
                            epsilon_high=settings["epsilon_high"], loss_type=case["loss_type"],
                            max_completion_length=settings["max_completion_length"],
                            num_items_in_batch=float(inputs["mask"].sum()),
                            importance_sampling_level=case["importance_sampling_level"])
    loss.backward()
    assert float(loss) == pytest.approx(case["loss"], rel=1e-12, abs=1e-15)
    np.testing.assert_allclose(logp.grad.numpy(), case["grad"], rtol=1e-10, atol=1e-15)
    metrics = case["metrics"]
    got = {"kl": stats.kl, "clip_ratio/low_mean": stats.clip_low, "clip_ratio/high_mean": stats.clip_high,
           "clip_ratio/region_mean": stats.clip_region}
    for name, value in metrics.items():  # TRL counts completions in float32 at sequence level
        assert got[name] == pytest.approx(value, rel=1e-6), name
