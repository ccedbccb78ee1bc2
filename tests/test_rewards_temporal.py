"""temporal_iou (Temporal-R1's tIoU): both answer forms, the spans that must not earn more than their overlap, and
model text that never makes it raise."""
import math
import random

import pytest

from paddle_r1.rewards import load_builtin_rewards
from paddle_r1.rewards.families.temporal import parse_span, temporal_iou
from paddle_r1.rewards.registry import BadSolution

REWARDS = load_builtin_rewards()

TRUTH = [10.0, 20.0]


def score(text, truth=TRUTH, duration=30.0):
    return REWARDS["temporal_iou"]([text], solution=[truth], duration=[duration])[0]


@pytest.mark.parametrize("text, want", [
    ("<answer>10 to 20</answer>", 1.0),
    ("<answer>10.00 to 20.00 seconds</answer>", 1.0),
    ('<answer>{"start_time": 15, "end_time": 25}</answer>', 5 / 15),
    ("<think>the light goes on at 12.5</think><answer>12.5 seconds to 20.1 seconds</answer>", 7.5 / 10.1),
    ("It happens between 5 and 15.", 5 / 15),  # no tags: the whole text
    ("<answer>21 to 29</answer>", 0.0),  # disjoint
])
def test_the_iou_of_both_answer_forms(text, want):
    assert score(text) == pytest.approx(want)


def test_iou_is_the_same_in_seconds_and_in_fractions_of_the_clip():
    assert temporal_iou((12, 24), (10, 20), 30.0) == pytest.approx(temporal_iou((12, 24), (10, 20), None))
    assert temporal_iou((12, 24), (10, 20), 30.0) == pytest.approx(8 / 14)


@pytest.mark.parametrize("text", [
    "<answer>20 to 10</answer>",  # reversed
    '<answer>{"start_time": 20, "end_time": 10}</answer>',
    '<answer>{"start_time": NaN, "end_time": 20}</answer>',
    "<answer>nan to 20</answer>", "<answer>1e999 to 20</answer>",
    "<answer>around ten</answer>", "<answer><answer>10 to 20</answer></answer>", "",
])
def test_unreadable_reversed_and_non_finite_spans_score_zero(text):
    assert score(text) == 0.0


@pytest.mark.parametrize("span", [(0, 30), (-100, 200), (-5, 20), (10, 1e9)])
def test_spans_over_the_whole_clip_or_outside_it_earn_no_more_than_their_overlap(span):
    """The part outside [0, duration] is not clipped away: [-5, 20] scores 10 / 25, not the 10 / 20 of [0, 20]."""
    start, end = span
    overlap = max(0.0, min(end, 20) - max(start, 10))
    assert score(f"<answer>{start} to {end}</answer>") == pytest.approx(overlap / (max(end, 20) - min(start, 10)))
    assert score(f"<answer>{start} to {end}</answer>") < 1.0


def test_a_sample_without_solution_is_none_and_a_bad_solution_is_bad_data():
    assert score("<answer>10 to 20</answer>", truth=None) is None
    for truth in ([20, 10], [1], ["a", "b"], [0, math.nan]):
        with pytest.raises(BadSolution):
            score("<answer>10 to 20</answer>", truth=truth)


def test_model_text_never_raises_and_stays_in_range():
    rng = random.Random(0)
    pieces = ["<answer>", "</answer>", "{", "}", '"start_time":', '"end_time":', " to ", " and ", "seconds", "-",
              "1e400", "nan", "12.5", "0", " ", "\n", "[", "]", ","]
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 30))) for _ in range(2000)]
    scores = REWARDS["temporal_iou"](texts, solution=[TRUTH] * len(texts), duration=[30.0] * len(texts))
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert parse_span("<answer>" + " " * 50_000 + "1 to 2</answer>") == (1.0, 2.0)
