"""Paddle's matrix products under each MKL kernel set ``paddle_r1/cpu_math.py`` may choose, on this machine.

    python benchmarks/experiments/mkl_kernels.py [--types default 5 7] [--rounds 3]

MKL reads ``MKL_DEBUG_CPU_TYPE`` once, when Paddle first loads it, so each kernel set is timed in its own process
("default" leaves the variable unset: what MKL picks by itself), the sets alternating over ``--rounds``. The shapes
are the speed anchor's (hidden 256, intermediate 1024, vocab 4096, 16 rows in the decode step; 1,696 rows in a
log-prob pass), and a [1024]^3 product for the machine's peak. Each cell is the median over the rounds of a median of
many calls, in microseconds, with GFLOP/s; the last columns are each set's speed-up over the first.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys

SHAPES = (  # name, rows, inner, columns
    ("decode qkv [16,256]x[256,384]", 16, 256, 384),
    ("decode gate/up [16,256]x[256,2048]", 16, 256, 2048),
    ("decode down [16,1024]x[1024,256]", 16, 1024, 256),
    ("decode LM head [16,256]x[256,4096]", 16, 256, 4096),
    ("log-probs gate/up [1696,256]x[256,2048]", 1696, 256, 2048),
    ("peak [1024]^3", 1024, 1024, 1024),
)

TIMER = """
import json, statistics, time
import paddle
shapes = json.loads(SHAPES)
out = {}
for name, m, k, n in shapes:
    a, b = paddle.randn([m, k]), paddle.randn([k, n])
    calls = max(20, min(2000, int(2e9 / (2 * m * k * n))))
    for _ in range(10):
        paddle.matmul(a, b)
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        paddle.matmul(a, b)
        times.append(time.perf_counter() - t0)
    out[name] = statistics.median(times) * 1e6
print(json.dumps(out))
"""


def time_kernel_set(cpu_type: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "MKL_DEBUG_CPU_TYPE"}
    env["OMP_NUM_THREADS"] = "1"
    if cpu_type != "default":
        env["MKL_DEBUG_CPU_TYPE"] = cpu_type
    code = TIMER.replace("SHAPES", repr(json.dumps(SHAPES)))
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if result.returncode != 0:  # e.g. an illegal instruction: a set this processor does not have
        named = [line for line in result.stderr.splitlines() if "Error" in line or "Illegal" in line]
        died = f"killed by {signal.Signals(-result.returncode).name}" if result.returncode < 0 else ""
        return {"error": named[-1].strip() if named else died or f"exit {result.returncode}"}
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--types", nargs="+", default=["default", "5", "7"],
                        help="MKL_DEBUG_CPU_TYPE values to compare ('default': unset)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    runs = {t: [] for t in args.types}
    for _ in range(args.rounds):
        for cpu_type in args.types:
            runs[cpu_type].append(time_kernel_set(cpu_type))
    failed = {t: r[0]["error"] for t, r in runs.items() if "error" in r[0]}
    for cpu_type, error in failed.items():
        print(f"MKL_DEBUG_CPU_TYPE={cpu_type}: failed ({error})")
    types = [t for t in args.types if t not in failed]
    median = {t: {name: statistics.median(r[name] for r in runs[t]) for name, *_ in SHAPES} for t in types}
    columns = [f"{t}: us (GFLOP/s)" for t in types] + [f"{t} over {types[0]}" for t in types[1:]]
    print("| product | " + " | ".join(columns) + " |")
    print("|---" * (2 * len(types)) + "|")
    for name, m, k, n in SHAPES:
        cells = [f"{median[t][name]:.1f} ({2 * m * k * n / median[t][name] / 1e3:.0f})" for t in types]
        ratios = [f"{median[types[0]][name] / median[t][name]:.2f}x" for t in types[1:]]
        print(f"| {name} | " + " | ".join(cells + ratios) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
