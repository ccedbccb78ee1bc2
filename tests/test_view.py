"""``paddle-r1 view``: a report of a real (tiny) GRPO run, loaded in a real headless Chromium, and of an eval
results folder."""
import json
import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser

import pytest

from paddle_r1.cli import main
from paddle_r1.config.jobs import GRPOConfig
from paddle_r1.evaluation.runner import write_results
from paddle_r1.rewards.families.boxes import answer_box
from paddle_r1.trainer.grpo import GRPOTrainer
from paddle_r1.models.resize import resizer_for
from paddle_r1.view.facts import find_model_dir
from paddle_r1.view.report import parse_steps

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class Elements(HTMLParser):
    """Counts elements by (tag, class) and keeps the attributes of each."""

    def __init__(self, html: str):
        super().__init__()
        self.found: dict = {}
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.found.setdefault((tag, attrs.get("class")), []).append(attrs)

    def all(self, tag, css):
        return self.found.get((tag, css), [])


@pytest.fixture(scope="module")
def run_dir(tiny_model_dir, rec_samples, tmp_path_factory):
    """One GRPO step of the tiny model (its completions.jsonl and checkpoint-1 as the trainer writes them), and a
    second step's rows made from the first's with answers whose boxes are known."""
    out = tmp_path_factory.mktemp("run")
    config = GRPOConfig(model_name_or_path=tiny_model_dir, output_dir=str(out), reward_funcs=["format", "iou"],
                        num_generations=2, per_device_train_batch_size=2, max_completion_length=8, max_steps=1,
                        save_steps=1, use_visualdl=False, disable_tqdm=True, seed=7, beta=0.0)
    GRPOTrainer(config, samples=rec_samples).train()
    path = out / "completions.jsonl"
    rows = [json.loads(line) for line in open(path)]
    resizer = resizer_for(find_model_dir(str(out)))
    from PIL import Image
    crafted = []
    for i, row in enumerate(rows):
        width, height = Image.open(row["images"][0]).size
        in_w, in_h = resizer.input_size((width, height))
        # Qwen2.5-VL answers in the resized input's pixels: the whole input is the whole original image
        text = f"<answer>[0, 0, {in_w}, {in_h}]</answer>" if i % 2 == 0 else "no box here"
        crafted.append({**row, "step": 2, "completion": text})
    with open(path, "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in crafted)
    return str(out)


def test_report_in_a_real_browser(run_dir, tmp_path, capsys):
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium); the report's browser test needs it")
    assert main(["view", run_dir, "--steps", "all"]) == 0
    report = capsys.readouterr().out.strip().splitlines()[-1]
    assert report == os.path.join(run_dir, "report", "index.html")
    rows = [json.loads(line) for line in open(os.path.join(run_dir, "completions.jsonl"))]
    url = "file://" + os.path.abspath(report)
    flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1200,1400"]
    shot = tmp_path / "report.png"
    subprocess.run(flags + [f"--screenshot={shot}", url], check=True, capture_output=True, timeout=60)
    assert shot.stat().st_size > 10_000
    dom = subprocess.run(flags + ["--dump-dom", url], check=True, capture_output=True, text=True, timeout=60).stdout
    page = Elements(dom)
    prompts = {(r["step"], r["problem"]) for r in rows}
    assert len(page.all("div", "prompt")) == len(prompts)
    assert len(page.all("rect", "truth")) == len(prompts)  # one true box per prompt (one image each)
    assert len(page.all("rect", "pred")) == sum(answer_box(r["completion"]) is not None for r in rows)
    assert len(page.all("td", "score")) == len(rows) * 2  # format and iou, per completion
    assert len(page.all("td", "total")) == len(rows)
    # the crafted answers cover the whole resized input: drawn over the whole original image
    svgs = {a["viewbox"] for a in page.all("svg", None) if "data-image" in a}
    crafted = [a for a in page.all("rect", "pred") if a["x"] == "0.0" and a["y"] == "0.0"]
    assert {f'0 0 {float(a["width"]):g} {float(a["height"]):g}' for a in crafted} <= svgs and crafted
    # the script ran: only the newest step is shown
    sections = page.all("section", "step")
    assert [s.get("style") for s in sections] == ["display: none;", None]
    # the trainer's rows carry what the rewards saw, so nothing was guessed; rows without it are said to be
    assert all({"image_sizes", "input_sizes", "coord_system"} <= set(r) for r in rows)
    assert "The trainer should add to each row" not in dom
    bare = os.path.join(tmp_path, "bare")
    os.makedirs(bare)
    with open(os.path.join(bare, "completions.jsonl"), "w") as f:
        f.writelines(json.dumps({k: v for k, v in r.items() if k not in ("image_sizes", "input_sizes")}) + "\n"
                     for r in rows)
    shutil.copytree(os.path.join(run_dir, "checkpoint-1"), os.path.join(bare, "checkpoint-1"))
    assert main(["view", bare, "--steps", "all"]) == 0
    assert "The trainer should add to each row" in open(os.path.join(bare, "report", "index.html")).read()


def test_the_report_is_written_without_paddle(run_dir, tmp_path):
    """``paddle-r1 view`` reads files only: a process that writes the report never imports Paddle (1.8 s of a
    2-second command)."""
    code = ("import sys; from paddle_r1.cli import main; main(['view', sys.argv[1], '--output', sys.argv[2]]); "
            "print(sorted(m for m in ('paddle', 'paddleformers') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code, run_dir, str(tmp_path / "report.html")], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines()[-1] == "[]" and os.path.isfile(tmp_path / "report.html")


def test_eval_results_folder(tmp_path, rec_samples):
    sample = rec_samples[0]
    summary = {"dataset": "refcoco_val", "model": "m", "method": "r1", "task": "rec", "accuracy": 0.5, "correct": 1,
               "total": 2, "skipped": 0, "results": [
                   {"question": sample["problem"], "image": sample["images"][0], "ground_truth": sample["solution"],
                    "answer": "<answer>[1, 2, 30, 40]</answer>", "prediction": [1.0, 2.0, 30.0, 40.0],
                    "correct": True},
                   {"question": "how many?", "image": sample["images"][0], "ground_truth": 3,
                    "answer": "<answer>4</answer>", "prediction": 4, "correct": False},
                   # the evaluation read no box from this answer: the report draws none of its own reading either,
                   # and has nothing to convert (no note asking the trainer for sizes)
                   {"question": sample["problem"], "image": sample["images"][0], "ground_truth": sample["solution"],
                    "answer": "the box is [5, 5, 9, 9]", "prediction": None, "correct": False}]}
    write_results(summary, str(tmp_path), "m")
    assert main(["view", str(tmp_path)]) == 0
    html = open(tmp_path / "report" / "index.html").read()
    page = Elements(html)
    assert "The trainer should add" not in html
    assert len(page.all("rect", "truth")) == 2 and len(page.all("rect", "pred")) == 1
    assert [a["width"] for a in page.all("rect", "pred")] == ["29.0"]
    assert len(page.all("td", "answer")) == 1  # the counting question shows its answer as text


def test_steps_selection():
    assert parse_steps(None, [1, 2, 3, 4, 5]) == [3, 4, 5]
    assert parse_steps("all", [1, 2]) == [1, 2]
    assert parse_steps("1,3-4,9", [1, 2, 3, 4, 5]) == [1, 3, 4]
    with pytest.raises(ValueError, match="--steps"):
        parse_steps("last", [1])


def test_a_folder_that_is_not_there_is_named_as_such(tmp_path, capsys):
    from paddle_r1.cli import main

    assert main(["view", str(tmp_path / "runs" / "grpo_rec")]) == 2
    assert capsys.readouterr().err.strip() == f"paddle-r1 view: error: no such folder: {tmp_path}/runs/grpo_rec"
