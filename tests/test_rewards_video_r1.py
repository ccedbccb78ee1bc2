"""video_r1_accuracy against Video-R1's own accuracy_reward (run on adversarial model texts by
tests/fixtures/make_video_r1_rewards.py), its prompts against Video-R1's own prompt builder, and its routes: the
``accuracy`` reward by reward_method, bad golds counted by the reward manager."""
import json
import os

import pytest

from paddle_r1.data.formats import FORMATS, VIDEO_R1_QUESTION_TEMPLATE, SourceContext
from paddle_r1.evaluation.tasks import VIDEO_R1_EVAL_QUESTION_TEMPLATE
from paddle_r1.generation.generator import build_messages
from paddle_r1.rewards import load_builtin_rewards
from paddle_r1.rewards.manager import RewardManager

REWARDS = load_builtin_rewards()
GOLDEN = json.load(open(os.path.join(os.path.dirname(__file__), "fixtures", "video_r1_rewards.json"),
                        encoding="utf-8"))
# where paddle_r1 departs from Video-R1 on purpose (video_r1.py's docstrings): (problem type, gold, completion) ->
# (Video-R1's reward, paddle_r1's)
DEPARTURES = {
    # Video-R1 clips a NaN relative error with min/max, which keeps 0: "nan" earns the full regression reward
    ("regression", "12.5", "<answer>nan</answer>"): (1.0, 0.0),
    # its 1e-9 in the ratio gives an exact answer to a zero gold (1e-9) / (1e-9) = 1, so 0
    ("regression", "0", "<answer>0</answer>"): (0.0, 1.0),
    ("regression", "0", "<answer>0.0</answer>"): (0.0, 1.0),
    ("regression", "0", "<answer>-0</answer>"): (0.0, 1.0),
}


def score(problem_type, gold, completion):
    return REWARDS["video_r1_accuracy"]([completion], solution=[gold], problem_type=[problem_type])[0]


@pytest.mark.parametrize("problem_type", ["multiple choice", "numerical", "OCR", "free-form", "regression"])
def test_each_problem_type_scores_as_video_r1_does(problem_type):
    cases = [c for c in GOLDEN["cases"] if c["problem_type"] == problem_type]
    assert len(cases) >= 10
    for case in cases:
        key = (case["problem_type"], case["solution"], case["completion"])
        theirs, ours = DEPARTURES.get(key, (case["reward"], case["reward"]))
        assert case["reward"] == pytest.approx(theirs, abs=1e-12), key
        assert score(*key) == pytest.approx(ours, abs=1e-6), key
    assert len({c["reward"] for c in cases}) >= 2  # the cases tell right from wrong


def test_the_gold_may_keep_its_tags_and_the_problem_type_its_spelling():
    case = next(c for c in GOLDEN["cases"] if c["problem_type"] == "free-form" and 0 < c["reward"] < 1)
    tagged = f"<answer>{case['solution']}</answer>"
    assert score("Free Form", tagged, case["completion"]) == pytest.approx(case["reward"], abs=1e-9)
    assert score("multiple_choice", "<answer>B</answer>", "<answer>B</answer>") == 1.0
    assert score("ocr", "STOP", "<answer>STOP</answer>") == 1.0


def test_rows_of_other_tasks_score_none_and_bad_golds_are_counted():
    manager = RewardManager(["video_r1_accuracy"])
    completions = ["<answer>3</answer>"] * 5
    columns = {"solution": ["3", "3", "three", "3", None], "problem_type": ["numerical", None, "numerical",
                                                                             "counting", "numerical"]}
    scores = manager.score(completions, columns)
    assert scores.per_function[0, 0] == 1.0
    assert all(v != v for v in scores.per_function[1:, 0])  # NaN: not scored
    assert scores.counters == {"rewards/video_r1_accuracy/bad_solutions": 2}  # the gold "three", the type "counting"


def test_accuracy_routes_video_r1_rows_by_their_reward_method():
    cases = [c for c in GOLDEN["cases"] if len(c["completion"]) < 200][::4]
    accuracy = REWARDS["accuracy"]()
    routed = accuracy([c["completion"] for c in cases], solution=[c["solution"] for c in cases],
                      problem_type=[c["problem_type"] for c in cases], reward_method=["video_r1_accuracy"] * len(cases))
    assert routed == [score(c["problem_type"], c["solution"], c["completion"]) for c in cases]


@pytest.mark.parametrize("index", range(len(GOLDEN["prompts"])))
def test_prompts_are_video_r1s(index):
    """A row of each problem type, adapted by the video_r1 format and put in the prompt with Video-R1's template: the
    same media part and text as Video-R1's make_conversation_image_and_video builds."""
    row, content = GOLDEN["prompts"][index]["row"], GOLDEN["prompts"][index]["content"]
    sample = FORMATS["video_r1"](row, SourceContext(path="data/Video-R1-260k.json"))
    assert sample[row["data_type"] + "s"] == [os.path.abspath(os.path.join("data", row["path"]))]
    assert build_messages(sample, VIDEO_R1_QUESTION_TEMPLATE)[0]["content"] == content


def test_the_eval_template_is_video_r1s():
    assert VIDEO_R1_EVAL_QUESTION_TEMPLATE == GOLDEN["eval_question_template"]
