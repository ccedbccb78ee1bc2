"""TRL 1.16's clip_ratio/low_min and clip_ratio/high_max: the least and the most of the completions' clipped
fractions (its golden values are in test_loss.py's TRL cases; these show what they measure)."""
import math

import paddle
import pytest

from paddle_r1.algorithms.loss import LossSettings, grpo_loss

T = paddle.to_tensor


def test_low_min_and_high_max_by_hand():
    """Two completions: ratios 0.5 / 1.0 and 0.5 / 0.5 with negative advantages (low clips: per completion 1/2 and
    1), then 1.5 / 1.0 and 1.5 / 1.5 with positive ones (high clips 1/2 and 1); a padded token never counts."""
    old = T([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    low = T([[math.log(0.5), 0.0, math.log(0.5)], [math.log(0.5), math.log(0.5), 0.0]])
    mask = T([[1, 1, 0], [1, 1, 0]])
    _, stats = grpo_loss(low, old, None, T([-1.0, -1.0]), mask, LossSettings(loss_type="bnpo"))
    assert stats["clip_ratio/low_min"] == pytest.approx(0.5) and stats["clip_ratio/low_mean"] == pytest.approx(0.75)
    assert stats["clip_ratio/high_max"] == 0.0
    high = T([[math.log(1.5), 0.0, math.log(1.5)], [math.log(1.5), math.log(1.5), 0.0]])
    _, stats = grpo_loss(high, old, None, T([1.0, 1.0]), mask, LossSettings(loss_type="bnpo"))
    assert stats["clip_ratio/high_max"] == pytest.approx(1.0) and stats["clip_ratio/low_min"] == 0.0
    _, one_clipped = grpo_loss(high, old, None, T([1.0, -1.0]), mask, LossSettings(loss_type="bnpo"))
    assert one_clipped["clip_ratio/high_max"] == pytest.approx(0.5)  # the positive completion: 1 of 2 tokens
