import re

import pytest

from paddle_r1.models.coords import box_from_original, box_to_original
from paddle_r1.rewards import get_reward, load_builtin_rewards
from paddle_r1.rewards.parsing import parse_box

REWARDS = load_builtin_rewards()

fmt = REWARDS["format"]
iou = REWARDS["iou"]


@pytest.mark.parametrize("text, expected", [
    ("<think>look</think><answer>[1, 2, 3, 4]</answer>", 1.0),
    ("  <think>\nmulti\nline\n</think>\n\n<answer>\n[1,2,3,4]\n</answer>\n", 1.0),
    ("<answer>[1, 2, 3, 4]</answer>", 0.0),
    ("<think>x</think>", 0.0),
    ("<answer>a</answer><think>b</think>", 0.0),
    ("<think>x</think><answer>y</answer> trailing words", 0.0),
    ("", 0.0),
    ("\x00\uffff<think" * 2000, 0.0),
    ("<think>.</think><answer>[1, 2, 3, 4]</answer>8]</answer>", 0.0),
    ("<think>a<think>b</think><answer>x</answer>", 0.0),
])
def test_format(text, expected):
    assert fmt([text]) == [expected]


def test_parse_box():
    assert parse_box("[1, 2.5, 30, 40]") == [1.0, 2.5, 30.0, 40.0]
    assert parse_box('{"bbox_2d": [10,20,30,40], "label": "x"}') == [10, 20, 30, 40]
    assert parse_box("[30, 2, 10, 40]") is None  # x1 > x2
    assert parse_box("[1, 2, 3]") is None and parse_box("nan") is None
    assert parse_box("[1e400, 2, 3e400, 4]") is None  # overflow to inf


def _columns(n, solution, image_size, input_size, system):
    return dict(solution=[solution] * n, image_sizes=[[image_size]] * n, input_sizes=[[input_size]] * n,
                coord_system=[system] * n)


def test_iou_maps_from_the_resized_input():
    # original 200x100, resized input 112x56: the model's [56, 28, 112, 56] is the original [100, 50, 200, 100]
    cols = _columns(4, [100, 50, 200, 100], (200, 100), (112, 56), "abs_resized")
    scores = iou(["<think>.</think><answer>[56, 28, 112, 56]</answer>",
                  "<answer>[56, 28, 84, 56]</answer>",  # half the width -> IoU 0.5
                  "I cannot see it", "<answer>[0, 0, 10, 10]</answer>"], **cols)
    assert scores == pytest.approx([1.0, 0.5, 0.0, 0.0])


def test_iou_in_rel_1000_units():
    cols = _columns(1, [100, 50, 200, 100], (200, 100), None, "rel_1000")
    assert iou(["[500, 500, 1000, 1000]"], **cols) == pytest.approx([1.0])


def test_coordinate_round_trip():
    box = [10.0, 20.0, 30.0, 40.0]
    for system in ("abs_resized", "rel_1000", "abs_original"):
        there = box_from_original(box, system, (640, 480), (644, 476))
        assert box_to_original(there, system, (640, 480), (644, 476)) == pytest.approx(box)


def test_get_reward():
    assert get_reward("iou") is iou
    assert get_reward("reward_helpers:short_reward")(["ab"]) == [0.99]
    with pytest.raises(KeyError, match="unknown reward 'nope'"):
        get_reward("nope")
    for joined in ("iou,format", "iou format", "iou, format"):  # several names typed as one
        with pytest.raises(KeyError, match=re.escape(f"unknown reward '{joined}': several rewards are a list, not one "
                                                     "name (command line: --reward_funcs iou format; yaml: "
                                                     "reward_funcs: [iou, format])")):
            get_reward(joined)
    with pytest.raises(KeyError, match="unknown reward 'iou,nope'; known: "):
        get_reward("iou,nope")
    with pytest.raises(KeyError, match="cannot load"):
        get_reward("reward_helpers:missing")
