"""eval/test_video.py on a tiny checkpoint and synthetic clips: temporal grounding in Charades-STA's layout and video
QA in Video-R1's eval layout, the metrics checked against ones computed here from the run's own prediction files.

The checkpoint is the tiny Qwen2.5-VL after a short SFT that makes it answer "<answer>1 to 2</answer>" whatever it is
asked, so that its grounding predictions overlap the true spans by known, varied amounts."""
import json
import os

import numpy as np
import pytest
from PIL import Image
from test_cli import assert_no_library_notices
from test_eval import run_script
from test_rewards_ocr import levenshtein  # over words: the word error count
from test_video import write_clip

# true spans against the memorised [1, 2]: IoU 1, 0.8, 2/3, 0.4, 0.2, 0
SPANS = [[1.0, 2.0], [1.0, 2.25], [0.5, 2.0], [1.0, 3.5], [1.5, 3.5], [2.5, 3.5]]
QA = [  # (data_type, problem_type, gold, options)
    ("video", "multiple choice", "B", ["A. red", "B. blue"]), ("image", "multiple choice", "A", ["A. one", "B. two"]),
    ("video", "numerical", "3", []), ("image", "OCR", "1 to 3", []), ("video", "OCR", "1 to 2", []),
    ("video", "free-form", "from 1 to 2 seconds", []), ("video", "regression", "2.5", []),
]


@pytest.fixture(scope="module")
def memorised_checkpoint(tmp_path_factory, tiny_model_dir):
    from paddle_r1.config.jobs import SFTConfig
    from paddle_r1.trainer.sft import SFTTrainer

    root = tmp_path_factory.mktemp("memorised")
    for i in range(4):
        Image.new("RGB", (56, 56), (60 * i, 90, 30)).save(root / f"{i}.png")
    samples = [{"images": [str(root / f"{i % 4}.png")], "problem": f"When does event {i} happen?",
                "solution": "1 to 2", "reward_method": None} for i in range(8)]
    config = SFTConfig(model_name_or_path=tiny_model_dir, output_dir=str(root / "sft"), learning_rate=5e-3,
                       answer_template="<answer>{Answer}</answer>", per_device_train_batch_size=4, max_steps=50,
                       save_steps=1000, use_visualdl=False, disable_tqdm=True)
    SFTTrainer(config, samples=samples).train()
    return str(root / "sft" / "checkpoint-50")


@pytest.fixture(scope="module")
def benchmarks(tmp_path_factory):
    root = tmp_path_factory.mktemp("video_benchmarks")
    clips = [write_clip(root / f"{i}.mp4", count=16, fps=4) for i in range(2)]  # 4 s each
    Image.new("RGB", (56, 56), (200, 0, 0)).save(root / "still.png")
    rows = [{"video": os.path.basename(clips[i % 2]), "duration": 4.0, "timestamp": span, "sentence": f"event {i}"}
            for i, span in enumerate(SPANS)]
    (root / "charades_sta_test.json").write_text(json.dumps(rows))
    qa = [{"problem_id": i, "problem": f"Question {i}?", "data_type": kind, "problem_type": problem_type,
           "options": options, "solution": f"<answer>{gold}</answer>",
           "path": "./still.png" if kind == "image" else f"./{os.path.basename(clips[i % 2])}"}
          for i, (kind, problem_type, gold, options) in enumerate(QA)]
    qa.append({**qa[0], "problem_type": "counting"})  # none of Video-R1's types: skipped and counted
    (root / "video_r1_eval.jsonl").write_text("\n".join(json.dumps(row) for row in qa))
    return root


def iou(a, b):
    inter = max(0.0, min(a[1], b[1]) - max(a[0], b[0]))
    return inter / (a[1] - a[0] + b[1] - b[0] - inter)


def first_answer(text):
    start = text.find("<answer>")
    end = text.find("</answer>", start + 8) if start >= 0 else -1
    return text[start + 8:end].strip() if end >= 0 else ""


def hand_score(problem_type, gold, text):
    answer = first_answer(text)
    if problem_type == "multiple choice":
        return float(answer == gold)
    if problem_type == "OCR":
        return max(0.0, 1 - levenshtein(gold.split(), answer.split()) / len(gold.split()))
    if problem_type == "free-form":
        from rouge_score import rouge_scorer  # imports nltk (seconds): here, not in every worker's collection

        scores = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True).score(gold, answer)
        return sum(s.fmeasure for s in scores.values()) / 3
    try:
        value = float(answer)
    except ValueError:
        return 0.0
    if problem_type == "numerical":
        return float(("." in answer) == ("." in gold) and round(value, 2) == round(float(gold), 2))
    return max(0.0, 1 - abs(value - float(gold)) / abs(float(gold)))


def test_video_script_grounding_and_qa_metrics(tmp_path, memorised_checkpoint, benchmarks):
    out = tmp_path / "results"
    result = run_script("test_video.py", "--model_path", memorised_checkpoint, "--model_name", "tiny",
                        "--data_root", str(benchmarks), "--test_datasets", "charades_sta_test", "video_r1_eval",
                        "--batch_size", "4", "--max_new_tokens", "12", "--output_dir", str(out),
                        "--video_min_pixels", str(56 * 56), "--video_max_pixels", str(56 * 56))
    assert result.returncode == 0, result.stderr
    assert_no_library_notices(result)

    grounding = json.load(open(out / "charades_sta_test_tiny_r1.json"))
    assert grounding["task"] == "grounding" and grounding["total"] == len(SPANS)
    ious = [iou(r["prediction"], r["ground_truth"]) if r["prediction"] else 0.0 for r in grounding["results"]]
    assert sorted(round(v, 3) for v in ious if v > 0) == [0.2, 0.4, 0.667, 0.8, 1.0]  # it answers [1, 2]
    metrics = grounding["metrics"]
    for m in (0.3, 0.5, 0.7):
        assert metrics[f"R@{m}"] == pytest.approx(np.mean([v >= m for v in ious]))
    assert metrics["mIoU"] == pytest.approx(np.mean(ious), abs=1e-6)
    assert grounding["accuracy"] == metrics["R@0.5"] == pytest.approx(3 / 6)
    assert [r["duration"] for r in grounding["results"]] == [4.0] * len(SPANS)
    row = f"| tiny | charades_sta_test | {metrics['R@0.3'] * 100:.2f} | {metrics['R@0.5'] * 100:.2f} | " \
          f"{metrics['R@0.7'] * 100:.2f} | {metrics['mIoU'] * 100:.2f} |"
    assert "| model | dataset | R@0.3 | R@0.5 | R@0.7 | mIoU |" in result.stdout and row in result.stdout

    qa = json.load(open(out / "video_r1_eval_tiny_r1.json"))
    assert qa["task"] == "video_qa" and qa["total"] == len(QA) and qa["skipped"] == 1
    results = qa["results"]
    assert [bool(r["video"]) if "video" in r else False for r in results] == [k == "video" for k, *_ in QA]
    hand = [hand_score(r["problem_type"], r["ground_truth"], r["answer"]) for r in results]
    assert [r["score"] for r in results] == pytest.approx(hand, abs=1e-6)
    for problem_type in ("multiple choice", "numerical", "OCR", "free-form", "regression"):
        mine = [h for h, r in zip(hand, results) if r["problem_type"] == problem_type]
        assert qa["metrics"][problem_type] == pytest.approx(np.mean(mine), abs=1e-6), problem_type
    assert qa["accuracy"] == pytest.approx(np.mean([h == 1.0 for h in hand]))
    assert "| model | dataset | multiple choice | numerical | OCR | free-form | regression |" in result.stdout
    assert f"| tiny | {grounding['accuracy'] * 100:.2f}% | {qa['accuracy'] * 100:.2f}% |" in result.stdout


def test_the_task_comes_from_the_files_fields(tmp_path, benchmarks):
    from paddle_r1.evaluation.tasks import task_for_dataset

    assert task_for_dataset("x", kind="video", path=str(benchmarks / "charades_sta_test.json")).name == "grounding"
    assert task_for_dataset("x", kind="video", path=str(benchmarks / "video_r1_eval.jsonl")).name == "video_qa"
    assert task_for_dataset("x", "video_qa", kind="video", path=str(benchmarks / "charades_sta_test.json")).name == \
        "video_qa"  # --task says
    rec = tmp_path / "refcoco_val.json"
    rec.write_text(json.dumps([{"image": "a.jpg", "problem": "x", "solution": [1, 2, 3, 4]}]))
    with pytest.raises(ValueError, match="cannot tell the task from its first record's fields"):
        task_for_dataset("refcoco_val", kind="video", path=str(rec))
