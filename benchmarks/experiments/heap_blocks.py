"""Paddle's CPU elementwise kernels on activation-sized tensors under glibc's two ways of serving large blocks, on
this machine: each a fresh ``mmap`` given back on free (glibc's default above its mmap threshold, whose maximum is
32 MiB) against all blocks from the heap, reused once freed (``cpu_math.keep_large_blocks_on_the_heap``).

    python benchmarks/experiments/heap_blocks.py [--rounds 3]

The tensors are one block of the log-prob attention's scores at 1,024 completion tokens ([16, 2, 512, 1073]
float32, 70 MB: 16 rows, 2 KV heads x 2 queries each x 256 queries, 1,073 keys). Each policy runs in its own
process (``mallopt`` is process-wide; MKL's kernels chosen as a CPU job chooses them), the two alternating ``--rounds``
times; a cell is the median over the rounds of each process's median call, in milliseconds, with the minor page faults
per call (a first touch of a page).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

TIMER = """
import ctypes, json, resource, statistics, sys, time
from paddle_r1.cpu_math import choose_mkl_kernels, keep_large_blocks_on_the_heap
choose_mkl_kernels()
if sys.argv[1] == "heap":
    keep_large_blocks_on_the_heap()
else:  # the mmap threshold at glibc's maximum: blocks above 32 MiB are mmap-ed
    ctypes.CDLL("libc.so.6").mallopt(-3, 32 << 20)
import paddle
paddle.base.core.set_num_threads(1)
x, y = paddle.randn([16, 2, 512, 1073]), paddle.randn([16, 2, 512, 1073])
mask = paddle.randn([16, 1, 1, 512, 1073])
kernels = {
    "add x + y": lambda: x + y,
    "softmax(x)": lambda: paddle.nn.functional.softmax(x, axis=-1),
    "mask expanded over the heads": lambda: mask.expand([16, 2, 1, 512, 1073]),
    "product q k^T (64-wide)": lambda q=paddle.randn([16, 2, 512, 64]), k=paddle.randn([16, 2, 1073, 64]):
        paddle.matmul(q, k, transpose_y=True),
}
out = {}
for name, kernel in kernels.items():
    kernel()
    times, faults = [], []
    for _ in range(15):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter()
        kernel()
        times.append(time.perf_counter() - t0)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    out[name] = [statistics.median(times) * 1e3, statistics.median(faults)]
print(json.dumps(out))
"""

POLICIES = ("mmap", "heap")


def time_policy(policy: str) -> dict:
    result = subprocess.run([sys.executable, "-c", TIMER, policy], capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    runs = {policy: [] for policy in POLICIES}
    for _ in range(args.rounds):
        for policy in POLICIES:
            runs[policy].append(time_policy(policy))
    print(f"one thread; medians of {args.rounds} round(s), each the median of 15 calls")
    print("| kernel on [16, 2, 512, 1073] float32 | mmap-ed blocks: ms (page faults) | heap blocks: ms (page faults) "
          "| heap over mmap |\n|---|---|---|---|")
    for name in runs["mmap"][0]:
        cells = {policy: (statistics.median(r[name][0] for r in runs[policy]),
                          statistics.median(r[name][1] for r in runs[policy])) for policy in POLICIES}
        (mmap_ms, mmap_faults), (heap_ms, heap_faults) = cells["mmap"], cells["heap"]
        print(f"| {name} | {mmap_ms:.1f} ({mmap_faults:,.0f}) | {heap_ms:.1f} ({heap_faults:,.0f}) | "
              f"{mmap_ms / heap_ms:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
