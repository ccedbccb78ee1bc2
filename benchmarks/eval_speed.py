"""Evaluation speed on the tiny model: REC samples per second at batch 1 and batch 16 (greedy, cached decode).

    python benchmarks/eval_speed.py [--samples 32 --max-new-tokens 32]
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    args = parser.parse_args()
    from paddle_r1.cpu_math import tune_cpu_math
    from paddle_r1.quiet import quiet_libraries

    quiet_libraries("ERROR")
    tune_cpu_math()  # what a CPU job does before its first matrix product
    from paddle_r1.synthetic import make_synthetic_rec
    from paddle_r1.evaluation.inputs import EvalOptions, read_benchmarks
    from paddle_r1.evaluation.runner import Evaluator
    from paddle_r1.evaluation.tasks import TASKS
    from paddle_r1.testing.tiny import make_tiny_model

    work = tempfile.mkdtemp()
    model_dir = make_tiny_model(os.path.join(work, "model"))
    jsonl = make_synthetic_rec(os.path.join(work, "data"), num_samples=args.samples)
    rows = [json.loads(line) for line in open(jsonl)]
    with open(os.path.join(work, "data", "refcoco_val.json"), "w") as f:
        json.dump(rows, f)
    print(f"tiny Qwen2.5-VL, {args.samples} REC samples, {args.max_new_tokens} new tokens at most")
    print("| batch size | samples / s | seconds |\n|---|---|---|")
    for batch_size in (1, 16):
        options = EvalOptions(data_root=os.path.join(work, "data"), image_root=None, batch_size=batch_size,
                              max_new_tokens=args.max_new_tokens, output_dir=os.path.join(work, "out"))
        evaluator = Evaluator(model_dir, options)
        benchmark = read_benchmarks({"refcoco_val": TASKS["rec"]}, options)[0]
        start = time.perf_counter()
        summary = evaluator.evaluate(benchmark)
        seconds = time.perf_counter() - start
        print(f"| {batch_size} | {summary['total'] / seconds:.1f} | {seconds:.2f} |")


if __name__ == "__main__":
    main()
