"""One GRPO step, paddle_r1 against TRL 1.16, on the same machine in the same run.

    python benchmarks/grpo_step.py [--steps 5 --rounds 2] [--trl PY] [--profile step.prof]
    python benchmarks/grpo_step.py --family qwen3_vl [--steps 4]
    python benchmarks/grpo_step.py --trl PY [--new-tokens 256] [--generations 16] [--image 448]
    python benchmarks/grpo_step.py --trl PY --scaling [--cells 64:8:112,256:8:112] [--steps 3]

``PY`` is the path of a Python interpreter that has torch, transformers 5.3 and TRL 1.16 installed (another
virtual environment's ``bin/python``); the comparison runs TRL in it.

The step is the speed anchor's (``trl_anchor/``): a 6.9M-parameter Qwen2.5-VL (hidden 256, 4 layers, vocab 4096,
vision depth 2), 2 prompts x 8 completions x 64 tokens, one 112x112 image per prompt, beta 0.04, AdamW lr 1e-5,
temperature 1, a reward of the completion's length mod 7. paddle_r1 runs its own ``GRPOTrainer``; each phase is
timed by wrapping the trainer's own calls (rollout, rewards, reference, policy forward, backward, optimizer).
With ``--trl PY`` the checkpoint is the one the anchor's ``make_hf_tiny.py`` writes with transformers (both
sides load the same weights) and the anchor's TRL script runs in that interpreter; the two sides alternate
``--rounds`` times, so a busy machine slows both. Without it the checkpoint is paddle_r1's tiny model at the same
sizes, of ``--family`` (default qwen2_5_vl). Seconds per step are medians over the steps after each round's first
(warm-up).
``--new-tokens``, ``--generations`` and ``--image`` (the side of the square image) change the anchor's work on both
sides. ``--glibc-default`` leaves glibc's blocks over 32 MiB mmap-ed, each on fresh pages (what a CPU job changes:
``cpu_math.keep_large_blocks_on_the_heap``), to measure that change.

``--scaling`` runs a grid of such cells (``--cells`` LENGTH:G:IMAGE,...; by default completion length 64 / 256 /
1024 at G 8, G 4 / 8 / 16 at length 64, and the 448x448 image at G 8 and length 64), each side in a process of its
own (this script with ``--json``, and TRL's), alternating ``--rounds`` times per cell, and prints seconds per
step, completion tokens/s and each process's peak resident memory (``ru_maxrss``: model, optimizer, activations
and the interpreter with its libraries); then, between cells that differ only in length, how many times each side's
step grew and the milliseconds it added per added completion token (the slope of time against length).

Both sides run their CPU kernels on ``--threads`` threads (default 1): ``import paddle`` sets OMP_NUM_THREADS=1,
which the TRL process would otherwise inherit without saying so; Paddle's own count is set with
``paddle.base.core.set_num_threads``. The TRL side reports the count torch used.
"""
from __future__ import annotations

import argparse
import cProfile
import functools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

warnings.filterwarnings("ignore")
HERE = os.path.dirname(os.path.abspath(__file__))
PROMPTS, GENERATIONS, NEW_TOKENS = 2, 8, 64
PHASES = ("rollout", "rewards", "reference", "policy forward", "backward", "optimizer")


def length_reward(completions, **columns):
    """The anchor's reward: any cheap score that varies between completions."""
    return [float(len(text) % 7) / 7 for text in completions]


def _write_samples(folder: str, count: int, side: int = 112) -> list[dict]:
    """The anchor's prompts: a red square on white, 112x112, at a place that moves with the index; ``side``
    scales the drawing (the TRL script draws the same)."""
    from PIL import Image, ImageDraw

    os.makedirs(folder, exist_ok=True)
    samples, k = [], side / 112
    for i in range(count):
        image = Image.new("RGB", (side, side), (255, 255, 255))
        x, y = (i * 17) % 70, (i * 29) % 70
        ImageDraw.Draw(image).rectangle([x * k, y * k, (x + 30) * k, (y + 30) * k], fill=(255, 0, 0))
        path = os.path.join(folder, f"{i}.png")
        image.save(path)
        samples.append({"images": [path], "problem": "locate the red square, output its bbox",
                        "solution": [x, y, x + 30, y + 30], "reward_method": None})
    return samples


def _make_checkpoint(folder: str, torch_python: str | None, family: str = "qwen2_5_vl") -> str:
    """The anchor's checkpoint written by transformers (with a torch interpreter), else paddle_r1's tiny ``family``
    model at its sizes."""
    if torch_python:
        subprocess.run([torch_python, os.path.join(HERE, "trl_anchor", "make_hf_tiny.py"), folder, "--weights"],
                       check=True, stdout=subprocess.DEVNULL)
        return folder
    from anchor import ANCHOR_SIZE  # beside this file
    from paddle_r1.testing.tiny import make_tiny_model

    return make_tiny_model(folder, family=family, size=ANCHOR_SIZE)


class PhaseClock:
    """Seconds spent in each phase of the current step, by wrapping the trainer's own calls, and the most host memory
    Paddle's allocator held during each phase (``peak_mib``: its whole count, the model and optimizer state included;
    ``added_mib``: above what it held when the phase began)."""

    def __init__(self, trainer):
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.peak_mib, self.added_mib = dict.fromkeys(PHASES, 0.0), dict.fromkeys(PHASES, 0.0)
        generator = trainer.generator
        generator.generate = self._timed("rollout", generator.generate)
        trainer.rewards.score = self._timed("rewards", trainer.rewards.score)
        trainer._reference_logprobs = self._timed("reference", trainer._reference_logprobs)
        trainer.forward = self._timed("policy forward", trainer.forward)
        trainer.backward = self._timed("backward", trainer.backward)
        trainer.update.step = self._timed("optimizer", trainer.update.step)

    def _timed(self, phase: str, fn):
        from paddle.base import core  # imported here: this script tunes the CPU's math before paddle loads

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            held = core.host_memory_stat_current_value("Allocated", 0)
            core.host_memory_stat_reset_peak_value("Allocated", 0)
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[phase] += time.perf_counter() - start
                peak = core.host_memory_stat_peak_value("Allocated", 0)
                self.peak_mib[phase] = max(self.peak_mib[phase], peak / 2 ** 20)
                self.added_mib[phase] = max(self.added_mib[phase], (peak - held) / 2 ** 20)
        return timed

    def memory(self) -> dict:
        """Per phase: (peak MiB held, MiB added), over the steps so far."""
        return {phase: (self.peak_mib[phase], self.added_mib[phase]) for phase in PHASES}

    def take(self) -> dict:
        seconds, self.seconds = self.seconds, dict.fromkeys(PHASES, 0.0)
        return seconds


def _paddle_trainer(model_dir: str, work: str, total_steps: int, generations: int, new_tokens: int, side: int,
                    tune_cpu_math: bool = True, bf16_products: bool = False):
    from paddle_r1.config.jobs import GRPOConfig
    from paddle_r1.trainer.grpo import GRPOTrainer

    sys.path.insert(0, HERE)  # the reward below is found as grpo_step:length_reward
    config = GRPOConfig(model_name_or_path=model_dir, output_dir=os.path.join(work, "out"),
                        reward_funcs=["grpo_step:length_reward"], num_generations=generations,
                        per_device_train_batch_size=PROMPTS * generations, max_completion_length=new_tokens, beta=0.04,
                        learning_rate=1e-5, temperature=1.0, question_template="{Question}", max_steps=total_steps,
                        save_steps=10**9, use_visualdl=False, disable_tqdm=True, log_completions_steps=0, seed=0,
                        tune_cpu_math=tune_cpu_math, rollout_bf16_products=bf16_products,
                        importance_sampling_correction=bf16_products)
    samples = _write_samples(os.path.join(work, "images"), PROMPTS * (total_steps + 2), side)
    return GRPOTrainer(config, samples=samples)


def _paddle_round(trainer, clock: PhaseClock, steps: int, completions: int, profile: str | None) -> list[dict]:
    """``steps`` steps; each row: seconds, per-phase seconds, completion tokens. The last is profiled if asked."""
    rows = []
    for i in range(steps):
        profiler = cProfile.Profile() if profile and i == steps - 1 else None
        start = time.perf_counter()
        if profiler:
            profiler.enable()
        metrics = trainer.training_step()
        if profiler:
            profiler.disable()
            profiler.dump_stats(profile)
        rows.append({"seconds": time.perf_counter() - start, **clock.take(),
                     "tokens": metrics["completion_length"] * completions})
    return rows


def _trl_round(python: str, model_dir: str, steps: int, threads: int, generations: int, new_tokens: int,
               side: int) -> dict:
    """The anchor's TRL script; its last line is a json summary (median step after the first)."""
    script = os.path.join(HERE, "trl_anchor", "trl_grpo_bench.py")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    result = subprocess.run([python, script, model_dir, str(steps), str(generations), str(PROMPTS), str(new_tokens),
                             str(side)], check=True, capture_output=True, text=True, env=env)
    return json.loads(result.stdout.strip().splitlines()[-1])


def _paddle_process(model_dir: str, steps: int, threads: int, generations: int, new_tokens: int, side: int) -> dict:
    """This script in a process of its own (``--json``), for its own peak memory."""
    result = subprocess.run([sys.executable, os.path.abspath(__file__), "--model", model_dir, "--steps", str(steps),
                             "--threads", str(threads), "--generations", str(generations), "--new-tokens",
                             str(new_tokens), "--image", str(side), "--json"],
                            check=True, capture_output=True, text=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


DEFAULT_CELLS = "64:8:112,256:8:112,1024:8:112,64:4:112,64:16:112,64:8:448"


def scaling(args, model_dir: str) -> None:
    """The grid of ``--cells``, both sides per cell alternating ``--rounds`` times; one table."""
    cells = [tuple(int(v) for v in cell.split(":")) for cell in args.cells.split(",")]
    print(f"{PROMPTS} prompts per step, beta 0.04; per cell and side: the median step after a warm-up over "
          f"{args.steps - 1} step(s) x {args.rounds} round(s); {args.threads} thread(s) each side", flush=True)
    print("| completion length | G | image | paddle_r1 s/step | TRL s/step | paddle_r1 tokens/s | TRL tokens/s | "
          "ratio (tokens/s) | paddle_r1 peak RSS MiB | TRL peak RSS MiB |\n|---|---|---|---|---|---|---|---|---|---|",
          flush=True)
    phase_rows, steps = [], {}
    for new_tokens, generations, side in cells:
        ours, theirs = [], []
        for _ in range(args.rounds):
            theirs.append(_trl_round(args.trl, model_dir, args.steps, args.threads, generations, new_tokens, side))
            ours.append(_paddle_process(model_dir, args.steps, args.threads, generations, new_tokens, side))
        ratios = [o["tokens_per_s"] / t["completion_tok_per_s"] for o, t in zip(ours, theirs)]
        med = statistics.median
        print(f"| {new_tokens} | {generations} | {side}x{side} | {med(o['step_s'] for o in ours):.2f} | "
              f"{med(t['step_s_median'] for t in theirs):.2f} | {med(o['tokens_per_s'] for o in ours):.0f} | "
              f"{med(t['completion_tok_per_s'] for t in theirs):.0f} | {med(ratios):.2f}x | "
              f"{max(o['peak_rss_mib'] for o in ours):.0f} | {max(t['peak_rss_mib'] for t in theirs):.0f} |",
              flush=True)
        steps[new_tokens, generations, side] = {
            "paddle_r1": (med(o["step_s"] for o in ours), med(o["step_s"] * o["tokens_per_s"] for o in ours)),
            "TRL": (med(t["step_s_median"] for t in theirs),
                    med(t["step_s_median"] * t["completion_tok_per_s"] for t in theirs))}
        phase_rows.append(f"| {new_tokens} | {generations} | {side}x{side} | " + " | ".join(
            f"{med(o['phases'][phase] for o in ours):.2f}" for phase in PHASES) + " |")
    print("\npaddle_r1's phases, seconds per step (medians over the rounds)")
    print("| completion length | G | image | " + " | ".join(PHASES) + " |\n" + "|---" * (3 + len(PHASES)) + "|")
    print("\n".join(phase_rows))
    print_growth(steps)


def print_growth(steps: dict) -> None:
    """Between cells that differ only in completion length: how many times the step's seconds grew, and the
    seconds it added per added completion token (its slope, in ms: the step's seconds over the completion tokens
    the step made, both sides' rows stopping at their own EOS)."""
    rows = []
    for (length, generations, side), sides in sorted(steps.items()):
        longer = sorted(key for key in steps if key[1:] == (generations, side) and key[0] > length)
        if not longer:
            continue
        after = steps[longer[0]]
        cells = []
        for name in ("paddle_r1", "TRL"):
            (seconds, tokens), (seconds_after, tokens_after) = sides[name], after[name]
            cells.append((seconds_after / seconds, (seconds_after - seconds) / (tokens_after - tokens) * 1e3))
        rows.append(f"| {length} -> {longer[0][0]} | {generations} | {side}x{side} | x{cells[0][0]:.1f} | "
                    f"x{cells[1][0]:.1f} | {cells[0][1]:.1f} | {cells[1][1]:.1f} |")
    if rows:
        print("\nhow the step grows with completion length: times its seconds, and ms added per added completion "
              "token\n| completion length | G | image | paddle_r1 | TRL | paddle_r1 ms/token | TRL ms/token |\n"
              "|---|---|---|---|---|---|---|")
        print("\n".join(rows))


def _median(rows: list[dict], key: str) -> float:
    return statistics.median(row[key] for row in rows)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5, help="steps per round; the first of each is a warm-up")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--trl", metavar="PY", help="a torch + transformers 5.3 + trl 1.16 interpreter")
    parser.add_argument("--model", help="an existing checkpoint folder (default: built here)")
    parser.add_argument("--family", default="qwen2_5_vl",
                        help="the family of paddle_r1's tiny model, without --trl and --model (default qwen2_5_vl)")
    parser.add_argument("--profile", metavar="FILE", help="cProfile the last paddle_r1 step into FILE")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads of each side (default 1)")
    parser.add_argument("--generations", type=int, default=GENERATIONS, help="G, completions per prompt (default 8)")
    parser.add_argument("--new-tokens", type=int, default=NEW_TOKENS, help="max completion length (default 64)")
    parser.add_argument("--image", type=int, default=112, help="side of each prompt's square image (default 112)")
    parser.add_argument("--scaling", action="store_true", help="the grid of --cells against TRL (needs --trl)")
    parser.add_argument("--cells", default=DEFAULT_CELLS, help=f"LENGTH:G:IMAGE,... (default {DEFAULT_CELLS})")
    parser.add_argument("--json", action="store_true", help="paddle_r1 only; print one json line (for --scaling)")
    parser.add_argument("--bf16-products", action="store_true",
                        help="paddle_r1 with rollout_bf16_products and importance_sampling_correction, as the key "
                             "asks; TRL's side stays as it is")
    parser.add_argument("--glibc-default", action="store_true",
                        help="leave glibc's large blocks mmap-ed, as without cpu_math.keep_large_blocks_on_the_heap")
    args = parser.parse_args()
    if args.scaling and not args.trl:
        parser.error("--scaling compares with TRL: give --trl PY")

    from paddle_r1.cpu_math import choose_mkl_kernels, tune_cpu_math
    from paddle_r1.quiet import quiet_libraries

    quiet_libraries("ERROR")
    if args.glibc_default:
        choose_mkl_kernels()
    else:
        tune_cpu_math()  # what a CPU job does before its first matrix product
    from paddle.base import core

    core.set_num_threads(args.threads)
    work = tempfile.mkdtemp()
    model_dir = args.model or _make_checkpoint(os.path.join(work, "model"), args.trl, args.family)
    if args.scaling:
        return scaling(args, model_dir)
    trainer = _paddle_trainer(model_dir, work, args.steps * args.rounds, args.generations, args.new_tokens, args.image,
                              tune_cpu_math=not args.glibc_default, bf16_products=args.bf16_products)
    clock = PhaseClock(trainer)
    paddle_rows, trl_rows = [], []
    for round_ in range(args.rounds):
        if args.trl:
            trl_rows.append(_trl_round(args.trl, model_dir, args.steps, args.threads, args.generations,
                                       args.new_tokens, args.image))
        paddle_rows += _paddle_round(trainer, clock, args.steps, PROMPTS * args.generations, args.profile)[1:]

    step_s = _median(paddle_rows, "seconds")
    tokens_per_s = _median(paddle_rows, "tokens") / step_s
    if args.json:
        print(json.dumps({"step_s": step_s, "tokens_per_s": tokens_per_s,
                          "phases": {phase: _median(paddle_rows, phase) for phase in PHASES},
                          "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
        return
    print(f"{PROMPTS} prompts x {args.generations} completions x {args.new_tokens} tokens, {args.image}x{args.image} "
          f"image; medians of "
          f"{len(paddle_rows)} steps ({args.rounds} round(s), warm-up step dropped); {args.threads} thread(s)")
    memory = clock.memory()
    ours = {phase: _median(paddle_rows, phase) for phase in PHASES}
    ours["other"] = step_s - sum(ours.values())  # the step's work between the wrapped calls
    columns = ["seconds", "Paddle's host memory, peak MiB", "added in the phase, MiB"]
    if trl_rows:  # TRL's script times the same six phases by wrapping TRL's calls: where a gap to TRL lies
        trl_s = statistics.median(r["step_s_median"] for r in trl_rows)
        theirs = {phase: statistics.median(r["phases"][phase] for r in trl_rows) for phase in PHASES}
        theirs["other"] = trl_s - sum(theirs.values())
        columns += ["TRL 1.16, seconds", "TRL / paddle_r1"]
    print("| | " + " | ".join(columns) + " |\n|---|" + "---|" * len(columns))
    for phase, seconds in ours.items():
        peak, added = memory.get(phase, (None, None))
        cells = [f"{seconds:.2f}", "" if peak is None else f"{peak:.0f}", "" if added is None else f"{added:.0f}"]
        if trl_rows:
            cells += [f"{theirs[phase]:.2f}", f"{theirs[phase] / seconds:.2f}x" if seconds > 0 else ""]
        print(f"| {phase} | " + " | ".join(cells) + " |")
    total = f" **{trl_s:.2f}** | **{trl_s / step_s:.2f}x** |" if trl_rows else ""
    print(f"| **step** | **{step_s:.2f}** | | |" + total)
    print(f"paddle_r1: {tokens_per_s:.0f} completion tokens/s")
    if trl_rows:
        trl_tokens_per_s = statistics.median(r["completion_tok_per_s"] for r in trl_rows)
        per_round = ", ".join(f"{r['step_s_median']:.2f}" for r in trl_rows)
        print(f"TRL 1.16: {trl_s:.2f} s/step, {trl_tokens_per_s:.0f} completion tokens/s (per round: {per_round} s; "
              f"torch on {trl_rows[0]['threads']} thread(s))")
        print(f"ratio (paddle_r1 / TRL completion tokens/s): {tokens_per_s / trl_tokens_per_s:.2f}x; "
              f"step time TRL / paddle_r1: {trl_s / step_s:.2f}x")


if __name__ == "__main__":
    main()
