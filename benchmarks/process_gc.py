"""What Python's collector costs a ``paddle-r1`` process, with the libraries' objects frozen and without.

    python benchmarks/process_gc.py [--rounds 5] [--steps 2]

One table: the same ``paddle-r1 train`` of the tiny model (``--steps`` GRPO steps, 2 completions of 8 tokens) run as
the program does (``python -m paddle_r1.cli``: the collector held while Paddle, PaddleFormers and transformers
import, their objects frozen afterwards, ``paddle_r1.process_gc``) and as before (the same ``main`` called with its
arguments from ``python -c``, which leaves the collector alone), the sides alternating within each round. Per side:
the full collections the process ran and their seconds (a ``gc.callbacks`` probe), the process's wall seconds and
CPU seconds (medians over the rounds), then the ratio.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIDES = ("held and frozen (paddle-r1)", "as Python leaves it")
# Counts the full collections and their seconds, writes them to $GC_REPORT at exit, then runs paddle-r1's main
# as the program (main() reads sys.argv) or as a caller (main(list))
PROBE = """
import atexit, gc, json, os, sys, time
full = {"count": 0, "seconds": 0.0, "start": 0.0}
def watch(phase, info):
    if info["generation"] == 2:
        if phase == "start":
            full["start"] = time.perf_counter()
        else:
            full["count"] += 1
            full["seconds"] += time.perf_counter() - full["start"]
gc.callbacks.append(watch)
atexit.register(lambda: json.dump(full, open(os.environ["GC_REPORT"], "w")))
program = sys.argv.pop(1) == "program"
from paddle_r1.cli import main
sys.exit(main() if program else main(sys.argv[1:]))
"""


def run(side: str, args: list[str], work: str) -> dict:
    report = os.path.join(work, "gc.json")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", PROBE, "program" if side == SIDES[0] else "caller", *args], check=True,
                   capture_output=True, env={**os.environ, "GC_REPORT": report, "PYTHONPATH": ROOT})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {**json.load(open(report)), "wall": wall, "cpu": cpu}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2)
    options = parser.parse_args(argv)
    from paddle_r1.synthetic import make_synthetic_rec
    from paddle_r1.testing.tiny import make_tiny_model

    work = tempfile.mkdtemp(prefix="process_gc_")
    model = make_tiny_model(os.path.join(work, "tiny"))
    data = make_synthetic_rec(os.path.join(work, "data"), num_samples=8, seed=0)
    runs: dict = {side: [] for side in SIDES}
    for round_ in range(options.rounds):
        for side in SIDES if round_ % 2 == 0 else SIDES[::-1]:
            out = os.path.join(work, f"run-{round_}-{SIDES.index(side)}")
            runs[side].append(run(side, ["train", "--model_name_or_path", model, "--data_path", data,
                                         "--output_dir", out, "--num_generations", "2", "--max_completion_length",
                                         "8", "--max_steps", str(options.steps), "--use_visualdl", "false"], work))
    print(f"paddle-r1 train, tiny model, {options.steps} steps; medians of {options.rounds} rounds\n")
    print("| collector | full collections | their seconds | process seconds (wall) | process CPU seconds |")
    print("|---|---|---|---|---|")
    medians = {}
    for side in SIDES:
        rows = runs[side]
        medians[side] = {key: statistics.median(row[key] for row in rows) for key in ("count", "seconds", "wall",
                                                                                     "cpu")}
        m = medians[side]
        print(f"| {side} | {m['count']:.0f} | {m['seconds']:.2f} | {m['wall']:.2f} | {m['cpu']:.2f} |")
    held, left = (medians[side] for side in SIDES)
    print(f"\nprocess wall: {left['wall'] / held['wall']:.2f}x, CPU: {left['cpu'] / held['cpu']:.2f}x faster held "
          "and frozen")
    return 0


if __name__ == "__main__":
    sys.exit(main())
