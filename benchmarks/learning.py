"""Proof that it learns: SFT warm start, then GRPO raises a tiny model's held-out score, on CPU.

    python benchmarks/learning.py [--seeds 0 1 2] [--out DIR] [--quick] [--plot docs/learning_curve.png]

For each seed: the synthetic counting task ("How many shapes are there?" -> 1 to 4; SFT, GRPO-training and
held-out images from different seeds), a tiny Qwen2.5-VL checkpoint from that seed, SFT from scratch on small
images (paddle_r1.trainer.sft), then GRPO from the SFT folder on small and larger images with the ``counting``
and ``format`` rewards, with a held-out evaluation (greedy, ``eval/score``: the fraction counted right) before
the first step and every ``eval_steps``. Prints one table: seed, held-out score after SFT (= before GRPO) and
after GRPO, then the mean gain and its spread (std over seeds). ``--quick`` is a shorter GRPO (about 90 s a seed on
2 cores; ``--quick --seeds 0`` for one; the test suite runs this script's machinery on a few steps only,
tests/test_learning.py). ``--task ocr``, ``--task temporal`` and ``--task video_count`` are the same proof on
other tasks (``PRESETS``).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace

from paddle_r1.config.jobs import GRPOConfig, SFTConfig

QUESTION_TEMPLATE = "{Question}"  # the tiny model learns from scratch: the shortest prompt trains fastest
SOLVED = 0.95  # held-out score that counts as solving the task (steps-to-solve column)
SFT_SEED_OFFSET = 20_000  # the SFT images come from their own seed, apart from GRPO's training and held-out sets


@dataclass
class Preset:
    """The task, SFT and GRPO settings of one run. Counting: SFT sees worked answers for small images only (56 pixels:
    2x2 vision tokens, one grid cell each); GRPO's prompts and the held-out set add larger ones (84 pixels, 3x3
    cells), where the SFT model answers at chance. GRPO has only the reward to go on there."""

    num_sft: int = 512
    num_train: int = 512
    num_heldout: int = 200
    task: str = "counting"  # a paddle_r1.synthetic task
    family: str = "qwen2_5_vl"  # the tiny model's
    options: dict = field(default_factory=lambda: dict(counts=(1, 2, 3, 4), sizes=((56, 56), (84, 84))))
    sft_options: dict = field(default_factory=lambda: dict(sizes=((56, 56),)))  # the SFT set's, over ``options``
    answer_template: str = SFTConfig.__dataclass_fields__["answer_template"].default
    tiny_options: dict = field(default_factory=dict)  # make_tiny_model's (the image processor's pixel limits)
    sft: dict = field(default_factory=lambda: dict(
        max_steps=150, per_device_train_batch_size=32, learning_rate=1e-3, warmup_steps=20))
    grpo: dict = field(default_factory=lambda: dict(
        reward_funcs=["counting", "format"], eval_reward="counting", max_steps=80, per_device_train_batch_size=128,
        num_generations=8, temperature=1.0, learning_rate=5e-4, beta=0.04, max_completion_length=16,
        eval_steps=10))


FULL = Preset()
# The quick check after a change: the same SFT, then GRPO with 8 prompts x 4 completions per step and no
# evaluation between the first and the last.
QUICK = replace(FULL, num_train=256, num_heldout=100,
                grpo={**FULL.grpo, "per_device_train_batch_size": 32, "num_generations": 4, "max_steps": 60,
                      "eval_steps": 60})
# PaddleOCR-VL reading rendered digit strings (OCR:), one digit per 28-pixel vision token (the image processor's
# min_pixels lowered so that nothing is scaled up): SFT on lines of 1 to 3 digits, GRPO and the held-out set on 1 to
# 5, scored by 1 - NED (eval/score: the mean held-out 1 - NED); the answer is the text alone, as PaddleOCR-VL answers
OCR = replace(FULL, task="ocr_lines", family="paddleocr_vl",
              options=dict(length=(1, 5), cell=28, height=28, font_size=22), sft_options=dict(length=(1, 3)),
              answer_template="{Answer}", tiny_options=dict(min_pixels=28 * 28, max_pixels=28 * 28 * 8),
              sft={**FULL.sft, "max_steps": 800, "learning_rate": 2e-3},
              grpo={**FULL.grpo, "reward_funcs": ["ocr_ned"], "eval_reward": "ocr_ned", "max_completion_length": 8})
# Temporal grounding on clips ("when does the red circle appear?", synthetic/clips.py): every frame 56 x 56
# (4 vision tokens a frame pair, one pair a second at 2 fps); SFT sees 4-second clips only, GRPO's prompts and the
# held-out set add 6-second ones, whose later seconds the SFT model never wrote; scored by temporal_iou. SFT runs
# longer than counting's: reading where in time the circle is takes the tiny model about 200 steps
SMALL_FRAMES = dict(video_min_pixels=56 * 56, video_max_pixels=56 * 56)
TEMPORAL = replace(FULL, task="temporal", num_heldout=100, options=dict(frame_counts=(8, 12)),
                   sft_options=dict(frame_counts=(8,)),
                   sft={**FULL.sft, **SMALL_FRAMES, "max_steps": 200, "learning_rate": 2e-3},
                   grpo={**FULL.grpo, **SMALL_FRAMES, "reward_funcs": ["temporal_iou", "format"],
                         "eval_reward": "temporal_iou", "max_completion_length": 32, "max_steps": 60,
                         "per_device_train_batch_size": 64})
# Counting over time ("How many times does the red circle flash?", synthetic/clips.py; Video-R1 rows, numerical):
# 1 to 3 one-second flashes with a gap between each two, frames as the temporal task's; SFT sees 6-second clips only,
# GRPO's prompts and the held-out set add 10-second ones, on which the SFT model undercounts; scored by
# video_r1_accuracy (the count exactly)
VIDEO_COUNT = replace(TEMPORAL, task="video_count", options=dict(counts=(1, 2, 3), frame_counts=(12, 20)),
                      sft_options=dict(frame_counts=(12,)), sft={**TEMPORAL.sft, "learning_rate": 1e-3},
                      grpo={**TEMPORAL.grpo, "reward_funcs": ["video_r1_accuracy", "format"],
                            "eval_reward": "video_r1_accuracy", "max_completion_length": 16})
PRESETS = {"counting": FULL, "ocr": OCR, "temporal": TEMPORAL, "video_count": VIDEO_COUNT}


def run_seed(seed: int, out_dir: str, preset: Preset) -> dict:
    """SFT then GRPO for one seed, their console output in ``out_dir/train.log``; returns {"seed", "before",
    "after", "seconds", "grpo_dir"}."""
    from paddle_r1.synthetic import SYNTHETIC_TASKS, make_synthetic_splits
    from paddle_r1.testing.tiny import make_tiny_model
    from paddle_r1.plot import read_metrics, series
    from paddle_r1.evaluation.heldout import HeldoutEval
    from paddle_r1.trainer.grpo import GRPOTrainer
    from paddle_r1.trainer.sft import SFTTrainer

    start = time.perf_counter()
    data = make_synthetic_splits(os.path.join(out_dir, "data"), preset.task, preset.num_train, preset.num_heldout,
                                 seed=seed, **preset.options)
    sft_data = SYNTHETIC_TASKS[preset.task](os.path.join(out_dir, "data", "sft"), preset.num_sft,
                                            seed=seed + SFT_SEED_OFFSET, **{**preset.options, **preset.sft_options})
    model = make_tiny_model(os.path.join(out_dir, "tiny-model"), family=preset.family, seed=seed,
                            **preset.tiny_options)
    common = dict(use_visualdl=False, disable_tqdm=True, seed=seed, question_template=QUESTION_TEMPLATE)
    grpo_dir = os.path.join(out_dir, "grpo")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "train.log"), "w") as log, contextlib.redirect_stdout(log), \
            contextlib.redirect_stderr(log):
        sft = SFTTrainer(SFTConfig(model_name_or_path=model, data_path=sft_data, answer_template=preset.answer_template,
                                   output_dir=os.path.join(out_dir, "sft"), logging_steps=10, **common,
                                   **preset.sft)).train()
        grpo = GRPOConfig(
            model_name_or_path=sft["checkpoint"], data_path=data["train"], output_dir=grpo_dir,
            eval_data_path=data["heldout"], save_steps=0, log_completions_steps=0, **common, **preset.grpo)
        GRPOTrainer(grpo, heldout=HeldoutEval(grpo)).train()
    steps, scores = series(read_metrics(grpo_dir), "eval/score")
    solved = next((step for step, score in zip(steps, scores) if score >= SOLVED), None)
    return {"seed": seed, "before": scores[0], "after": scores[-1], "seconds": time.perf_counter() - start,
            "grpo_dir": grpo_dir, "solved_at": solved}


def summary_table(results: list[dict]) -> str:
    gains = [r["after"] - r["before"] for r in results]
    lines = [f"| seed | held-out after SFT (before GRPO) | after GRPO | gain | first step with score >= {SOLVED} "
             "| seconds |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['seed']} | {r['before']:.3f} | {r['after']:.3f} | {g:+.3f} | {r['solved_at'] or '-'} "
              f"| {r['seconds']:.0f} |" for r, g in zip(results, gains)]
    spread = statistics.stdev(gains) if len(gains) > 1 else 0.0
    lines.append(f"\nmean gain {statistics.mean(gains):+.3f}, spread (std over seeds) {spread:.3f}; "
                 f"GRPO raised the score for {sum(g > 0 for g in gains)} of {len(gains)} seeds; "
                 f"mean gain > 2 x spread: {statistics.mean(gains) > 2 * spread}")
    return "\n".join(lines)


def with_settings(preset, items: list[str]):
    """``preset`` (a dataclass of settings and dicts of them) with each ``PART.KEY=VALUE`` of ``--set`` applied,
    values read as the command line reads them (benchmarks/tool_learning.py shares it)."""
    from paddle_r1.config.reading.command_line import parse_overrides

    for item in items:
        key, raw = item.split("=", 1)
        part, _, name = key.rpartition(".")
        value = parse_overrides([f"--{name}", raw])[name]
        preset = replace(preset, **({part: {**getattr(preset, part), name: value}} if part else {name: value}))
    return preset


def run_seeds(run_seed, preset, seeds: list[int], out: str, describe) -> list[dict]:
    """The settings, then ``run_seed(seed, out/seedN, preset)`` for each seed with one line as it ends
    (``describe(result)`` and its seconds); the results."""
    print(f"settings: {json.dumps(preset.__dict__)}\nworking folder: {out}", flush=True)
    results = []
    for seed in seeds:
        results.append(run_seed(seed, os.path.join(out, f"seed{seed}"), preset))
        print(f"seed {seed}: {describe(results[-1])} ({results[-1]['seconds']:.0f} s)", flush=True)
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", default=None, help="working folder (default: a new temporary folder)")
    parser.add_argument("--task", choices=tuple(PRESETS), default="counting",
                        help="counting (tiny Qwen2.5-VL), ocr (tiny PaddleOCR-VL reading digit strings), temporal "
                             "(tiny Qwen2.5-VL: when does the red circle appear in a clip, temporal_iou) or "
                             "video_count (tiny Qwen2.5-VL: how many times does the red circle flash, Video-R1 "
                             "numerical)")
    parser.add_argument("--quick", action="store_true", help="a shorter GRPO (about 90 s a seed on 2 cores)")
    parser.add_argument("--plot", default=None, help="also write a PNG of the seeds' GRPO curves here")
    parser.add_argument("--dynamic_sampling", action="store_true",
                        help="GRPO with DAPO's dynamic sampling (grpo.dynamic_sampling=true)")
    parser.add_argument("--set", nargs="*", default=[], metavar="PART.KEY=VALUE",
                        help="override a setting, e.g. grpo.learning_rate=5e-4 sft.max_steps=100 num_train=256")
    args = parser.parse_args(argv)

    os.environ.setdefault("TQDM_DISABLE", "1")  # the eval runner's progress bars
    from paddle_r1.cpu_math import tune_cpu_math
    from paddle_r1.quiet import quiet_libraries

    quiet_libraries("ERROR")
    tune_cpu_math()  # what a CPU job does before its first matrix product

    preset = QUICK if args.quick else PRESETS[args.task]
    if args.dynamic_sampling:
        preset = replace(preset, grpo={**preset.grpo, "dynamic_sampling": True})
    preset = with_settings(preset, args.set)
    start = time.perf_counter()
    results = run_seeds(run_seed, preset, args.seeds, args.out or tempfile.mkdtemp(prefix="paddle_r1_learning_"),
                        lambda r: f"{r['before']:.3f} -> {r['after']:.3f}")
    print(summary_table(results))
    print(f"total {time.perf_counter() - start:.0f} s")
    if args.plot:
        from paddle_r1.plot import plot_runs

        print(plot_runs([r["grpo_dir"] for r in results], args.plot, labels=[f"seed {r['seed']}" for r in results],
                        title=f"GRPO after SFT: tiny {preset.family}, synthetic {preset.task}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
