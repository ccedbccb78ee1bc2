"""Counting evaluation under the two protocols (issue 21 item 5): paddle_r1's lenient reader (the training reward)
and the peers' published rule, <answer>\\s*(\\d+)\\s*</answer> (R1-V's and VLM-R1's eval scripts)."""
import pytest

from paddle_r1.evaluation.cli import build_parser
from paddle_r1.evaluation.tasks import TASKS, task_for_dataset
from paddle_r1.rewards import REWARDS

COMPLETIONS = ["<think>.</think><answer>6</answer>", "<answer> 6 </answer>", "<answer>There are 6 cubes.</answer>",
               "<answer>six</answer>", "<answer>6.0</answer>", "<answer>7</answer>", "6",
               "<answer>6</answer><answer>7</answer>"]  # the published rule reads the first, ours the last
LENIENT = [True, True, True, True, True, False, True, False]
PUBLISHED = [True, True, False, False, False, False, False, True]


def test_counting_protocols():
    columns = {"solution": [6] * len(COMPLETIONS)}
    counting = task_for_dataset("superclevr_test200_counting_problems")
    assert counting.under("paddle_r1") is counting and counting.score(COMPLETIONS, columns) == LENIENT
    published = counting.under("published")
    assert published.name == "counting/published" and published.score(COMPLETIONS, columns) == PUBLISHED
    assert [published.parse(c) for c in COMPLETIONS[:3]] == [6, 6, None]
    assert TASKS["geoqa"].under("published") is TASKS["geoqa"]  # one rule for GeoQA (see the README)
    with pytest.raises(ValueError, match="protocol"):
        counting.under("vlm-r1")


def test_counting_strict_reward():
    strict = REWARDS["counting_strict"]
    assert strict(COMPLETIONS, solution=["<answer> 6 </answer>"] * len(COMPLETIONS)) == [float(p) for p in PUBLISHED]
    assert strict(["<answer>6</answer>"], solution=[None]) == [None]
    with pytest.raises(ValueError, match="not a counting answer"):
        strict(["<answer>6</answer>"], solution=["many"])


def test_protocol_option():
    parser = build_parser("r1v")
    base = ["--model_path", "m", "--data_root", "d", "--test_datasets", "x"]
    assert parser.parse_args(base).protocol == "paddle_r1"
    assert parser.parse_args(base + ["--protocol", "published"]).protocol == "published"
    with pytest.raises(SystemExit):
        parser.parse_args(base + ["--protocol", "other"])
