import json
import math

import pytest

from paddle_r1.rewards import load_builtin_rewards

REWARDS = load_builtin_rewards()

json_format = REWARDS["json_format"]
gui_action = REWARDS["gui_action"]

THINK = json.dumps({"task_interpretation": "ride to the estate", "current_page_audit": "route page",
                    "path_alignment_check": "step 3", "action_validation": "the box is the end field"},
                   ensure_ascii=False)
ANSWER = '{"action_type": "click", "action_parameter": {"click": "49,721,1368,1008"}, "action_description": "点击"}'


# ---- json_format (seed 004's five checks, 0.5 each, / 2.5) ------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    (f"<think>{THINK}</think><answer>{ANSWER}</answer>", 1.0),  # 2.5 / 2.5
    (f"<think>\n{THINK}\n</think>\n<answer>\n```json\n{ANSWER}\n```\n</answer>", 1.0),  # fenced JSON is JSON
    (f'<think>{{"task_interpretation": "x"}}</think><answer>{ANSWER}</answer>', 0.8),  # fields missing: 2 / 2.5
    (f"<think>I should click</think><answer>{ANSWER}</answer>", 0.6),  # tags + answer JSON: 1.5 / 2.5
    (f"<think>[1, 2]</think><answer>{ANSWER}</answer>", 0.8),  # JSON, but not an object with the fields
    (f"<think>{THINK}</think><answer>click it</answer>", 0.8),
    (f"<answer>{ANSWER}</answer>", 0.4),  # answer tags + answer JSON: 1 / 2.5
    (f"<think>{THINK}</think>", 0.6),  # think tags, think JSON, fields: 1.5 / 2.5
    (ANSWER, 0.0),  # no tags at all
    ("<think>NaN</think><answer>Infinity</answer>", 0.4),  # tags only: NaN is not JSON
    ("<think><think>{}</think></think><answer>{}</answer>", 0.6),  # nested think: "<think>{}" is not JSON
    ("", 0.0), ("\x00\uffff<think" * 2000, 0.0), ("[" * 10_000, 0.0),
    ("<think>" + "[" * 10_000 + "</think><answer>" + "9" * 5000 + "</answer>", 0.4),  # too deep, too long
])
def test_json_format(text, expected):
    assert json_format([text]) == pytest.approx([expected])


def test_json_format_required_fields():
    text = f'<think>{{"plan": 1, "check": 2}}</think><answer>{ANSWER}</answer>'
    assert json_format([text]) == pytest.approx([0.8])  # default: seed 004's four fields
    assert json_format([text], required_fields=["plan", "check"]) == pytest.approx([1.0])
    assert json_format([text], required_fields="plan, check") == pytest.approx([1.0])  # a comma-separated string
    assert json_format([text], required_fields=[]) == pytest.approx([1.0])  # any object
    assert json_format([text], required_fields=["plan", "missing"]) == pytest.approx([0.8])


# ---- gui_action -------------------------------------------------------------------------------------------

SCREEN = (1080, 2400)  # original screenshot; diagonal D = sqrt(1080^2 + 2400^2) = 2631.81
DIAGONAL = math.hypot(*SCREEN)


def _action(kind, value):
    return json.dumps({"action_type": kind, "action_parameter": {kind: value}}, ensure_ascii=False)


def _score(answer, solution, system="abs_original", input_size=(1092, 2408), **kwargs):
    # two screenshots (previous, current); the action is on the last one
    return gui_action([answer], solution=[solution], image_sizes=[[(540, 1200), SCREEN]],
                      input_sizes=[[(532, 1204), input_size]], coord_system=[system], **kwargs)[0]


CLICK = _action("click", "37,378,227,633")  # seed 004's click box, original pixels


@pytest.mark.parametrize("answer, system, input_size, expected", [
    (f"<answer>{_action('click', '100,400')}</answer>", "abs_original", None, 1.0),  # inside
    (f"<answer>{_action('click', '[40, 380, 220, 630]')}</answer>", "abs_original", None, 1.0),  # box centre
    (f"<answer>{_action('click', [100, 400])}</answer>", "abs_original", None, 1.0),  # a JSON list
    # rel_1000: (100, 200) -> (108, 480) in pixels, inside
    (f"<answer>{_action('click', '100,200')}</answer>", "rel_1000", None, 1.0),
    # abs_resized, input 540x1200: (66, 250) -> (132, 500), inside
    (f"<answer>{_action('click', '66,250')}</answer>", "abs_resized", (540, 1200), 1.0),
    # ... the same numbers read as original pixels lie 378 - 250 = 128 px above the box:
    # exp(-128 / (0.05 * 2631.81)) = exp(-0.9727) = 0.3781
    (f"<answer>{_action('click', '66,250')}</answer>", "abs_original", None, math.exp(-128 / (0.05 * DIAGONAL))),
    # (100, 800): 167 px below the box: exp(-167 / 131.59) = 0.2811
    (f"<answer>{_action('click', '100,800')}</answer>", "abs_original", None, 0.2810870808568263),
    (f"<answer>{_action('long_click', '100,400')}</answer>", "abs_original", None, 0.0),  # another type
    (f"<answer>{_action('click', 'the search box')}</answer>", "abs_original", None, 0.0),
    (f"<answer>{_action('click', '1e400,5')}</answer>", "abs_original", None, 0.0),
])
def test_click(answer, system, input_size, expected):
    assert _score(answer, CLICK, system, input_size) == pytest.approx(expected)


def test_click_distance_scale():
    # 128 px above the box with distance_scale 0.1: exp(-128 / 263.18) = 0.6149
    answer = f"<answer>{_action('click', '66,250')}</answer>"
    assert _score(answer, CLICK, distance_scale=0.1) == pytest.approx(math.exp(-128 / (0.1 * DIAGONAL)))
    with pytest.raises(ValueError, match="distance_scale"):
        _score(answer, CLICK, distance_scale=0)


SWIPE = _action("swipe", "158,1557,122,1253")  # seed 004: from (158, 1557) to (122, 1253)


@pytest.mark.parametrize("value, tolerance, expected", [
    ("160,1550,120,1260", 0.1, 1.0),  # both ends within 0.1 * D = 263 px
    ("158,1557,122,1553", 0.1, 0.0),  # the end 300 px off
    ("122,1253,158,1557", 0.1, 0.0),  # reversed: both ends hypot(36, 304) = 306 px off
    ("122,1253,158,1557", 0.2, 1.0),  # ... within 0.2 * D = 526 px
    ("158,1557", 0.1, 0.0),  # a swipe needs two points
])
def test_swipe(value, tolerance, expected):
    assert _score(f"<answer>{_action('swipe', value)}</answer>", SWIPE, swipe_tolerance=tolerance) == expected


@pytest.mark.parametrize("kind, truth, value, expected", [
    ("type", "无锡", " 无锡 ", 1.0),
    ("type", "Hello World", "hello world.", 1.0),  # normalized: case, whitespace, outer punctuation
    ("type", "无锡", "无锡市", 0.0),
    ("open_app", "微信", "微信", 1.0),
    ("open_app", "微信", "淘宝", 0.0),
    ("wait", "", "", 1.0),
    ("back", "", "anything", 1.0),  # parameterless: the type decides
    ("task_completed", "任务已完成", "done", 1.0),
    ("task_impossible", "", "", 1.0),
])
def test_text_and_parameterless_actions(kind, truth, value, expected):
    assert _score(f"<answer>{_action(kind, value)}</answer>", _action(kind, truth)) == expected


def test_solution_forms_and_type_mismatch():
    answer = f"<think>{{}}</think><answer>{_action('wait', '')}</answer>"
    assert _score(answer, {"action_type": "wait", "action_parameter": {"wait": ""}}) == 1.0  # a dict
    assert _score(answer, f"<answer> {_action('wait', '')} </answer>") == 1.0  # VLM-R1's tagged solution
    assert _score(answer, CLICK) == 0.0
    assert _score(answer, None) is None
    with pytest.raises(ValueError, match="not an action"):
        _score(answer, "click somewhere")
    with pytest.raises(ValueError, match="not an action"):
        _score(answer, _action("click", "near the top"))  # a click solution needs its box


@pytest.mark.parametrize("answer", [
    "", "NaN", "1e400", "<answer>{}</answer>", '<answer>{"action_type": 5}</answer>',
    '<answer>{"action_type": "click"}</answer>', '<answer>{"action_type": "click", "action_parameter": null}</answer>',
    f"<answer><answer>{_action('click', '100,400')}</answer></answer>",  # nested tags
    f"<answer>{_action('click', '1e400,1e400,1e400,1e400')}</answer>",
    f"<answer>{_action('click', [True, False])}</answer>",
    '<answer>{"action_type": "click", "action_parameter": {"click": ' + "9" * 5000 + "}}</answer>",
    "[" * 10_000, "\x00\uffff" * 5000,
])
def test_garbage_scores_zero(answer):
    assert _score(answer, CLICK) == 0.0
