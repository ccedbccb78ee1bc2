"""``paddle-r1 view`` of a run on clips: each video sample's strip of frames (read from the clip) over a time line
with the true span and each completion's predicted span where the ``temporal_iou`` reward reads it."""
import json

from test_view import Elements
from test_video import charades_samples, write_clip

from paddle_r1.cli import main
from paddle_r1.config.jobs import GRPOConfig
from paddle_r1.trainer.grpo import GRPOTrainer
from paddle_r1.view.page import TIMELINE_WIDTH


def test_a_grounding_run_shows_frames_and_spans(tiny_model_dir, tmp_path):
    out = tmp_path / "out"
    config = GRPOConfig(model_name_or_path=tiny_model_dir, output_dir=str(out), num_generations=2,
                        reward_funcs=["temporal_iou"], per_device_train_batch_size=2, max_completion_length=4,
                        max_steps=1, save_steps=100, use_visualdl=False, disable_tqdm=True, seed=3, beta=0.0,
                        video_min_pixels=56 * 56, video_max_pixels=56 * 56)
    GRPOTrainer(config, samples=charades_samples(tmp_path, count=1)).train()
    rows = [json.loads(line) for line in open(out / "completions.jsonl")]
    assert rows and all(r["videos"] == [str(tmp_path / "v.mp4")] and r["duration"] == 3.0 for r in rows)
    # a second step whose answers are known: a span, a span running past the clip's end, none
    answers = ["<answer>0.75 to 1.5 seconds</answer>", '<answer>{"start_time": 1.5, "end_time": 9}</answer>',
               "no idea"]
    crafted = [{**rows[0], "step": 2, "completion": text} for text in answers]
    with open(out / "completions.jsonl", "a") as f:
        f.writelines(json.dumps(r) + "\n" for r in crafted)

    assert main(["view", str(out), "--steps", "2"]) == 0
    page = Elements(open(out / "report" / "index.html").read())
    frames = [a["src"] for a in page.found.get(("img", None), []) if a.get("alt", "").startswith("frame ")]
    assert len(frames) == 8 and (out / "report" / frames[0]).is_file()  # 12 frames at 4 fps: 8 spread over 3 s
    scale = TIMELINE_WIDTH / 3.0
    truth = rows[0]["solution"]
    assert [(float(a["x"]), float(a["width"])) for a in page.all("rect", "truth")] == [
        (round(truth[0] * scale, 1), round((truth[1] - truth[0]) * scale, 1))]
    # the second span is cut at the clip's end where drawn; the third completion draws nothing
    assert [(float(a["x"]), float(a["width"])) for a in page.all("rect", "pred")] == [
        (0.75 * scale, 0.75 * scale), (1.5 * scale, 1.5 * scale)]


def test_an_unreadable_clip_is_said_and_the_rest_drawn(tmp_path):
    clip = write_clip(tmp_path / "v.mp4", count=4)
    row = {"step": 1, "problem": "when?", "images": [], "videos": [clip], "duration": 2.0, "solution": [0.5, 1.0],
           "completion": "<answer>0.5 to 1.0</answer>", "reward": 1.0, "advantage": 0.0}
    broken = {**row, "problem": "and here?", "videos": [str(tmp_path / "missing.mp4")]}
    (tmp_path / "completions.jsonl").write_text("\n".join(json.dumps(r) for r in (row, broken)))
    assert main(["view", str(tmp_path)]) == 0
    html = open(tmp_path / "report" / "index.html").read()
    page = Elements(html)
    assert "clip not found or unreadable" in html and len(page.all("rect", "truth")) == 2
    assert len(page.all("rect", "pred")) == 2
