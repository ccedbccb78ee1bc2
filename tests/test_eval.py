"""eval/test_rec.py and eval/test_r1-v.py on a tiny checkpoint and benchmark files in the real formats."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image
from test_cli import assert_no_library_notices, imported_modules

from paddle_r1.evaluation.inputs import checkpoint_label, expand_model_paths
from paddle_r1.evaluation.runner import accuracy_table
from paddle_r1.evaluation.tasks import TASKS, task_for_dataset

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_script(script, *args):
    return subprocess.run([sys.executable, os.path.join(ROOT, "eval", script), *args], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)


@pytest.fixture(scope="module")
def rec_benchmark(tmp_path_factory, rec_jsonl):
    """A refcoco_val.json as in rec_jsons_processed: a json list, image paths relative to --image_root."""
    root = tmp_path_factory.mktemp("rec_jsons_processed")
    rows = [json.loads(line) for line in open(rec_jsonl)]
    (root / "refcoco_val.json").write_text(json.dumps(rows))
    (root / "refgta_subsample.json").write_text(json.dumps(rows[:3]))
    return str(root), os.path.dirname(rec_jsonl)


def test_rec_script_writes_results_table_and_pictures(tmp_path, tiny_model_dir, rec_benchmark):
    data_root, image_root = rec_benchmark
    model = tmp_path / "whatever-name"  # the family comes from config.json, not the folder's name
    shutil.copytree(tiny_model_dir, model)
    out = tmp_path / "results"
    result = run_script("test_rec.py", "--model_name", "Qwen2.5-VL-3B-Instruct", "--method", "r1",
                        "--model_path", str(model), "--data_root", data_root, "--image_root", image_root,
                        "--test_datasets", "refcoco_val", "refgta_subsample", "--batch_size", "4",
                        "--sample_num", "6", "--steps", "300", "--seed", "42", "--max_new_tokens", "8",
                        "--dtype", "float32", "--output_dir", str(out), "--visualize", "2")
    assert result.returncode == 0, result.stderr
    assert_no_library_notices(result)
    summary = json.load(open(out / "refcoco_val_Qwen2.5-VL-3B-Instruct_r1_step300.json"))
    assert summary["total"] == 6 and len(summary["results"]) == 6
    assert summary["accuracy"] == sum(r["correct"] for r in summary["results"]) / 6
    assert len({r["question"] for r in summary["results"]}) > 1  # each result keeps its own question
    assert {"question", "answer", "prediction", "ground_truth", "correct", "image"} <= set(summary["results"][0])
    assert json.load(open(out / "refgta_subsample_Qwen2.5-VL-3B-Instruct_r1_step300.json"))["total"] == 3
    assert "| model | refcoco_val | refgta_subsample |" in result.stdout
    pictures = os.listdir(out / "visualize" / "refcoco_val_Qwen2.5-VL-3B-Instruct")
    assert len(pictures) == 2 and all(p.endswith(".png") for p in pictures)


def test_r1v_script_counting_and_geoqa(tmp_path, tiny_model_dir):
    images = tmp_path / "images"
    images.mkdir()
    for i in range(3):
        Image.new("RGB", (84, 56), (40 * i, 90, 90)).save(images / f"{i}.png")
    with open(tmp_path / "superclevr_test200_counting_problems.jsonl", "w") as f:
        for i in range(3):
            row = {"image_path": f"{i}.png", "question": f"How many things? ({i})", "ground_truth": i}
            f.write(json.dumps(row) + "\n")
    with open(tmp_path / "geoqa_test_prompts.jsonl", "w") as f:
        f.write(json.dumps({"image_path": "0.png", "question": "Angle ABC?", "ground_truth": "40°"}) + "\n")
    out = tmp_path / "out"
    result = run_script("test_r1-v.py", "--model_path", tiny_model_dir, "--data_root", str(tmp_path),
                        "--image_root", str(images), "--test_datasets", "superclevr_test200_counting_problems",
                        "geoqa_test_prompts", "--batch_size", "2", "--max_new_tokens", "6", "--output_dir", str(out))
    assert result.returncode == 0, result.stderr
    files = sorted(os.listdir(out))
    assert len(files) == 2
    counting = json.load(open(out / [f for f in files if f.startswith("superclevr")][0]))
    assert counting["task"] == "counting" and counting["total"] == 3
    assert json.load(open(out / [f for f in files if f.startswith("geoqa")][0]))["task"] == "geoqa"


def test_sweep_over_a_runs_checkpoints(tmp_path, tiny_model_dir, rec_benchmark):
    data_root, image_root = rec_benchmark
    run = tmp_path / "run"
    for step in (2, 10):
        shutil.copytree(tiny_model_dir, run / f"checkpoint-{step}")
        (run / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
    assert expand_model_paths([str(run)]) == [str(run / "checkpoint-2"), str(run / "checkpoint-10")]
    result = run_script("test_rec.py", "--model_path", str(run), "--data_root", data_root, "--image_root", image_root,
                        "--test_datasets", "refgta_subsample", "--batch_size", "3", "--max_new_tokens", "4",
                        "--output_dir", str(tmp_path / "out"), "--visualize", "1")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[-4] == "| model | refgta_subsample |"
    assert lines[-2].startswith("| step 2 |") and lines[-1].startswith("| step 10 |")
    # each checkpoint's files named as its results json is, "step 2" as step_2 (no space in a folder name)
    assert sorted(os.listdir(tmp_path / "out" / "visualize")) == ["refgta_subsample_step_10", "refgta_subsample_step_2"]
    assert "refgta_subsample_step_2_r1.json" in os.listdir(tmp_path / "out")


def run_script_seeing_imports(script, *args):
    """``run_script`` under ``PYTHONPROFILEIMPORTTIME``: the modules the script imported, and its result."""
    result = subprocess.run([sys.executable, os.path.join(ROOT, "eval", script), *args], capture_output=True,
                            text=True, timeout=300, cwd=ROOT, env={**os.environ, "PYTHONPROFILEIMPORTTIME": "1"})
    return imported_modules(result), result


@pytest.mark.parametrize("script, models, datasets, error", [
    ("test_rec.py", [], ["refcoco_val", "refcoco_vall"], "no refcoco_vall.json or refcoco_vall.jsonl in {data_root}"),
    ("test_r1-v.py", [], ["refcoco_val"], "cannot tell the task of dataset 'refcoco_val'; pass --task counting|geoqa"),
    ("test_rec.py", ["{tmp_path}/checkpoint-30"], ["refcoco_val"], "model folder not found: {tmp_path}/checkpoint-30"),
    ("test_rec.py", [], ["refcoco_val", "refcoco_testA"], "{data_root}/refcoco_testA.json: the dataset is empty "
                                                          "(skipped 1 of 1 samples: {data_root}/refcoco_testA.json[0] "
                                                          "image not found: {image_root}/gone.png)"),
], ids=["missing file", "unknown task", "missing model folder", "no sample to score"])
def test_a_wrong_input_stops_before_any_model_loads(tmp_path, tiny_model_dir, rec_benchmark, script, models, datasets,
                                                    error):
    """After an existing model and dataset: nothing is evaluated and Paddle is never imported."""
    data_root = shutil.copytree(rec_benchmark[0], tmp_path / "data")
    (data_root / "refcoco_testA.json").write_text(json.dumps([{"image": "gone.png", "problem": "the cat",
                                                               "solution": [1, 2, 3, 4]}]))
    out = tmp_path / "out"
    models = [tiny_model_dir, tiny_model_dir] + [model.format(tmp_path=tmp_path) for model in models]
    modules, result = run_script_seeing_imports(
        script, "--model_path", *models, "--data_root", str(data_root), "--image_root", rec_benchmark[1],
        "--test_datasets", *datasets, "--max_new_tokens", "4", "--output_dir", str(out))
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1] == "error: " + error.format(data_root=data_root, tmp_path=tmp_path,
                                                                               image_root=rec_benchmark[1])
    assert not out.exists()
    assert "paddle_r1.evaluation.cli" in modules and "paddle" not in modules


def test_an_output_dir_that_cannot_be_written_stops_before_any_model_loads(tmp_path, tiny_model_dir, rec_benchmark):
    """Not after the first dataset was evaluated (a traceback from the results' os.makedirs, the work lost)."""
    blocker = tmp_path / "results"
    blocker.write_text("")
    modules, result = run_script_seeing_imports(
        "test_rec.py", "--model_path", tiny_model_dir, "--data_root", rec_benchmark[0], "--image_root",
        rec_benchmark[1], "--test_datasets", "refgta_subsample", "--output_dir", str(blocker / "rec"))
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1] == \
        f"error: --output_dir: cannot write to {blocker}/rec: {blocker} is a file, not a folder"
    assert "paddle" not in modules


def test_a_wrong_option_is_answered_before_paddle_loads():
    modules, result = run_script_seeing_imports("test_rec.py", "--model_path", "m", "--data_root", "d",
                                                "--test_datasets", "x", "--visualise", "2")
    assert result.returncode == 2 and "unrecognized arguments: --visualise 2" in result.stderr
    assert "paddle" not in modules


def _columns(n, **values):
    return {key: [value] * n for key, value in values.items()}


def test_accuracy_against_hand_labelled_predictions():
    # REC on a 200x100 image that the processor resized to 112x56 (Qwen2.5-VL answers in resized pixels)
    rec = TASKS["rec"]
    answers = ["<think>.</think><answer>[56, 28, 112, 56]</answer>",  # exactly the truth: correct
               "<answer>[56, 28, 84, 56]</answer>",  # IoU 0.5 is not > 0.5: wrong
               "<answer>[56, 28, 100, 56]</answer>",  # IoU 0.786: correct
               "<answer>[100, 50, 200, 100]</answer>",  # the truth in ORIGINAL pixels: wrong for this model
               "no box at all", ""]
    cols = _columns(6, solution=[100, 50, 200, 100], image_sizes=[(200, 100)], input_sizes=[(112, 56)],
                    coord_system="abs_resized")
    assert rec.score(answers, cols) == [True, False, True, False, False, False]
    assert rec.parse(answers[0], "abs_resized", [(200, 100)], [(112, 56)]) == [100, 50, 200, 100]
    assert rec.parse("garbage", "abs_resized", [(200, 100)], [(112, 56)]) is None

    counting = task_for_dataset("superclevr_test200_counting_problems")
    assert counting.score(["<answer>3</answer>", "<answer>4</answer>", "three?", "<answer></answer>",
                           "<answer>3.5</answer>"], _columns(5, solution=3)) == [True, False, True, False, False]
    geoqa = task_for_dataset("geoqa_test_prompts")
    assert geoqa.score(["<answer>\\frac{1}{2}</answer>", "<answer>0.5</answer>", "<answer>2</answer>", "???"],
                       _columns(4, solution="0.5")) == [True, True, False, False]


def test_labels_and_table():
    assert checkpoint_label("/x/run/checkpoint-300") == "step 300" and checkpoint_label("/m/Qwen2.5-VL") == "Qwen2.5-VL"
    assert accuracy_table({"a": {"d1": 0.5}}, ["d1", "d2"]).splitlines()[-1] == "| a | 50.00% | - |"


def test_an_image_that_does_not_decode_is_skipped_not_the_run(tiny_model_dir, tmp_path, capsys):
    """A benchmark row whose image is a PNG cut short (its header reads, so the load keeps it) used to stop the whole
    evaluation at its batch; now that row is skipped, named and counted, and the others of its batch are answered.
    The held-out evaluation during training gives it NaN, which its mean leaves out."""
    from paddle_r1.config.jobs import GRPOConfig
    from paddle_r1.evaluation.heldout import HeldoutEval
    from paddle_r1.evaluation.inputs import EvalOptions, read_benchmarks
    from paddle_r1.evaluation.runner import Evaluator
    from paddle_r1.synthetic import make_synthetic_rec

    data = make_synthetic_rec(str(tmp_path / "bench"), num_samples=5, seed=3)
    rows = [json.loads(line) for line in open(data)]
    cut = tmp_path / "bench" / rows[1]["image"]
    cut.write_bytes(cut.read_bytes()[:200])
    (tmp_path / "bench" / "refcoco_val.jsonl").write_text("\n".join(json.dumps(row) for row in rows))
    options = EvalOptions(data_root=str(tmp_path / "bench"), image_root=str(tmp_path / "bench"), batch_size=4,
                          max_new_tokens=4)
    benchmark = read_benchmarks({"refcoco_val": TASKS["rec"]}, options)[0]
    assert len(benchmark.samples) == 5  # the header reads
    evaluator = Evaluator(tiny_model_dir, options)
    summary = evaluator.evaluate(benchmark)
    assert (summary["total"], summary["skipped"], len(summary["results"])) == (4, 1, 4)
    images = [str(tmp_path / "bench" / rows[i]["image"]) for i in (0, 2, 3, 4)]
    assert [r["image"] for r in summary["results"]] == images
    said = capsys.readouterr().out
    assert f"skipped {tmp_path / 'bench' / 'refcoco_val.jsonl'}:2: cannot read image {cut}: " in said, said

    heldout = HeldoutEval(GRPOConfig(model_name_or_path=tiny_model_dir, eval_data_path=str(tmp_path / "bench" /
                                     "refcoco_val.jsonl"), eval_reward="iou", eval_steps=1, max_completion_length=4))
    scores = heldout.scores(evaluator.generator, heldout.samples)
    assert np.isnan(scores[1]) and not np.isnan(scores[[0, 2, 3, 4]]).any()
