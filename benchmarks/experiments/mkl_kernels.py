"""Paddle's matrix products under each MKL kernel set ``paddle_r1/cpu_math.py`` may choose, on this machine.

    python benchmarks/experiments/mkl_kernels.py [--types default 5 7] [--rounds 3] [--torch PY]

MKL reads ``MKL_DEBUG_CPU_TYPE`` once, when Paddle first loads it, so each kernel set is timed in its own process
("default" leaves the variable unset: what MKL picks by itself), the sets alternating over ``--rounds``. ``--torch
PY`` adds torch's ``matmul`` in that interpreter as the last column (its own MKL, one thread, the variable unset), and
first prints each side's MKL build as ``MKL_VERBOSE`` names it (on an Intel processor the header names the
instruction set MKL chose; on an AMD one it says only "Intel(R) Architecture processors"). The shapes
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

FRAMEWORKS = {  # how each side makes a random matrix and multiplies, on one thread
    "paddle": "import paddle\nrandn, matmul = lambda *shape: paddle.randn(shape), paddle.matmul",
    "torch": "import torch\ntorch.set_num_threads(1)\nrandn, matmul = torch.randn, torch.matmul",
}

TIMER = """
import json, statistics, time
FRAMEWORK
shapes = json.loads(SHAPES)
out = {}
for name, m, k, n in shapes:
    a, b = randn(m, k), randn(k, n)
    calls = max(20, min(2000, int(2e9 / (2 * m * k * n))))
    for _ in range(10):
        matmul(a, b)
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        matmul(a, b)
        times.append(time.perf_counter() - t0)
    out[name] = statistics.median(times) * 1e6
print(json.dumps(out))
"""


def _environment(cpu_type: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "MKL_DEBUG_CPU_TYPE"}
    env["OMP_NUM_THREADS"] = "1"
    if cpu_type != "default":
        env["MKL_DEBUG_CPU_TYPE"] = cpu_type
    return env


def mkl_build(python: str, framework: str) -> str:
    """The first ``MKL_VERBOSE`` line of one product in ``python``: MKL's version, and on Intel its instruction set."""
    env = {**_environment("default"), "MKL_VERBOSE": "1"}
    code = FRAMEWORKS[framework] + "\nmatmul(randn(64, 64), randn(64, 64))"
    result = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True)
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.startswith("MKL_VERBOSE")]
    return lines[0][len("MKL_VERBOSE "):] if lines else "no MKL_VERBOSE line (not MKL, or it printed nothing)"


def time_kernel_set(cpu_type: str, python: str = sys.executable, framework: str = "paddle") -> dict:
    code = TIMER.replace("FRAMEWORK", FRAMEWORKS[framework]).replace("SHAPES", repr(json.dumps(SHAPES)))
    result = subprocess.run([python, "-c", code], env=_environment(cpu_type), capture_output=True, text=True)
    if result.returncode != 0:  # e.g. an illegal instruction: a set this processor does not have
        named = [line for line in result.stderr.splitlines() if "Error" in line or "Illegal" in line]
        died = f"killed by {signal.Signals(-result.returncode).name}" if result.returncode < 0 else ""
        return {"error": named[-1].strip() if named else died or f"exit {result.returncode}"}
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--types", nargs="+", default=["default", "5", "7"],
                        help="MKL_DEBUG_CPU_TYPE values of Paddle's MKL to compare ('default': unset)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--torch", metavar="PY", help="an interpreter with torch: its matmul as the last column")
    args = parser.parse_args(argv)
    print(f"Paddle's MKL: {mkl_build(sys.executable, 'paddle')}")
    if args.torch:
        print(f"torch's MKL: {mkl_build(args.torch, 'torch')}")
    print()
    sides = {t: (t, sys.executable, "paddle") for t in args.types}
    if args.torch:
        sides["torch"] = ("default", args.torch, "torch")
    runs = {name: [] for name in sides}
    for _ in range(args.rounds):
        for name, side in sides.items():
            runs[name].append(time_kernel_set(*side))
    failed = {t: r[0]["error"] for t, r in runs.items() if "error" in r[0]}
    for name, error in failed.items():
        print(f"{name if name == 'torch' else 'MKL_DEBUG_CPU_TYPE=' + name}: failed ({error})")
    types = [t for t in sides if t not in failed]
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
