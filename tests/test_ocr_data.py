"""OCR data and evaluation: ERNIEKit / PaddleFormers VL-SFT jsonl read into samples (bad rows named by file:line),
the synthetic text lines and tables (seeded, their solutions what the OCR rewards score 1), and eval/test_ocr.py's
accuracy and mean 1 - NED over batched greedy answers."""
import filecmp
import json
import os

import pytest

from paddle_r1.data.loader import load_samples
from paddle_r1.synthetic import make_synthetic_splits
from paddle_r1.synthetic.ocr import vl_sft_record
from paddle_r1.rewards import load_builtin_rewards
from paddle_r1.rewards.manager import bind_reward

REWARDS = load_builtin_rewards()


@pytest.fixture(scope="module")
def ocr_sets(tmp_path_factory):
    root = tmp_path_factory.mktemp("ocr_sets")
    return {task: make_synthetic_splits(str(root / task), task, num_train=6, num_heldout=4)
            for task in ("ocr_lines", "ocr_tables")}


def test_vl_sft_rows_become_samples_and_bad_rows_are_named(tmp_path, ocr_sets):
    image = load_samples(ocr_sets["ocr_lines"]["train"])[0][0]["images"][0]
    os.symlink(image, tmp_path / "page.png")
    rows = [
        vl_sft_record("page.png", "OCR:", "发票金额 45 元"),
        {**vl_sft_record("https://bj.bcebos.com/ocr/page.png?x=1", "OCR:", "a"), "source": "web"},
        {"image_info": [{"image_url": "page.png"}], "text_info": [
            {"text": "OCR:", "tag": "mask"}, {"text": "a", "tag": "no_mask"},
            {"text": "again?", "tag": "mask"}, {"text": "b", "tag": "no_mask"}]},
        vl_sft_record("missing.png", "OCR:", "x"),
        {"image_info": [], "text_info": [{"text": "OCR:", "tag": "mask"}, {"text": "x", "tag": "no_mask"}]},
    ]
    path = tmp_path / "sft.jsonl"
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    samples, report = load_samples(str(path), image_root=str(tmp_path))
    assert [(s["problem"], s["solution"]) for s in samples] == [("OCR:", "发票金额 45 元"), ("OCR:", "a")]
    assert samples[0]["images"] == [str(tmp_path / "page.png")] == samples[1]["images"]  # a URL by its file name
    assert samples[1]["source"] == "web"  # extra fields travel to the rewards
    problems = "\n".join(str(p) for p in report.problems)
    assert f"{path}:3" in problems and "expected one question and its answer" in problems
    assert f"{path}:4" in problems and "missing.png" in problems
    assert f"{path}:5" in problems and "'image_info' must be a non-empty list" in problems


def test_synthetic_ocr_sets_are_seeded_and_their_solutions_score_one(ocr_sets, tmp_path):
    again = make_synthetic_splits(str(tmp_path / "again"), "ocr_tables", num_train=6, num_heldout=4)
    for split in ("train", "heldout"):
        first, second = ocr_sets["ocr_tables"][split], again[split]
        assert filecmp.cmp(first, second, shallow=False)
        assert all(filecmp.cmp(os.path.join(os.path.dirname(first), "images", name),
                               os.path.join(os.path.dirname(second), "images", name), shallow=False)
                   for name in os.listdir(os.path.join(os.path.dirname(first), "images")))
    lines, _ = load_samples(ocr_sets["ocr_lines"]["train"])
    tables, _ = load_samples(ocr_sets["ocr_tables"]["train"])
    assert {s["problem"] for s in lines} == {"OCR:"} and {s["problem"] for s in tables} == {"Table Recognition:"}
    texts = [s["solution"] for s in lines]
    assert REWARDS["ocr_exact"](texts, solution=texts) == [1.0] * len(texts)
    assert all(t.endswith("<nl>") and t.startswith("<fcel>") for t in (s["solution"] for s in tables))
    assert bind_reward("teds", {})([s["solution"] for s in tables], solution=[s["solution"] for s in tables]) == \
        [1.0] * len(tables)


def test_eval_script_reports_accuracy_and_mean_ned_over_batched_answers(ocr_sets, tmp_path, capsys):
    from paddle_r1.evaluation.cli import main
    from paddle_r1.testing.tiny import make_tiny_model

    model = make_tiny_model(str(tmp_path / "model"), family="paddleocr_vl")
    data_root = os.path.dirname(ocr_sets["ocr_lines"]["heldout"])
    out = tmp_path / "results"
    assert main("ocr", ["--model_path", model, "--data_root", data_root, "--test_datasets", "ocr_lines",
                        "--batch_size", "3", "--max_new_tokens", "6", "--output_dir", str(out)]) == 0
    summary = json.load(open(out / os.listdir(out)[0]))
    answers = [r["answer"] for r in summary["results"]]
    truths = [r["ground_truth"] for r in summary["results"]]
    assert summary["task"] == "ocr" and summary["total"] == 4 and summary["question_template"] == "{Question}"
    ned = REWARDS["ocr_ned"](answers, solution=truths)
    assert summary["mean_ocr_ned"] == pytest.approx(sum(ned) / len(ned))
    assert summary["accuracy"] == sum(REWARDS["ocr_exact"](answers, solution=truths)) / 4
    assert f"mean ocr_ned {summary['mean_ocr_ned']:.4f}" in capsys.readouterr().out
