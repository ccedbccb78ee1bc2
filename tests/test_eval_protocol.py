"""Evaluation protocols: counting under paddle_r1's lenient reader (the training reward) and the peers' published rule,
<answer>\\s*(\\d+)\\s*</answer>; PaddleMIX r1_mllm's eval scripts as users run them."""
import json
import os
import random
import shutil
import subprocess
import sys
from dataclasses import replace

import pytest

from paddle_r1.evaluation.cli import build_parser
from paddle_r1.evaluation.protocols import PADDLEMIX_R1V, PADDLEMIX_REC_R1, paddlemix_box, paddlemix_iou
from paddle_r1.evaluation.inputs import EvalOptions, asked
from paddle_r1.evaluation.runner import template_for
from paddle_r1.evaluation.tasks import TASKS, task_for_dataset
from paddle_r1.rewards import load_builtin_rewards

REWARDS = load_builtin_rewards()

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
    assert counting.under("paddlemix").score(COMPLETIONS, columns) == PUBLISHED  # PaddleMIX reads counts the same way


def test_counting_strict_reward():
    strict = REWARDS["counting_strict"]
    assert strict(COMPLETIONS, solution=["<answer> 6 </answer>"] * len(COMPLETIONS)) == [float(p) for p in PUBLISHED]
    assert strict(["<answer>6</answer>"], solution=[None]) == [None]
    assert strict(["<answer>" + "6" * 5000 + "</answer>"], solution=["6"]) == [0.0]  # past int()'s 4300 digits
    with pytest.raises(ValueError, match="not a counting answer"):
        strict(["<answer>6</answer>"], solution=["many"])


def test_protocol_option():
    base = ["--model_path", "m", "--data_root", "d", "--test_datasets", "x"]
    for kind in ("r1v", "rec"):  # one option, one registry, on both scripts
        parser = build_parser(kind)
        assert parser.parse_args(base).protocol == "paddle_r1"
        assert parser.parse_args(base + ["--protocol", "paddlemix"]).protocol == "paddlemix"
        with pytest.raises(SystemExit):
            parser.parse_args(base + ["--protocol", "other"])


def _script(tmp_path, script, *args):
    """An eval script as a user runs it, from ``tmp_path`` (PaddleMIX's protocol writes to ./logs)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root}
    return subprocess.run([sys.executable, os.path.join(root, "eval", script), *args], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path, env=env)


def _rec_files(tmp_path, rec_jsonl, names):
    """rec_jsons_processed-style json lists, each row with its normal_caption (the baseline's question)."""
    rows = [json.loads(line) for line in open(rec_jsonl)]
    rows = [dict(r, normal_caption=f"thing {i}", solution=[i, i, i + 20, i + 20]) for i, r in enumerate(rows)]
    for name in names:
        (tmp_path / f"{name}.json").write_text(json.dumps(rows))
    return rows


def test_paddlemix_rec_command(tmp_path, tiny_model_dir, rec_jsonl):
    rows = _rec_files(tmp_path, rec_jsonl, ["refcoco_val", "refcocop_val"])
    result = _script(tmp_path, "test_rec.py", "--model_name", "Qwen2.5-VL-3B-Instruct", "--method", "baseline",
                     "--model_path", tiny_model_dir, "--data_root", str(tmp_path),
                     "--image_root", os.path.dirname(rec_jsonl), "--test_datasets", "refcoco_val", "refcocop_val",
                     "--batch_size", "4", "--sample_num", "5", "--steps", "300", "--seed", "42",
                     "--max_new_tokens", "6", "--protocol", "paddlemix")
    assert result.returncode == 0, result.stderr
    random.seed(42)  # PaddleMIX: seeded once, then each dataset shuffled in turn and cut to sample_num
    expected = []
    for _ in range(2):
        shuffled = list(rows)
        random.shuffle(shuffled)
        expected.append([r["solution"] for r in shuffled[:5]])
    for name, solutions in zip(["refcoco_val", "refcocop_val"], expected):
        written = json.load(open(tmp_path / "logs" / f"rec_results_{name}_qwen2.5-vl-3b-instruct_baseline_300.json"))
        assert [r["ground_truth"] for r in written["results"]] == solutions
        assert set(written["results"][0]) == {"question", "ground_truth", "model_output", "extracted_answer", "correct"}
        assert written["accuracy"] == 100 * sum(r["correct"] for r in written["results"]) / 5


def test_paddlemix_prompts_and_baseline_question(tmp_path, tiny_model_dir):
    options = EvalOptions(data_root="", image_root=None, protocol="paddlemix")
    assert template_for(options, "rec", tiny_model_dir) == PADDLEMIX_REC_R1
    assert PADDLEMIX_REC_R1.endswith("Output the final answer in JSON format.")
    baseline = replace(options, method="baseline")
    assert template_for(baseline, "rec", tiny_model_dir) == \
        "Locate {Question}, output its bbox coordinates using JSON format."
    assert template_for(baseline, "counting", tiny_model_dir) == PADDLEMIX_R1V
    sample = {"problem": "the lady in blue", "normal_caption": "lady in blue", "_source": "f[0]"}
    assert asked([sample], "normal_caption")[0]["problem"] == "lady in blue"
    with pytest.raises(ValueError, match=r"f\[0\]: no 'normal_caption'"):
        asked([{"problem": "x", "_source": "f[0]"}], "normal_caption")


def test_paddlemix_box_reading_and_iou():
    assert paddlemix_box("<answer>[1, 2.5, 30, 40]</answer>") == [1.0, 2.5, 30.0, 40.0]
    assert paddlemix_box("[1, 2, 30, 40]") is None  # r1 needs the answer tags
    assert paddlemix_box("box: 1, 2, 30, 40", "baseline") == [1.0, 2.0, 30.0, 40.0]
    assert paddlemix_iou([0, 0, 10, 10], [0, 0, 10, 10]) == 1.0
    assert paddlemix_iou([0, 0, 10, 10], [5, 5, 15, 15]) == 25 / 175
    assert paddlemix_iou([0, 0, 10, 10], [9, 0, 20, 10]) == 0.0  # a one-pixel overlap counts as none
    columns = {"solution": [[0, 0, 100, 100]] * 3, "image_sizes": [[(100, 100)]] * 3,
               "input_sizes": [[(100, 100)]] * 3, "coord_system": ["abs_resized"] * 3}
    task = TASKS["rec"].under("paddlemix", "r1")
    assert task.name == "rec/paddlemix"
    # PaddleMIX reads [..] only
    assert task.score(["<answer>[0, 0, 90, 90]</answer>", "<answer>(0, 0, 90, 90)</answer>",
                       "<answer>[0, 0, 40, 40]</answer>"], columns) == [True, False, False]


def test_paddlemix_counting_command_and_trained_template(tmp_path, tiny_model_dir):
    from PIL import Image

    for i in range(3):
        Image.new("RGB", (56, 56), (40 * i, 90, 90)).save(tmp_path / f"{i}.png")
    with open(tmp_path / "superclevr_test200_counting_problems.jsonl", "w") as f:
        for i in range(3):
            f.write(json.dumps({"image_path": f"./{i}.png", "question": f"How many? ({i})", "ground_truth": i}) + "\n")
    args = ["--model_name", "Qwen2.5-VL-3B-Instruct", "--method", "r1", "--data_root", str(tmp_path),
            "--image_root", str(tmp_path), "--test_datasets", "superclevr_test200_counting_problems",
            "--batch_size", "2", "--steps", "500", "--seed", "42", "--max_new_tokens", "4"]
    result = _script(tmp_path, "test_r1-v.py", "--model_path", tiny_model_dir, *args, "--sample_num", "1",
                     "--protocol", "paddlemix")
    assert result.returncode == 0, result.stderr
    written = json.load(open(tmp_path / "logs" / "r1-v_results_superclevr_test200_counting_problems_"
                                                  "qwen2.5-vl-3b-instruct_r1_500.json"))
    assert [r["ground_truth"] for r in written["results"]] == [0, 1, 2]  # the whole file, in order
    assert set(written["results"][0]) == {"question", "ground_truth", "model_output", "extracted_answer"}

    checkpoint = tmp_path / "run" / "checkpoint-5"  # a paddle_r1 checkpoint remembers its training prompt
    shutil.copytree(tiny_model_dir, checkpoint)
    (checkpoint / "trainer_state.json").write_text(json.dumps({"config": {"question_template": "Count: {Question}"}}))
    result = _script(tmp_path, "test_r1-v.py", "--model_path", str(checkpoint), *args, "--output_dir", "out")
    assert result.returncode == 0, result.stderr
    summary = json.load(open(tmp_path / "out" / os.listdir(tmp_path / "out")[0]))
    assert summary["question_template"] == "Count: {Question}" and summary["protocol"] == "paddle_r1"


def test_published_protocol_decodes_with_the_checkpoints_repetition_penalty(tmp_path, tiny_model_dir, rec_jsonl,
                                                                             capsys):
    """R1-V's and VLM-R1's eval scripts decode with transformers' generate(do_sample=False), which applies the
    checkpoint's generation_config.json repetition_penalty: --protocol published does; --repetition_penalty wins; the
    default protocol decodes without one."""
    from paddle_r1.evaluation.cli import main

    model = str(tmp_path / "checkpoint")
    shutil.copytree(tiny_model_dir, model)
    config_path = os.path.join(model, "generation_config.json")
    json.dump({**json.load(open(config_path)), "repetition_penalty": 2.0}, open(config_path, "w"))
    _rec_files(tmp_path, rec_jsonl, ["refcoco_val"])

    def answers(name, *args):
        out = tmp_path / name
        assert main("rec", ["--model_path", model, "--data_root", str(tmp_path), "--image_root",
                            os.path.dirname(rec_jsonl), "--test_datasets", "refcoco_val", "--batch_size", "4",
                            "--sample_num", "4", "--max_new_tokens", "10", "--output_dir", str(out), *args]) == 0
        (written,) = os.listdir(out)
        return [r["answer"] for r in json.load(open(out / written))["results"]]

    published = answers("published", "--protocol", "published")
    assert "greedy decoding with repetition_penalty 2.0" in capsys.readouterr().out
    assert published == answers("given", "--repetition_penalty", "2.0")
    plain = answers("plain")
    assert plain != published
    assert answers("published_without", "--protocol", "published", "--repetition_penalty", "1") == plain
