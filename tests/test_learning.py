"""What the proof that it learns (benchmarks/learning.py: SFT warm start, then GRPO raises the held-out score) is made
of: the benchmark's run on a few steps, the held-out evaluation hook, and the synthetic tasks it runs on."""
import importlib.util
import json
import os
import sys
from dataclasses import replace

import numpy as np
import pytest
from PIL import Image

from paddle_r1.config.jobs import GRPOConfig
from paddle_r1.errors import ConfigError
from paddle_r1.data.loader import load_samples
from paddle_r1.synthetic import BACKGROUND, HELDOUT_SEED_OFFSET, make_synthetic_counting, make_synthetic_splits
from paddle_r1.evaluation.heldout import HeldoutEval
from paddle_r1.evaluation.runner import GreedyAnswers
from paddle_r1.generation.generator import Generator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _benchmark():
    spec = importlib.util.spec_from_file_location("learning_benchmark", os.path.join(ROOT, "benchmarks", "learning.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


def test_the_learning_benchmark_runs_sft_then_grpo_with_held_out_scores(tmp_path):
    """The benchmark's machinery on a preset a few steps long (the proof itself, ``--quick`` and the seeds, is the
    benchmark's: 90 s and more on 2 cores)."""
    benchmark = _benchmark()
    tiny = replace(benchmark.QUICK, num_sft=8, num_train=8, num_heldout=4,
                   sft={**benchmark.QUICK.sft, "max_steps": 2, "per_device_train_batch_size": 4},
                   grpo={**benchmark.QUICK.grpo, "max_steps": 2, "per_device_train_batch_size": 4,
                         "num_generations": 2, "max_completion_length": 4, "eval_steps": 2})
    result = benchmark.run_seed(0, str(tmp_path), tiny)
    scores = [row for row in map(json.loads, open(tmp_path / "grpo" / "metrics.jsonl")) if "eval/score" in row]
    assert [row["step"] for row in scores] == [0, 2]
    assert (result["before"], result["after"]) == (scores[0]["eval/score"], scores[-1]["eval/score"])
    assert os.path.isdir(tmp_path / "sft" / "checkpoint-2")
    assert "| 0 |" in benchmark.summary_table([result])


def _count_shapes(path):
    """Shapes in a counting image: cells of the 28-pixel grid holding any non-background pixel."""
    with Image.open(path) as img:
        width, height = img.size
        pixels = img.load()
        return sum(any(pixels[x, y] != BACKGROUND for x in range(cx, cx + 28) for y in range(cy, cy + 28))
                   for cx in range(0, width, 28) for cy in range(0, height, 28))


def test_counting_splits(tmp_path):
    paths = make_synthetic_splits(str(tmp_path), "counting", 12, 6, seed=5, sizes=((56, 56), (84, 84)))
    assert paths == {"train": str(tmp_path / "train" / "counting.jsonl"),
                     "heldout": str(tmp_path / "heldout" / "counting.jsonl")}
    train, heldout = (load_samples(paths[split])[0] for split in ("train", "heldout"))
    assert len(train) == 12 and len(heldout) == 6
    for sample in train + heldout:
        assert sample["problem"] == "How many shapes are there?" and sample["reward_method"] == "counting"
        assert sample["solution"] in (1, 2, 3, 4) and _count_shapes(sample["images"][0]) == sample["solution"]
    assert {Image.open(s["images"][0]).size for s in train} == {(56, 56), (84, 84)}
    # the held-out images are another seed's: none is a training image
    train_pixels = {Image.open(s["images"][0]).tobytes() for s in train}
    assert not any(Image.open(s["images"][0]).tobytes() in train_pixels for s in heldout)
    again = make_synthetic_counting(str(tmp_path / "again"), 6, seed=5 + HELDOUT_SEED_OFFSET,
                                    sizes=((56, 56), (84, 84)))
    assert open(again).read() == open(paths["heldout"]).read()
    with pytest.raises(ValueError, match="unknown synthetic task 'maze'"):
        make_synthetic_splits(str(tmp_path), "maze", 1, 1)


def test_heldout_score_is_the_mean_accuracy_reward(tiny, tmp_path):
    model, processor = tiny
    path = make_synthetic_counting(str(tmp_path), 4, seed=1, counts=(2, 3))
    config = GRPOConfig(model_name_or_path="unused", eval_steps=5, eval_data_path=path, eval_reward="counting")
    heldout = HeldoutEval(config)
    truths = [s["solution"] for s in heldout.samples]
    answers = [f"<think> </think><answer>{truths[0]}</answer>", "<answer>9</answer>", "no number",
               f"<answer>{truths[3]}</answer>"]
    scores = heldout.score_answers(heldout.samples, GreedyAnswers(answers, [[(112, 112)]] * 4, [[(112, 112)]] * 4),
                                   "abs_resized")
    assert scores.tolist() == [1.0, 0.0, 0.0, 1.0]
    # the tiny random model's own greedy answers: the score is their mean accuracy, each answer right or wrong
    generator = Generator(model, processor, "abs_resized")
    per_sample = heldout.scores(generator, heldout.samples)
    assert set(per_sample.tolist()) <= {0.0, 1.0}
    score = heldout.evaluate(generator, 3, echo=lambda _: None)["eval/score"]
    assert score == pytest.approx(float(np.mean(per_sample)))
    assert [step for step in range(12) if heldout.due(step, 11)] == [0, 5, 10, 11]
    with pytest.raises(ConfigError, match="'eval_data_path' is required"):
        GRPOConfig(eval_steps=5)


def test_grpo_logs_the_heldout_score(tiny_model_dir, rec_jsonl, rec_samples, tmp_path):
    from paddle_r1.trainer.grpo import GRPOTrainer

    config = GRPOConfig(model_name_or_path=tiny_model_dir, output_dir=str(tmp_path), reward_funcs=["iou"],
                        num_generations=2, max_completion_length=4, max_steps=3, beta=0.0, logging_steps=10,
                        eval_steps=2, eval_data_path=rec_jsonl, eval_sample_num=3, eval_reward="iou_accuracy",
                        use_visualdl=False, disable_tqdm=True)
    history = GRPOTrainer(config, samples=rec_samples, heldout=HeldoutEval(config)).train()["history"]
    logged = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
    # before the first step, every eval_steps, and after the last; logged even off the logging_steps grid
    assert [(row["step"], "eval/score" in row) for row in logged] == [(0, True), (2, True), (3, True)]
    assert all(0.0 <= row["eval/score"] <= 1.0 for row in logged)
    assert ["eval/score" in h for h in history] == [False, True, True]


def test_temporal_clips_show_the_circle_exactly_in_the_true_span(tmp_path):
    """The synthetic grounding clips, read back as training reads them (2 fps: one frame pair a second): the red
    circle is in the frames of the true span's seconds and in no other; spans and lengths vary."""
    samples = load_samples(make_synthetic_splits(str(tmp_path), "temporal", 12, 2, seed=1,
                                                 frame_counts=(8, 12))["train"])[0]
    assert len({tuple(s["solution"]) for s in samples}) > 3 and {s["duration"] for s in samples} == {4.0, 6.0}
    for sample in samples:
        red = _red_pairs(sample["videos"][0])
        start, end = sample["solution"]
        assert red == [start <= k < end for k in range(len(red))], sample


def _red_pairs(path):
    """Per frame pair of a clip, read as training reads it (2 fps, 56 x 56): whether the red circle is in both frames
    (True), in neither (False); a pair split between the two fails."""
    from paddle_r1.data.video import VideoSampling, read_clip

    clip = read_clip(path, VideoSampling(min_pixels=56 * 56, max_pixels=56 * 56))
    red = [bool(((f[..., 0] > 150) & (f[..., 1] < 100)).any()) for f in clip.frames]
    assert red[0::2] == red[1::2], path
    return red[0::2]


def test_count_clips_flash_the_circle_as_many_times_as_the_answer_says(tmp_path):
    """The synthetic counting clips: each flash is one frame pair with a gap before the next, as many as the Video-R1
    row's numerical solution; counts and lengths vary apart; the same seed writes the same rows and clips."""
    from paddle_r1.synthetic.clips import COUNT_QUESTION, make_synthetic_video_count

    path = make_synthetic_video_count(str(tmp_path / "a"), 12, seed=2, counts=(1, 2, 3), frame_counts=(12, 16))
    samples = load_samples(path)[0]
    assert {(s["problem_type"], s["reward_method"], s["problem"]) for s in samples} == {
        ("numerical", "video_r1_accuracy", COUNT_QUESTION)}
    seen = set()
    for sample in samples:
        pairs = _red_pairs(sample["videos"][0])
        assert not any(a and b for a, b in zip(pairs, pairs[1:])), sample  # never two flashes in neighbouring pairs
        assert str(sum(pairs)) == sample["solution"], sample
        seen.add((sum(pairs), len(pairs)))
    assert {count for count, _ in seen} == {1, 2, 3} and {pairs for _, pairs in seen} == {6, 8}
    again = make_synthetic_video_count(str(tmp_path / "b"), 12, seed=2, counts=(1, 2, 3), frame_counts=(12, 16))
    make_synthetic_video_count(str(tmp_path / "c"), 12, seed=3, counts=(1, 2, 3), frame_counts=(12, 16))
    clips = [sorted((tmp_path / run / "clips").iterdir()) for run in "abc"]
    assert open(again).read() == open(path).read()
    assert [p.read_bytes() for p in clips[1]] == [p.read_bytes() for p in clips[0]]
    assert [p.read_bytes() for p in clips[2]] != [p.read_bytes() for p in clips[0]]
    with pytest.raises(ValueError, match="frame_counts: 8 is not an even count of at least 10 frames"):
        make_synthetic_video_count(str(tmp_path / "d"), 4, counts=(3,), frame_counts=(8,))
