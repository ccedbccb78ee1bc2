"""Learning to use a tool: SFT on scripted crop episodes, then GRPO with the crop tool, on the synthetic zoom task.

    python benchmarks/tool_learning.py [--seeds 0 1 2] [--out DIR] [--set sft.max_steps=200 grpo.max_steps=40]

The task (``paddle_r1.synthetic.zoom``): a 448 x 448 canvas with a small red-framed square whose 2-pixel
pattern (horizontal, vertical, checkered, plain) the model's 112 x 112 input averages away; a crop around it shows
the pattern. The preset puts it on the grid (``cells=4``): the square centred in one of 16 cells of 112 pixels, one
merged vision token each, and the scripted crop is that cell, so where to crop is one of 16 boxes rather than a
box to the pixel; and the question names the square's cell (``cell_hint``: "the small square in row 3, column 1").
Without the hint (``--set options.cell_hint=false``) SFT reads the pattern in the cell's crop but neither SFT nor
40 GRPO steps learn which cell to crop: the tiny model names one cell whatever the canvas (docs/reference.md, "Tool
use"); ``--set options.cells=null options.cell_hint=false`` runs the task without the grid. For each seed: a tiny
Qwen2.5-VL from that seed, SFT on scripted episodes (crop call, crop, answer), then GRPO with ``tools: [crop]``,
``max_turns: 3`` and the ``all_match`` and ``crop_covers_target`` rewards. Before SFT, after SFT and after GRPO,
every held-out prompt is run greedy as an episode of at most two turns through the rollout GRPO trains with (the
``crop`` tool answers a first turn that calls it; a first turn without a call is the answer):

- tool-call rate: first turns that are a well-formed crop call (a box of four numbers);
- crop hit: first turns whose crop covers the framed square with at most 16 times its area (the
  ``crop_covers_target`` reward: a crop of the whole canvas is no hit);
- accuracy: episodes whose final answer names the pattern (``all_match``);
- accuracy given the ideal crop: the answer turn after the scripted call and crop (reading the pattern alone).

``--set grpo.max_steps=0`` stops after SFT (the table then has its columns only).
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
from dataclasses import dataclass, field

from learning import run_seeds, with_settings  # benchmarks/learning.py, beside this file

from paddle_r1.config.jobs import GRPOConfig, SFTConfig

QUESTION_TEMPLATE = "{Question}"  # the tiny model learns from scratch: the shortest prompt trains fastest
SFT_SEED_OFFSET = 20_000  # the SFT episodes come from their own seed, apart from GRPO's prompts and the held-out set


@dataclass
class Preset:
    num_sft: int = 512
    num_train: int = 256
    num_heldout: int = 64
    options: dict = field(default_factory=lambda: dict(cells=4, cell_hint=True))  # make_synthetic_zoom's
    sft: dict = field(default_factory=lambda: dict(max_steps=1000, per_device_train_batch_size=16, learning_rate=1e-3,
                                                   warmup_steps=10))
    grpo: dict = field(default_factory=lambda: dict(
        tools=["crop"], max_turns=3, reward_funcs=["all_match", "crop_covers_target"], max_steps=40,
        per_device_train_batch_size=32, num_generations=8, temperature=1.0, learning_rate=1e-4, beta=0.0,
        max_completion_length=96))


def crop_call_box(text: str):
    """The box of a well-formed ``<tool_call>{"name": "crop", "arguments": {"bbox_2d": [4 numbers]}}</tool_call>``, the
    whole turn (read as the rollout reads calls: ``tools.calls``); else None. (Whether the box is a box, x1 <= x2 and
    y1 <= y2, is the crop's business.)"""
    from paddle_r1.models.coords import as_floats
    from paddle_r1.tools.calls import CLOSE, OPEN, parse_tool_calls

    calls = parse_tool_calls(text)
    whole = text.strip().startswith(OPEN) and text.strip().endswith(CLOSE)
    if not whole or len(calls) != 1 or calls[0].error is not None or calls[0].name != "crop":
        return None
    box = calls[0].arguments.get("bbox_2d")
    return box if as_floats(box) is not None and len(box) == 4 else None


def evaluate(model_dir: str, samples: list[dict], batch: int = 16) -> dict:
    """The four rates above, greedy, over ``samples``: episodes of at most two turns through the rollout GRPO trains
    with (``generation.episodes.sample_episodes``, the ``crop`` tool), one from the prompt and one continuing from
    the scripted crop call."""
    from paddle_r1.generation.episodes import sample_episodes
    from paddle_r1.generation.generator import build_prompt_batch, eos_token_ids, load_sample_images
    from paddle_r1.generation.rollout import SamplingParams
    from paddle_r1.models.loading import load_model, load_processor
    from paddle_r1.rewards import get_reward
    from paddle_r1.tools.builtins import ToolContext
    from paddle_r1.tools.toolbox import Toolbox

    model, processor = load_model(model_dir), load_processor(model_dir)
    tokenizer, score, toolbox = processor.tokenizer, get_reward("all_match"), Toolbox(["crop"])
    crop_hit = get_reward("crop_covers_target")
    calls = hits = 0
    correct, correct_given_crop = [], []
    for start in range(0, len(samples), batch):
        part = samples[start:start + batch]
        images = [load_sample_images(s) for s in part]
        prompt, facts = build_prompt_batch(part, processor, QUESTION_TEMPLATE, images=images)
        contexts = [ToolContext(opened, sizes, inputs, "abs_resized")
                    for opened, sizes, inputs in zip(images, facts.image_sizes, facts.input_sizes)]
        solutions = [s["solution"] for s in part]

        def episodes(first_turns=None):
            return sample_episodes(model, processor, prompt, contexts, 1, SamplingParams(96, temperature=0),
                                   eos_token_ids(tokenizer), tokenizer.pad_token_id, toolbox, 2,
                                   first_turns=first_turns)

        free = episodes()  # at most two turns: the calls run are the first turn's
        calls += sum(crop_call_box(turns[0]["text"]) is not None for turns in free.turns)
        hits += sum(crop_hit(free.texts, tool_calls=free.tool_calls, target_box=[s["target_box"] for s in part],
                             image_sizes=facts.image_sizes, input_sizes=facts.input_sizes,
                             coord_system=["abs_resized"] * len(part)))
        correct += score(free.texts, solution=solutions)
        correct_given_crop += score(episodes([s["episode"][0]["text"] for s in part]).texts, solution=solutions)
    n = len(samples)
    return {"tool_calls": calls / n, "crop_hits": hits / n, "accuracy": statistics.mean(correct),
            "accuracy_given_crop": statistics.mean(correct_given_crop)}


def run_seed(seed: int, out_dir: str, preset: Preset) -> dict:
    """Data, tiny model, SFT, GRPO (unless its max_steps is 0) for one seed, their output in ``out_dir/train.log``;
    returns the evaluations {"before", "sft", "grpo" (or None)} and the seconds taken."""
    from paddle_r1.data.loader import load_samples
    from paddle_r1.synthetic import make_synthetic_splits
    from paddle_r1.synthetic.zoom import make_synthetic_zoom
    from paddle_r1.testing.tiny import make_tiny_model
    from paddle_r1.trainer.sft import SFTTrainer

    start = time.perf_counter()
    data = make_synthetic_splits(os.path.join(out_dir, "data"), "zoom", preset.num_train, preset.num_heldout,
                                 seed=seed, **preset.options)
    sft_data = make_synthetic_zoom(os.path.join(out_dir, "data", "sft"), preset.num_sft, seed=seed + SFT_SEED_OFFSET,
                                   **preset.options)
    heldout = load_samples(data["heldout"])[0]
    model = make_tiny_model(os.path.join(out_dir, "tiny-model"), seed=seed)
    common = dict(use_visualdl=False, disable_tqdm=True, seed=seed, question_template=QUESTION_TEMPLATE)
    result = {"seed": seed, "before": evaluate(model, heldout), "grpo": None}
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "train.log"), "w") as log, contextlib.redirect_stdout(log), \
            contextlib.redirect_stderr(log):
        sft = SFTTrainer(SFTConfig(model_name_or_path=model, data_path=sft_data,
                                   output_dir=os.path.join(out_dir, "sft"),
                                   logging_steps=10, **common, **preset.sft)).train()
    result["sft"] = evaluate(sft["checkpoint"], heldout)
    if preset.grpo.get("max_steps"):
        from paddle_r1.trainer.grpo import GRPOTrainer

        with open(os.path.join(out_dir, "train.log"), "a") as log, contextlib.redirect_stdout(log), \
                contextlib.redirect_stderr(log):
            grpo = GRPOTrainer(GRPOConfig(model_name_or_path=sft["checkpoint"], data_path=data["train"],
                                          output_dir=os.path.join(out_dir, "grpo"),
                                          **common, **preset.grpo)).train()
        result["grpo"] = evaluate(grpo["checkpoint"], heldout)
    result["seconds"] = time.perf_counter() - start
    return result


COLUMNS = (("tool_calls", "tool-call rate"), ("crop_hits", "crop hit"), ("accuracy", "accuracy"),
           ("accuracy_given_crop", "accuracy given the ideal crop"))


def summary_table(results: list[dict]) -> str:
    stages = [("before", "before SFT"), ("sft", "after SFT"), ("grpo", "after GRPO")]
    stages = [(key, name) for key, name in stages if all(r[key] is not None for r in results)]
    lines = ["| seed | stage | " + " | ".join(name for _, name in COLUMNS) + " | seconds |",
             "|---|---|" + "---|" * len(COLUMNS) + "---|"]
    for r in results:
        for key, name in stages:
            lines.append(f"| {r['seed']} | {name} | " + " | ".join(f"{r[key][c]:.3f}" for c, _ in COLUMNS)
                         + f" | {r['seconds']:.0f} |")
    for key, name in stages:
        means = [statistics.mean(r[key][c] for r in results) for c, _ in COLUMNS]
        lines.append(f"| mean | {name} | " + " | ".join(f"{m:.3f}" for m in means) + " | |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", default=None, help="working folder (default: a new temporary folder)")
    parser.add_argument("--set", nargs="*", default=[], metavar="PART.KEY=VALUE",
                        help="override a setting, e.g. sft.max_steps=100 grpo.max_steps=20 num_heldout=32")
    args = parser.parse_args(argv)

    os.environ.setdefault("TQDM_DISABLE", "1")
    from paddle_r1.cpu_math import tune_cpu_math
    from paddle_r1.quiet import quiet_libraries

    quiet_libraries("ERROR")
    tune_cpu_math()
    preset = with_settings(Preset(), args.set)
    start = time.perf_counter()
    results = run_seeds(run_seed, preset, args.seeds,
                        args.out or tempfile.mkdtemp(prefix="paddle_r1_tool_learning_"),
                        lambda r: json.dumps({k: r[k] for k in ("before", "sft", "grpo")}))
    print(summary_table(results))
    print(f"total {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
