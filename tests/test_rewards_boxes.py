"""Single-box rewards: box_format, iou_accuracy, gaussian_point, gaussian_plane (GUI-G2), with hand-checked values."""
import math

import numpy as np
import pytest

from paddle_r1.rewards import load_builtin_rewards
from paddle_r1.rewards.families.boxes import plane_score
from paddle_r1.rewards.parsing import answer_content, answer_json

REWARDS = load_builtin_rewards()

box_format = REWARDS["box_format"]
iou_accuracy = REWARDS["iou_accuracy"]
gaussian_point = REWARDS["gaussian_point"]
gaussian_plane = REWARDS["gaussian_plane"]
SINGLE_BOX = ["iou", "iou_accuracy", "gaussian_point", "gaussian_plane"]

# Model text no reward may raise on, and must score 0.0 (shared with tests/test_rewards_detection.py).
GARBAGE = [
    "",
    "<answer>[nan, 1, 2, 3]</answer>",
    "<answer>[NaN, NaN, NaN, NaN]</answer>",
    "<answer><answer>[1,2,3,4]</answer></answer>",  # nested tags: malformed, not a box
    "<answer>[1e400, 1, 2e400, 3]</answer>",  # overflows to inf
    "<answer>[1" + "0" * 5000 + ", 2, 3, 4]</answer>",  # an integer json cannot read (4300-digit limit)
    "[" * 10_000,
    "{" * 10_000,
    ("[1, 2, 3, 4" * 1000)[:10_000],
    "\x00\uffff<answer>" * 1000,
]


def columns(n, solution, image_size=(200, 100), input_size=(200, 100), system="abs_original"):
    """Per-completion columns for n completions of one sample with one image."""
    return dict(solution=[solution] * n, image_sizes=[[image_size]] * n, input_sizes=[[input_size]] * n,
                coord_system=[system] * n)


def test_parsing_additions():
    assert answer_content("<think>a</think><answer>[1, 2, 3, 4]</answer>") == "[1, 2, 3, 4]"
    assert answer_content("no tags [1, 2, 3, 4]") == "no tags [1, 2, 3, 4]"
    assert answer_content("<answer><answer>[1,2,3,4]</answer></answer>") is None and answer_content(None) is None
    assert answer_json('<answer>```json\n{"0": [[1, 2, 3, 4]]}\n```</answer>') == {"0": [[1, 2, 3, 4]]}
    assert answer_json("[1" + "0" * 5000 + "]") is None  # json's ValueError is not a JSONDecodeError


@pytest.mark.parametrize("text, expected", [
    ("<think>.</think><answer>[1, 2, 3, 4]</answer>", 1.0),
    ("[1.5, 2, 3.25, 4e1]", 1.0),  # no tags: the whole text; floats and exponents
    ('<answer>{"bbox_2d": [10, 20, 10, 40]}</answer>', 1.0),  # zero width is still a box
    ("<answer>[0, 0, 1e308, 1e308]</answer>", 1.0),  # huge but finite: readable (the scores give 0.0)
    ("<answer>[3, 2, 1, 4]</answer>", 0.0),  # x1 > x2
    ("<answer>[1, 2, 3]</answer>", 0.0),
    ("<answer>the box is 1, 2, 3, 4</answer>", 0.0),
])
def test_box_format(text, expected):
    assert box_format([text]) == [expected]


@pytest.mark.parametrize("name", ["box_format"] + SINGLE_BOX)
def test_garbage_scores_zero(name):
    cols = columns(len(GARBAGE), [0, 0, 100, 50], (200, 100), (112, 56), "abs_resized")
    assert REWARDS[name](GARBAGE, **cols) == [0.0] * len(GARBAGE)


@pytest.mark.parametrize("name", SINGLE_BOX)
def test_huge_boxes_score_zero(name):
    # abs_resized scale 200/112 > 1: 1.7e308 overflows when mapped; rel_1000 stays finite but is far away
    text = "<answer>[0, 0, 1.7e308, 1.7e308]</answer>"
    assert REWARDS[name]([text], **columns(1, [0, 0, 100, 50], (200, 100), (112, 56), "abs_resized")) == [0.0]
    assert REWARDS[name]([text], **columns(1, [0, 0, 100, 50], (200, 100), None, "rel_1000")) == \
        pytest.approx([0.0], abs=1e-12)


def test_iou_accuracy_maps_from_the_resized_input():
    # original 200x100, resized input 112x56 (scale 200/112 = 100/56): truth [100, 50, 200, 100]
    cols = columns(4, [100, 50, 200, 100], (200, 100), (112, 56), "abs_resized")
    scores = iou_accuracy(["<answer>[56, 28, 112, 56]</answer>",  # -> [100, 50, 200, 100]: IoU 1 -> 1
                           "<answer>[56, 28, 84, 56]</answer>",  # -> [100, 50, 150, 100]: IoU 0.5, not > 0.5 -> 0
                           "<answer>[56, 28, 100, 56]</answer>",  # -> x2 = 178.6: IoU 0.786 -> 1
                           "<answer>[100, 50, 200, 100]</answer>"],  # unmapped truth: IoU 0.068 -> 0
                          **cols)
    assert scores == [1.0, 0.0, 1.0, 0.0]
    assert iou_accuracy(["[56, 28, 84, 56]"], threshold=0.4, **columns(1, [100, 50, 200, 100], (200, 100),
                                                                         (112, 56), "abs_resized")) == [1.0]


def test_gaussian_point_hand_values():
    # truth [0, 0, 100, 50]: centre (50, 25), sigma_x = 0.5 * 100 = 50, sigma_y = 0.5 * 50 = 25
    cols = columns(4, [0, 0, 100, 50])
    scores = gaussian_point(["<answer>[40, 15, 60, 35]</answer>",  # centre (50, 25): exp(0) = 1
                             "<answer>[90, 15, 110, 35]</answer>",  # dx = 50 = 1 sigma_x: exp(-0.5)
                             "<answer>[90, 40, 110, 60]</answer>",  # 1 sigma in x and y: exp(-0.5 * 2) = exp(-1)
                             "<answer>[0, 0, 100, 50]</answer>"],  # the truth itself: 1
                            **cols)
    assert scores == pytest.approx([1.0, math.exp(-0.5), math.exp(-1.0), 1.0])
    # alpha = 1: sigma_x = 100, dx = 50 is half a sigma: exp(-0.5 * 0.25) = exp(-0.125)
    assert gaussian_point(["[90, 15, 110, 35]"], alpha=1.0, **columns(1, [0, 0, 100, 50])) == \
        pytest.approx([math.exp(-0.125)])


def test_gaussian_point_maps_coordinates():
    # original 200x100; the predicted centre (100, 25) in pixels is one sigma_x right of the truth's: exp(-0.5)
    truth = [0, 0, 100, 50]
    rel = gaussian_point(["[450, 150, 550, 350]"], **columns(1, truth, (200, 100), None, "rel_1000"))
    resized = gaussian_point(["[50.4, 8.4, 61.6, 19.6]"], **columns(1, truth, (200, 100), (112, 56), "abs_resized"))
    assert rel == pytest.approx([math.exp(-0.5)]) and resized == pytest.approx([math.exp(-0.5)])


def test_gaussian_plane_hand_values():
    # truth [0, 0, 100, 50]: sigma (50, 25)
    cols = columns(4, [0, 0, 100, 50])
    scores = gaussian_plane(["<answer>[0, 0, 100, 50]</answer>",  # same Gaussian: D_B = 0 -> 1
                             "<answer>[50, 0, 150, 50]</answer>",  # same sigmas, dx = 50: D_B = 50^2 / (8 * 50^2) = 1/8
                             # same centre, sigma_x 100 vs 50: Sigma_x = (100^2 + 50^2) / 2 = 6250,
                             # D_B = 1/2 ln(6250 / (100 * 50)) = 1/2 ln 1.25 -> R = 1.25^-0.5
                             "<answer>[-50, 0, 150, 50]</answer>",
                             "<answer>[40, 20, 60, 30]</answer>"],  # same centre, smaller: below 1
                            **cols)
    assert scores[:3] == pytest.approx([1.0, math.exp(-1 / 8), 1.25 ** -0.5])
    # [40, 20, 60, 30]: sigma (10, 5) vs (50, 25), r = 1/5 on both axes: D_B = 2 * 1/2 ln((5 + 1/5) / 2) = ln 2.6
    assert scores[3] == pytest.approx(1 / 2.6)


def test_gaussian_plane_is_the_bhattacharyya_coefficient():
    """exp(-D_B) equals the integral of sqrt(p q) of the two Gaussians, computed here numerically per axis."""
    pred, truth = [30.0, 10.0, 170.0, 40.0], [0.0, 0.0, 100.0, 50.0]
    coefficient = 1.0
    for axis in (0, 1):
        grid = np.linspace(-2000, 2000, 400_001)
        densities = []
        for box in (pred, truth):
            mean, sigma = (box[axis] + box[axis + 2]) / 2, 0.5 * (box[axis + 2] - box[axis])
            densities.append(np.exp(-0.5 * ((grid - mean) / sigma) ** 2) / (sigma * math.sqrt(2 * math.pi)))
        coefficient *= float(np.sum(np.sqrt(densities[0] * densities[1])) * (grid[1] - grid[0]))
    assert plane_score(pred, truth) == pytest.approx(coefficient, rel=1e-6)


def test_degenerate_boxes_use_a_one_pixel_floor():
    # truth [50, 0, 50, 50] has zero width: read as 1 px wide, sigma_x = 0.5
    cols = columns(2, [50, 0, 50, 50])
    texts = ["[50, 0, 50, 50]", "[51, 0, 51, 50]"]
    assert gaussian_point(texts, **cols) == pytest.approx([1.0, math.exp(-2.0)])  # dx = 1 = 2 sigma_x
    assert gaussian_plane(texts, **cols) == pytest.approx([1.0, math.exp(-0.5)])  # 1^2 / (8 * 0.5^2) = 0.5
    assert REWARDS["iou"](texts, **cols) == [0.0, 0.0]  # an empty union scores 0, no division by zero


def test_solution_forms_and_kwargs():
    # a solution string (VLM-R1 wraps it in <answer>), a missing solution (not applicable), bad data
    assert gaussian_point(["[0, 0, 100, 50]"], **columns(1, "<answer> [0, 0, 100, 50] </answer>")) == [1.0]
    assert gaussian_plane(["[0, 0, 100, 50]"], **columns(1, None)) == [None]
    with pytest.raises(ValueError, match="not a box"):
        gaussian_point(["[0, 0, 1, 1]"], **columns(1, "a cat"))
    with pytest.raises(ValueError, match="alpha"):
        gaussian_plane(["[0, 0, 1, 1]"], alpha=0, **columns(1, [0, 0, 1, 1]))
    assert gaussian_point(["[0, 0, 1, 1]"], unknown_column=["x"], **columns(1, [0, 0, 1, 1])) == [1.0]
