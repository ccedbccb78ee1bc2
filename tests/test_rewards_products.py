import pytest

from paddle_r1.rewards import load_builtin_rewards
from paddle_r1.rewards.families.products import read_dimensions

REWARDS = load_builtin_rewards()

dimensions = REWARDS["dimensions"]
LABEL = "12 8 15"  # seed 002's label format; sorted descending: [15, 12, 8]


def _json(length, width, height, unit=None):
    extra = f', "unit": "{unit}"' if unit else ""
    return f'<answer>{{"length": {length}, "width": {width}, "height": {height}{extra}}}</answer>'


@pytest.mark.parametrize("answer, expected", [
    # seed 002's candidates against the label 12 8 15 (hand-checked, sorted descending)
    (_json(12, 8, 15, "cm"), 1.0),
    (_json(11, 7, 14), 1 - (1 / 15 + 1 / 12 + 1 / 8) / 3),  # 0.9083 (the seed says about 0.9)
    (_json(8, 8, 15), 1 - (0 + 4 / 12 + 0) / 3),  # [15, 8, 8]: 0.8889
    (_json(20, 15, 25), 1 - (10 / 15 + 8 / 12 + 7 / 8) / 3),  # [25, 20, 15]: 0.2639
    (_json(0, 0, 0), 0.0),  # every relative error is 1
    (_json(15, 12, 8), 1.0),  # order does not matter
    ('{"length": 12, "width": 8, "height": 15}', 1.0),  # no tags: the whole text
    ('<answer>```json\n{"length": "12cm", "width": "8 cm", "height": "15cm"}\n```</answer>', 1.0),
    ('<answer>{"长": "12厘米", "宽": "8厘米", "高": "15厘米"}</answer>', 1.0),  # Chinese keys, values with units
    ('<answer>{"size": {"length_cm": 12, "width_cm": 8, "height_cm": 15}}</answer>', 1.0),  # one level nested
    ("<answer>12x8x15 cm</answer>", 1.0),
    ("<answer>长12 宽8 高15</answer>", 1.0),
    ("<answer>15 12</answer>", 1.0),  # seed 002: the mean runs over the common length
    ("<answer>[30, 24, 16]</answer>", 1 - (15 / 15 + 12 / 12 + 8 / 8) / 3),  # twice as large: 0.0
    ("<answer>-12 -8 -15</answer>", 0.0),
])
def test_dimensions_seed_002(answer, expected):
    assert dimensions([answer], solution=[LABEL]) == pytest.approx([expected])


def test_units_convert_when_both_sides_name_one():
    solution = '{"length": 12, "width": 8, "height": 15, "unit": "cm"}'
    assert dimensions([_json(120, 80, 150, "mm")], solution=[solution]) == pytest.approx([1.0])
    assert dimensions(["<answer>0.12 0.08 0.15 m</answer>"], solution=[solution]) == pytest.approx([1.0])
    # the label names no unit: numbers are compared as they are, 120 vs 12 -> relative error 9 -> 0
    assert dimensions([_json(120, 80, 150, "mm")], solution=[LABEL]) == [0.0]


@pytest.mark.parametrize("solution", [
    "12 8 15", "<answer> 12 8 15 </answer>", [12, 8, 15], {"length": 12, "width": 8, "height": 15},
    '{"length": 12, "width": 8, "height": 15, "unit": "cm"}',
])
def test_solution_forms(solution):
    assert dimensions([_json(12, 8, 15)], solution=[solution]) == [1.0]


def test_zero_true_length():
    # t = 0: the term is 0 when p = 0, else 1
    assert dimensions(["10 5 0", "10 5 2"], solution=["10 5 0"] * 2) == pytest.approx([1.0, 1 - 1 / 3])


def test_missing_and_bad_solutions():
    assert dimensions([_json(12, 8, 15)], solution=[None]) == [None]
    with pytest.raises(ValueError, match="no length"):
        dimensions([_json(12, 8, 15)], solution=["unknown"])


def test_read_dimensions():
    assert read_dimensions('{"length": 12, "width": 8, "height": 15, "unit": "mm"}') == ([12.0, 8.0, 15.0], "mm")
    assert read_dimensions("I'm sure: 12 8 15 9") == ([12.0, 8.0, 15.0], None)  # "I'm" is not metres
    assert read_dimensions("12×8×15厘米") == ([12.0, 8.0, 15.0], "厘米")


@pytest.mark.parametrize("answer", [
    "", "NaN", "<answer>1e400 1e400 1e400</answer>", '<answer>{"length": NaN, "width": Infinity}</answer>',
    '{"length": 1e400}', '{"length": ' + "9" * 5000 + "}", "<answer>1e308 1e308 1e308</answer>",
    "<answer><answer>12 8 15</answer></answer>", "[[[[" * 2000, "\x00\uffff" * 5000, "no numbers " * 1000,
    '{"length": true, "width": null, "height": "?"}',
])
def test_garbage_scores_zero(answer):
    assert dimensions([answer], solution=[LABEL]) == [0.0]
