"""Video-R1's json read as it is (images and clips mixed in one file, five problem types, bad rows skipped and named),
a GRPO run of the tiny Qwen2.5-VL on batches that mix its image and video rows, and the shipped Video-R1 and
Temporal-R1 configs (the latter's 0.9 x temporal IoU + 0.1 x format reward, its weights in effect)."""
import json
import os

import numpy as np
from PIL import Image
from test_video import write_clip

from paddle_r1.config.jobs import GRPOConfig
from paddle_r1.config.reading.loading import load_config
from paddle_r1.data.formats import VIDEO_R1_ANSWER_INSTRUCTIONS, VIDEO_R1_QUESTION_TEMPLATE
from paddle_r1.data.loader import load_samples
from paddle_r1.rewards.manager import RewardManager

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def video_r1_file(folder) -> str:
    """A Video-R1-260k.json in miniature: its fields, "./" paths under the json's folder, images and clips mixed."""
    os.makedirs(folder / "LLaVA-Video-178K", exist_ok=True)
    os.makedirs(folder / "Math", exist_ok=True)
    write_clip(folder / "LLaVA-Video-178K" / "a.mp4", count=8, fps=4)
    Image.new("RGB", (56, 56), (0, 120, 200)).save(folder / "Math" / "b.png")
    common = {"process": "<think>...</think>", "data_source": "test"}
    rows = [
        {"problem_id": 1, "problem": "What moves?", "data_type": "video", "problem_type": "multiple choice",
         "options": ["A. a ball", "B. a car"], "solution": "<answer>A</answer>", "path": "./LLaVA-Video-178K/a.mp4"},
        {"problem_id": 2, "problem": "What is x?", "data_type": "image", "problem_type": "numerical", "options": [],
         "solution": "<answer>2.5</answer>", "path": "./Math/b.png"},
        {"problem_id": 3, "problem": "Read the sign.", "data_type": "image", "problem_type": "OCR", "options": [],
         "solution": "<answer>NO ENTRY</answer>", "path": "./Math/b.png"},
        {"problem_id": 4, "problem": "How long is it?", "data_type": "video", "problem_type": "regression",
         "options": [], "solution": "<answer>3.2</answer>", "path": "./LLaVA-Video-178K/a.mp4"},
        # bad rows: each skipped with its reason
        {"problem_id": 5, "problem": "?", "data_type": "audio", "problem_type": "OCR", "options": [],
         "solution": "<answer>x</answer>", "path": "./Math/b.png"},
        {"problem_id": 6, "problem": "?", "data_type": "image", "problem_type": "yes/no", "options": [],
         "solution": "<answer>yes</answer>", "path": "./Math/b.png"},
        {"problem_id": 7, "problem": "?", "data_type": "image", "problem_type": "multiple choice", "options": [],
         "solution": "<answer>A</answer>", "path": "./Math/b.png"},
        {"problem_id": 8, "problem": "?", "data_type": "image", "problem_type": "numerical", "options": [],
         "solution": "<answer>about three</answer>", "path": "./Math/b.png"},
        {"problem_id": 9, "problem": "?", "data_type": "video", "problem_type": "free-form", "options": [],
         "solution": "<answer>a car</answer>", "path": "./LLaVA-Video-178K/missing.mp4"},
        {"problem_id": 10, "problem": "?", "data_type": "video", "problem_type": "free-form",
         "solution": "<answer>a car</answer>", "path": 12345},
    ]
    path = folder / "Video-R1-260k.json"
    path.write_text(json.dumps([{**row, **common} for row in rows]))
    return str(path)


def test_video_r1_rows_are_read_as_they_are(tmp_path):
    samples, report = load_samples(video_r1_file(tmp_path))
    assert [s["problem_id"] for s in samples] == [1, 2, 3, 4]
    video, image = samples[0], samples[1]
    assert video["videos"] == [os.path.join(tmp_path, "LLaVA-Video-178K/a.mp4")] and video["images"] == []
    assert image["images"] == [os.path.join(tmp_path, "Math/b.png")] and "videos" not in image
    assert video["problem"] == "What moves?Options:\nA. a ball\nB. a car\n" and video["solution"] == "A"
    assert image["answer_instruction"] == VIDEO_R1_ANSWER_INSTRUCTIONS["numerical"] and image["solution"] == "2.5"
    assert {s["reward_method"] for s in samples} == {"video_r1_accuracy"} and video["process"] == "<think>...</think>"
    reasons = dict(report.problems)
    assert [where.rsplit("[", 1)[1] for where in reasons] == ["4]", "5]", "6]", "7]", "8]", "9]"]
    reasons = list(reasons.values())
    assert "'data_type' must be 'video' or 'image', got 'audio'" in reasons[0]
    assert "'problem_type' 'yes/no' is none of Video-R1's" in reasons[1]
    assert "multiple choice row needs 'options'" in reasons[2]
    assert "numerical row's solution must be a number" in reasons[3]
    assert "video not found" in reasons[4] and "missing.mp4" in reasons[4]
    assert "'path' must be a file path, got 12345" in reasons[5]


def test_grpo_steps_on_batches_mixing_video_r1_images_and_clips(tiny_model_dir, tmp_path):
    """Every step's batch holds all four rows (two images, two clips) through rollout, video_r1_accuracy, format and
    the loss; the weights move."""
    from paddle_r1.trainer.grpo import GRPOTrainer

    config = GRPOConfig(model_name_or_path=tiny_model_dir, data_path=video_r1_file(tmp_path),
                        output_dir=str(tmp_path / "out"), num_generations=2, per_device_train_batch_size=8,
                        reward_funcs=["video_r1_accuracy", "format", "reward_helpers:short_reward"],
                        question_template=VIDEO_R1_QUESTION_TEMPLATE, max_completion_length=6, learning_rate=5e-3,
                        max_steps=2, save_steps=100, use_visualdl=False, disable_tqdm=True, seed=3,
                        video_min_pixels=56 * 56, video_max_pixels=56 * 56)
    trainer = GRPOTrainer(config)
    kinds = sorted("video" if s.get("videos") else "image" for s in trainer.samples)
    assert kinds == ["image", "image", "video", "video"]
    before = {k: v.numpy().copy() for k, v in trainer.policy.state_dict().items()}
    trainer.train()
    metrics = [json.loads(line) for line in open(tmp_path / "out" / "metrics.jsonl")]
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(m["rewards/video_r1_accuracy/mean"] == m["rewards/video_r1_accuracy/mean"] for m in metrics)  # scored
    assert any(not np.array_equal(before[k], v.numpy()) for k, v in trainer.policy.state_dict().items())


def test_the_video_r1_config_asks_video_r1s_prompt():
    config = load_config(GRPOConfig, os.path.join(ROOT, "configs", "grpo_video_r1.yaml"))
    assert config.question_template == VIDEO_R1_QUESTION_TEMPLATE
    assert config.reward_funcs == ["video_r1_accuracy", "format"]
    assert (config.video_max_frames, config.video_max_pixels) == (16, 128 * 28 * 28)


def test_the_temporal_r1_preset_weighs_iou_09_and_format_01():
    config = load_config(GRPOConfig, os.path.join(ROOT, "configs", "grpo_temporal_r1.yaml"))
    manager = RewardManager.from_config(config)
    completions = ["<think>it starts late</think><answer>12.5 to 20.5 seconds</answer>",  # IoU 0.5, format 1
                   "<answer>12.5 to 20.5</answer>",  # IoU 0.5, format 0
                   "<think>x</think><answer>no idea</answer>",  # IoU 0, format 1
                   "<think>x</think><answer>{\"start_time\": 16.5, \"end_time\": 20.5}</answer>"]  # IoU 1, format 1
    columns = {"solution": [[16.5, 20.5]] * 4, "duration": [30.0] * 4}
    scores = manager.score(completions, columns)
    np.testing.assert_allclose(scores.per_function, [[0.5, 1], [0.5, 0], [0, 1], [1, 1]])
    np.testing.assert_allclose(scores.rewards, [0.55, 0.45, 0.1, 1.0], rtol=1e-6)
    unweighted = RewardManager(config.reward_funcs).score(completions, columns).rewards
    np.testing.assert_allclose(unweighted, [1.5, 0.5, 1.0, 2.0])  # the same rewards, summed without the weights
