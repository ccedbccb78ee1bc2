"""Multi-box (per-label Hungarian matching), COCO AP and mask IoU rewards, with hand-checked values."""
import json
import math

import numpy as np
import pytest
from pycocotools import mask as mask_utils
from test_rewards_boxes import GARBAGE, columns

from paddle_r1.rewards import load_builtin_rewards

REWARDS = load_builtin_rewards()

multi_box_format = REWARDS["multi_box_format"]
multi_iou = REWARDS["multi_iou"]
multi_point = REWARDS["multi_gaussian_point"]
multi_plane = REWARDS["multi_gaussian_plane"]
MULTI = ["multi_iou", "multi_gaussian_point", "multi_gaussian_plane"]
coco_map, coco_map50, mask_iou = REWARDS["map"], REWARDS["map50"], REWARDS["mask_iou"]

# seed 000's abs_box shape, original pixels of a 1000x500 image
TRUTH = {"0": [[0, 0, 100, 100]], "1": [], "2": [[200, 0, 300, 100], [400, 0, 500, 100]]}
WRONG_TYPES = [
    '<answer>{"0": "[[0, 0, 100, 100]]"}</answer>',  # a string where a list is expected
    '<answer>{"0": {"a": [0, 0, 100, 100]}}</answer>',  # a dict of dicts
    '<answer>{"0": [[0, 0, 100]]}</answer>',
    '<answer>{"0": [["0", "0", "100", "100"]]}</answer>',
    '<answer>{"0": [[true, 0, 100, 100]]}</answer>',
    '<answer>{"0": [[0, 0, 100, 1e400]]}</answer>',
    '<answer>{"0": [[100, 0, 0, 100]]}</answer>',  # x1 > x2
    '<answer>{"0": [[0, 0, 1' + "0" * 400 + ', 100]]}</answer>',  # an integer too large for a float
    '<answer>"a string"</answer>',
]


def dumps(value) -> str:
    return f"<think>.</think><answer>{json.dumps(value)}</answer>"


# ---- multi-box --------------------------------------------------------------------------------------------
def test_multi_box_format():
    good = [dumps(TRUTH), '```json\n{"a": [[1.5, 2, 3, 4]], "b": []}\n```', "{}"]
    bad = [dumps([[0, 0, 100, 100]]), dumps({"0": [0, 0, 100, 100]})] + WRONG_TYPES
    assert multi_box_format(good + bad) == [1.0] * len(good) + [0.0] * len(bad)


@pytest.mark.parametrize("name", MULTI)
def test_multi_perfect_and_every_label_counts(name):
    only_label_2 = {"0": [], "2": [[200, 0, 300, 100]]}
    swapped = {"2": [[400, 0, 500, 100], [200, 0, 300, 100]], "0": [[0, 0, 100, 100]]}
    scores = REWARDS[name]([dumps(TRUTH), dumps(only_label_2), dumps(swapped)], **columns(3, TRUTH, (1000, 500)))
    # only label "2" matches, with score 1: 2 * 1 / (3 true + 1 predicted) = 0.5 (label "0" alone would give 0)
    assert scores == pytest.approx([1.0, 0.5, 1.0])


def test_multi_pair_scores_hand_values():
    truth = {"0": [[0, 0, 100, 100]]}
    cols = columns(1, truth, (1000, 500))
    pred = [dumps({"0": [[0, 0, 100, 80]]})]  # IoU 8000 / 10000 = 0.8
    assert multi_iou(pred, **cols) == pytest.approx([0.8])  # 2 * 0.8 / (1 + 1)
    # centres (50, 40) vs (50, 50), sigma_y of the truth = 50: exp(-0.5 * (10 / 50)^2) = exp(-0.02)
    assert multi_point(pred, **cols) == pytest.approx([math.exp(-0.02)])
    # y: sigma 40 vs 50, d = 10: Sigma_y = (40^2 + 50^2) / 2 = 2050,
    # D_B = 10^2 / (8 * 2050) + 1/2 ln(2050 / (40 * 50)) = 0.0060976 + 0.0123458 = 0.0184434 (x: identical, 0)
    assert multi_plane(pred, **cols) == pytest.approx([math.exp(-0.0184434)], rel=1e-6)
    # an extra unmatched prediction only grows the denominator: 2 * 0.8 / (1 + 2)
    extra = dumps({"0": [[0, 0, 100, 80]], "5": [[600, 0, 700, 100]]})
    assert multi_iou([extra], **cols) == pytest.approx([1.6 / 3])


def test_multi_iou_drops_pairs_below_min_iou():
    # [50, 0, 150, 100] vs [0, 0, 100, 100]: IoU 5000 / 15000 = 1/3 < 0.5 (the default min_iou): the pair counts 0
    cols = columns(2, {"0": [[0, 0, 100, 100]]}, (1000, 500))
    assert multi_iou([dumps({"0": [[50, 0, 150, 100]]})] * 2, **cols) == [0.0, 0.0]
    assert multi_iou([dumps({"0": [[50, 0, 150, 100]]})], min_iou=0.3, **columns(
        1, {"0": [[0, 0, 100, 100]]}, (1000, 500))) == pytest.approx([1 / 3])


@pytest.mark.parametrize("single, multi", [("gaussian_point", "multi_gaussian_point"),
                                           ("gaussian_plane", "multi_gaussian_plane")])
def test_multi_gaussian_keeps_the_credit_of_a_shifted_box(single, multi):
    # a box shifted off its target (IoU 1/3) kept no credit under the IoU gate, while the
    # single-box Gaussian reward gives it exp(-0.5) (point: one sigma_x off) -- one box, one label: equal scores
    truth, shifted = [0, 0, 100, 100], [50, 0, 150, 100]
    single_score = REWARDS[single]([dumps(shifted)], **columns(1, truth, (1000, 500)))
    multi_score = REWARDS[multi]([dumps({"0": [shifted]})], **columns(1, {"0": [truth]}, (1000, 500)))
    assert multi_score == pytest.approx(single_score) and single_score[0] > 0.5


def test_multi_gaussian_matches_on_its_own_score():
    # two predictions each near the other's listed truth, no overlap with either (every IoU is 0, so matching on
    # IoU pairs them in listed order, far apart); matching on the Gaussian score pairs each with its near box
    truth = {"0": [[0, 0, 10, 10], [100, 0, 110, 10]]}
    pred = {"0": [[98, 0, 108, 10], [2, 0, 12, 10]]}  # centres 2 px right of / left of the true ones
    near = math.exp(-0.5 * (2 / 5) ** 2)  # sigma_x = 0.5 * 10
    assert multi_point([dumps(pred)], **columns(1, truth, (1000, 500))) == pytest.approx([2 * 2 * near / 4])


@pytest.mark.parametrize("name, value", [("multi_iou", 1.5), ("multi_iou", "0.5"), ("multi_gaussian_point", 0.3)])
def test_min_iou_is_checked_and_only_where_iou_is_the_reward(name, value):
    from paddle_r1.errors import ConfigError
    from paddle_r1.rewards.manager import bind_reward

    with pytest.raises(ConfigError, match="min_iou"):
        bind_reward(name, {"min_iou": value})


EASYDISTILL_ANSWER = "<answer>{0: [], 1: [], 2: [[619, 410, 700, 470]], 3: []}</answer>"  # EasyDistill's shape


@pytest.mark.parametrize("name", MULTI)
def test_multi_reads_python_literals_and_integer_labels(name):
    # EasyDistill's answers are Python literals with integer keys; JSON-only reading scored 0
    json_truth = {"0": [], "1": [], "2": [[619, 410, 700, 470]], "3": []}
    literal_truth = "{0: [], 1: [], 2: [[619, 410, 700, 470]], 3: []}"  # a solution string, as the data holds it
    answers = [EASYDISTILL_ANSWER, dumps(json_truth), "<answer>{'2': [(619, 410, 700, 470)]}</answer>",
               "<answer>{2: [[0, 0, 10, 10]]}</answer>", "<answer>{2: [[619, 410, 700]]}</answer>"]
    for truth in (json_truth, literal_truth, {2: [[619, 410, 700, 470]]}):
        scores = REWARDS[name](answers, **columns(len(answers), truth, (1000, 500)))
        assert scores[:3] == pytest.approx([1.0, 1.0, 1.0]) and scores[3] < 0.01 and scores[4] == 0.0


def test_multi_box_format_reads_literals_and_stays_safe():
    assert multi_box_format([EASYDISTILL_ANSWER, "<answer>{0: [[1, 2, 3, 4]], 1: []}</answer>"]) == [1.0, 1.0]
    unsafe = ["<answer>{0: [__import__('os').getpid()]}</answer>", "<answer>{0: [[1, 2, 3, 4]] + [[5]]}</answer>",
              "<answer>{0: [[1, 2, 3, " + "9" * 5000 + "]]}</answer>",  # an int Python will not read
              "<answer>" + "{0: [" * 5000 + "]}" * 5000 + "</answer>",  # deeper than the parser goes
              "<answer>{0: [[1, 2, 3, 4]], " + "1: [], " * 4000 + "}</answer>"]  # longer than MAX_LITERAL_CHARS
    assert multi_box_format(unsafe) == [0.0] * len(unsafe)


@pytest.mark.parametrize("name", MULTI)
def test_multi_empty_cases(name):
    both_empty = REWARDS[name](['{"0": []}', "{}"], **columns(2, {"0": [], "1": []}, (1000, 500)))
    assert both_empty == [1.0, 1.0]
    assert REWARDS[name](['{"0": []}'], **columns(1, TRUTH, (1000, 500))) == [0.0]  # nothing predicted
    assert REWARDS[name](['{"0": [[1, 1, 2, 2]]}'], **columns(1, {"0": []}, (1000, 500))) == [0.0]


@pytest.mark.parametrize("name", MULTI)
def test_multi_maps_coordinates(name):
    only_2 = {"2": [[200, 0, 300, 100], [400, 0, 500, 100]]}
    # abs_resized: original 1000x500 from a 500x250 input (scale 2); rel_1000: x * 1, y * 0.5
    resized = REWARDS[name]([dumps({"2": [[100, 0, 150, 50], [200, 0, 250, 50]]})],
                            **columns(1, only_2, (1000, 500), (500, 250), "abs_resized"))
    rel = REWARDS[name]([dumps({"2": [[200, 0, 300, 200], [400, 0, 500, 200]]})],
                        **columns(1, json.dumps(only_2), (1000, 500), None, "rel_1000"))  # a JSON string solution
    unmapped = REWARDS[name]([dumps(only_2)], **columns(1, only_2, (1000, 500), (500, 250), "abs_resized"))
    assert resized == pytest.approx([1.0]) and rel == pytest.approx([1.0])
    # read unmapped, each box lands 2x off: no IoU credit; the Gaussian rewards keep a little (0.18 / 0.36)
    assert unmapped == [0.0] if name == "multi_iou" else unmapped[0] < 0.4


@pytest.mark.parametrize("name", ["multi_box_format"] + MULTI + ["map", "map50"])
def test_json_rewards_never_raise(name):
    texts = GARBAGE + WRONG_TYPES + [dumps([[0, 0, 100, 100]])]  # a list, not label -> boxes
    truth = TRUTH if name.startswith("multi") else [{"bbox_2d": [0, 0, 100, 100], "label": "0"}]
    cols = columns(len(texts), truth, (1000, 500), (500, 250), "abs_resized")
    assert REWARDS[name](texts, **cols) == [0.0] * len(texts)


@pytest.mark.parametrize("name", MULTI + ["map", "map50"])
def test_boxes_overflowing_when_mapped_score_zero(name):
    # 1.7e308 is finite (multi_box_format accepts it) but x2 * 2 overflows when mapped from the 500x250 input
    box = [0, 0, 1.7e308, 1.7e308]
    text = dumps({"0": [box]} if name.startswith("multi") else [det(box, "0")])
    truth = {"0": [box]} if name.startswith("multi") else [det(box, "0")]
    assert REWARDS[name]([text], **columns(1, truth, (1000, 500), (500, 250), "abs_resized")) == [0.0]


def test_bad_solutions_raise_and_missing_ones_are_not_applicable():
    with pytest.raises(ValueError, match="label -> list"):
        multi_iou(["{}"], **columns(1, [[0, 0, 1, 1]]))
    with pytest.raises(ValueError, match="bbox_2d"):
        coco_map(["[]"], **columns(1, {"0": [[0, 0, 1, 1]]}))
    assert multi_plane(["{}"], **columns(1, None)) == [None] and mask_iou(["[]"], **columns(1, None)) == [None]


# ---- COCO AP ----------------------------------------------------------------------------------------------
def det(box, label="cat"):
    return {"bbox_2d": box, "label": label}


def test_map_hand_values(capsys):
    truth = [det([0, 0, 100, 100])]
    cols = columns(2, truth, (1000, 500))
    # IoU 0.78 matches at thresholds 0.50, 0.55, ..., 0.75 (6 of 10): AP@[.5:.95] = 0.6, AP50 = 1
    texts = [dumps([det([0, 0, 100, 100])]), dumps([det([0, 0, 100, 78])])]
    assert coco_map(texts, **cols) == pytest.approx([1.0, 0.6])
    assert coco_map50(texts, **cols) == pytest.approx([1.0, 1.0])
    assert capsys.readouterr().out == ""  # pycocotools' printing is swallowed


def test_map_order_is_confidence_and_recall_counts():
    cols = columns(3, [det([0, 0, 100, 100]), det([200, 0, 300, 100])], (1000, 500))
    right, right2, wrong = det([0, 0, 100, 100]), det([200, 0, 300, 100]), det([600, 0, 700, 100])
    # COCO averages over 101 recall points the interpolated precision (the best precision at any recall >= r)
    scores = coco_map50([dumps([right, wrong, right2]),  # TP, FP, TP: precision 1 to recall 0.5, then 2/3
                         dumps([right]),  # recall 0.5 at precision 1: 51 of the 101 points
                         dumps([wrong, right, right2])], **cols)  # FP, TP, TP: precision 2/3 reached at recall 1
    assert scores == pytest.approx([(51 + 50 * 2 / 3) / 101, 51 / 101, 2 / 3])


def test_map_labels_empty_and_coordinates():
    truth = [det([0, 0, 100, 100], "cat")]
    assert coco_map50([dumps([det([0, 0, 100, 100], "dog")])], **columns(1, truth, (1000, 500))) == [0.0]
    assert coco_map50(["[]", "no json"], **columns(2, truth, (1000, 500))) == [0.0, 0.0]
    assert coco_map(["[]", dumps([det([0, 0, 1, 1])])], **columns(2, [], (1000, 500))) == [1.0, 0.0]
    # rel_1000 on 1000x500: [0, 0, 100, 200] -> [0, 0, 100, 100]; a single object reads as a list of one;
    # integer labels read as strings; the solution may be a fenced JSON string. The truth's own numbers, read
    # as rel_1000, are [0, 0, 100, 50]: IoU 0.5 matches at threshold 0.5 only, AP@[.5:.95] = 1/10
    solution = "```json\n" + json.dumps([det([0, 0, 100, 100], "3")]) + "\n```"
    scores = coco_map([dumps(det([0, 0, 100, 200], 3)), dumps([det([0, 0, 100, 100], "3")])],
                      **columns(2, solution, (1000, 500), None, "rel_1000"))
    assert scores == pytest.approx([1.0, 0.1])


# ---- masks ------------------------------------------------------------------------------------------------
SQUARE = [10, 10, 50, 10, 50, 50, 10, 50]  # rasterises to rows and columns 10..49 of a 100x200 image: 1600 px


def square_rle_counts():
    # column-major runs of the 100x200 mask with [10:50, 10:50] set: 10 empty columns and 10 rows (1010 zeros),
    # then per column 40 ones and 60 zeros, the last column's 40 ones followed by 50 + 150 * 100 = 15050 zeros
    return [1010] + [40, 60] * 39 + [40, 15050]


def test_mask_iou_polygons_and_rle():
    truth_rle = mask_utils.encode(np.asfortranarray((np.arange(100)[:, None] // 10 % 4 == 1)
                                                    & (np.arange(200)[None, :] // 10 % 4 == 1), dtype=np.uint8))
    assert square_rle_counts() and sum(square_rle_counts()) == 100 * 200
    cols = columns(4, [SQUARE], (200, 100))
    scores = mask_iou([dumps(SQUARE),  # identical: 1
                       dumps([[10, 10, 30, 10, 30, 50, 10, 50]]),  # the left half: 800 / 1600 = 0.5
                       dumps({"size": [100, 200], "counts": square_rle_counts()}),  # the same square as RLE: 1
                       dumps([[10, 10, 30, 10, 30, 50, 10, 50], [30, 10, 50, 10, 50, 50, 30, 50]])],  # two halves: 1
                      **cols)
    assert scores == pytest.approx([1.0, 0.5, 1.0, 1.0])
    # a compressed-string RLE solution: rows and columns 10..19, 50..59, 90..99 (and columns 130.., 170..)
    # the square [10..49]^2 overlaps it in 100 px; areas 1600 and 3 * 5 * 100 = 1500 px: 100 / 3000
    rle = {"size": truth_rle["size"], "counts": truth_rle["counts"].decode()}
    assert mask_iou([dumps(SQUARE)], **columns(1, rle, (200, 100))) == pytest.approx([100 / 3000])


def test_mask_iou_maps_predicted_polygons():
    # original 200x100; rel_1000 units: x * 0.2, y * 0.1, so [50, 100, 250, 100, 250, 500, 50, 500] is SQUARE
    rel = [50, 100, 250, 100, 250, 500, 50, 500]
    assert mask_iou([dumps(rel)], **columns(1, [SQUARE], (200, 100), None, "rel_1000")) == [1.0]
    # abs_resized from a 100x50 input (scale 2)
    half = [5, 5, 25, 5, 25, 25, 5, 25]
    assert mask_iou([dumps(half)], **columns(1, [SQUARE], (200, 100), (100, 50), "abs_resized")) == [1.0]


def test_mask_iou_empty_and_unreadable():
    empty_truth = {"size": [100, 200], "counts": [20000]}
    assert mask_iou(["[]", dumps(SQUARE)], **columns(2, empty_truth, (200, 100))) == [1.0, 0.0]
    bad = [
        dumps({"size": [100, 200], "counts": [1000]}),  # counts not adding up to h * w
        dumps({"size": [50, 100], "counts": [5000]}),  # not the image size
        dumps({"size": [100, 200], "counts": "PPa0"}),  # compressed strings are not checkable: refused
        dumps({"size": [100, 200], "counts": [-5, 20005]}),
        dumps([10, 10, 50, 10]),  # two points are not a polygon
        dumps([10, 10, 50, 10, 50]),  # odd length
        dumps([10, 10, 1e308, 10, 50, 50]),  # a vertex far outside the image
        dumps([[10, 10, 50, 10, 50, 50], "x"]),
    ] + GARBAGE + WRONG_TYPES
    assert mask_iou(bad, **columns(len(bad), [SQUARE], (200, 100))) == [0.0] * len(bad)


# ---- VLM-R1's accuracy methods -----------------------------------------------------------
CAT, DOG = [0, 0, 100, 100], [200, 0, 300, 100]
TWO = [det(CAT, "cat"), det(DOG, "dog")]


@pytest.mark.parametrize("pred, expected", [
    # greedy: DOG (IoU 1) then CAT (IoU 0.8); position 1.8 / 2, completeness 1 - (0 / 2 + 1 / 3) / 2
    ([det([0, 0, 100, 80], "Cat"), det(DOG, "dog"), det([500, 0, 600, 100], "cat")],
     0.7 * 0.9 + 0.3 * (1 - 1 / 6)),
    ([det(CAT, "dog"), det(DOG, "dog")], 0.7 * 0.5 + 0.3 * 1.0),  # a matched pair with the wrong label: IoU 0
    ([det([50, 0, 150, 100], "cat")], 0.0),  # IoU 1/3 < 0.5: nothing matched, completeness 1 - (1 + 1) / 2
    (TWO, 1.0),
])
def test_weighted_sum_hand_values(pred, expected):
    assert REWARDS["weighted_sum"]([dumps(pred)], **columns(1, TWO, (1000, 500))) == pytest.approx([expected])


def test_weighted_sum_weights_and_none():
    weighted = REWARDS["weighted_sum"]
    cols = columns(1, TWO, (1000, 500))
    assert weighted([dumps([det(CAT, "dog"), det(DOG, "dog")])], beta=1.0, **cols) == pytest.approx(
        [(0.7 * 0.5 + 1.0 * 0.5 + 0.3 * 1.0) / 2.0])
    nothing = columns(3, "<answer>None</answer>", (1000, 500))
    assert weighted(["<answer>None</answer>", "none.", dumps(TWO)], **nothing) == [1.0, 1.0, 0.0]
    assert weighted(["<answer>None</answer>"], **cols) == [0.0]
    from paddle_r1.errors import ConfigError
    from paddle_r1.rewards.manager import bind_reward

    for bad in ({"alpha": -1}, {"iou_threshold": 2}, {"alpha": 0, "beta": 0, "gamma": 0}, {"gamma": "0.3"}):
        with pytest.raises(ConfigError, match="reward_kwargs.weighted_sum"):
            bind_reward("weighted_sum", bad)


def test_od_length_pays_for_extra_boxes():
    extra = dumps(TWO + [det([500, 0, 600, 100], "cat")])  # last: least confident, AP stays 1
    scores = REWARDS["odLength"]([dumps(TWO), extra, "<answer>None</answer>"], **columns(3, TWO, (1000, 500)))
    assert scores == pytest.approx([1.0, 2 / 3, 0.0])
    assert REWARDS["odLength"](["None"], **columns(1, "None", (1000, 500))) == [1.0]


def test_accuracy_routes_vlm_r1_methods():
    from paddle_r1.rewards.manager import RewardManager

    methods = ["od_ap", "od_ap50", "odLength", "weighted_sum", "all_match", "all_match", "od_ap"]
    solutions = [json.dumps(TWO)] * 4 + ["<answer> A red car. </answer>", "a red car", "None"]
    completions = [dumps(TWO)] * 4 + ["<answer>a red  car</answer>", "<answer>a red car!</answer>",
                                      "<think>nothing there</think><answer>None</answer>"]
    cols = columns(len(methods), None, (1000, 500))
    cols.update(solution=solutions, reward_method=methods)
    scores = RewardManager(["accuracy"]).score(completions, cols)
    assert scores.per_function[:, 0].tolist() == [1.0] * 7 and scores.counters == {}  # none unknown
    wrong = ["<answer>a blue car</answer>"]
    assert REWARDS["all_match"](wrong, solution=["a red car"]) == [0.0]
