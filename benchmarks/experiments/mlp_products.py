"""The decode step's MLP products at 16 rows, Paddle's eager matmul against vLLM's CPU linear, on this machine.

    python benchmarks/experiments/mlp_products.py --vllm PY [--hidden 1024] [--layers 8] [--rows 16] [--threads 1]

The gate/up product ([rows, hidden] x [hidden, 8 x hidden]: gate and up side by side, as ``generation/decoder.py``
multiplies them) and the down product ([rows, 4 x hidden] x [4 x hidden, hidden]) of ``--layers`` layers, each layer
its own random weights, so that, as in a decode step, a weight is not in the cache when its product runs. Timed:
Paddle 3.3.1's ``matmul`` on the weight as stored (a GPU's way; MKL's kernels as ``tune_cpu_math`` chooses them),
also split into 4 column blocks, and packed once with MKL's packed API as the decode step does
(``generation/packed_products.py``; the time packing takes is printed too, in tokens of what it saves); and, in
vLLM's interpreter ``PY``, torch's ``linear`` and the kernel vLLM's CPU build runs for an unquantized float32 linear
layer (``vllm._custom_ops.onednn_mm``: oneDNN on a weight prepacked once, ``dispatch_cpu_unquantized_gemm``).
Milliseconds per layer: the median of 30 passes over all layers after 3 warm-up passes. Both sides are confined to
the first ``--threads`` cores.
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import statistics
import subprocess
import sys
import time

VLLM_SIDE = r"""
import json, statistics, sys, time
import torch
from vllm import _custom_ops as ops
hidden, layers, rows, threads = (int(x) for x in sys.argv[1:5])
torch.set_num_threads(threads)
result = {}
for name, k, n in (("gate/up", hidden, 8 * hidden), ("down", 4 * hidden, hidden)):
    x = torch.randn(rows, k)
    weights = [torch.randn(n, k) for _ in range(layers)]  # [out, in], as torch stores a linear weight
    packed = [ops.create_onednn_mm(w.t(), 32) for w in weights]
    result[name] = {"torch linear": per_layer(lambda: [torch.nn.functional.linear(x, w) for w in weights], layers),
                    "vLLM onednn_mm (prepacked)": per_layer(lambda: [ops.onednn_mm(h, x, None) for h in packed],
                                                            layers)}
print(json.dumps(result))
"""


def per_layer(fn, layers: int) -> float:
    """Milliseconds per layer: the median of 30 calls of ``fn`` (one pass over all layers) after 3 warm-up calls."""
    for _ in range(3):
        fn()
    seconds = []
    for _ in range(30):
        start = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds) / layers * 1e3


def paddle_side(hidden: int, layers: int, rows: int, threads: int) -> dict:
    from paddle_r1.cpu_math import tune_cpu_math

    tune_cpu_math()
    import paddle

    from paddle_r1.generation.packed_products import PackedWeight

    paddle.base.core.set_num_threads(threads)
    result, packing = {}, {}
    for name, k, n in (("gate/up", hidden, 8 * hidden), ("down", 4 * hidden, hidden)):
        x = paddle.randn([rows, k])
        weights = [paddle.randn([k, n]) for _ in range(layers)]  # [in, out], as the decode step multiplies them
        start = time.perf_counter()
        packed = [PackedWeight(w, rows) for w in weights]
        packing[name] = (time.perf_counter() - start) / layers * 1e3
        blocks = [[w[:, i * n // 4:(i + 1) * n // 4].contiguous() for i in range(4)] for w in weights]
        result[name] = {
            "Paddle matmul": per_layer(lambda: [paddle.matmul(x, w) for w in weights], layers),
            "Paddle matmul, 4 column blocks": per_layer(
                lambda: [paddle.matmul(x, b) for layer in blocks for b in layer], layers),
            "MKL packed (the decode step's)": per_layer(lambda: [p(x) for p in packed], layers)}
    return result, packing


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--vllm", metavar="PY", help="an interpreter with vLLM's CPU build (else Paddle's side only)")
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:args.threads])  # the vLLM side inherits it
    sizes = [str(v) for v in (args.hidden, args.layers, args.rows, args.threads)]
    results, packing = paddle_side(args.hidden, args.layers, args.rows, args.threads)
    if args.vllm:
        source = VLLM_SIDE.replace("result = {}", inspect.getsource(per_layer) + "\n\nresult = {}", 1)  # one timer
        done = subprocess.run([args.vllm, "-c", source, *sizes], check=True, capture_output=True, text=True)
        for name, timed in json.loads(done.stdout.strip().splitlines()[-1]).items():
            results[name].update(timed)
    print(f"{args.rows} rows, hidden {args.hidden}, {args.layers} layers' weights, {args.threads} thread(s); "
          "ms per layer (median of 30 passes after 3)")
    columns = list(results["gate/up"])
    print("| product | " + " | ".join(columns) + " |\n" + "|---" * (len(columns) + 1) + "|")
    for name, timed in results.items():
        print(f"| {name} | " + " | ".join(f"{ms:.2f}" for ms in timed.values()) + " |")
    saved = {name: timed["Paddle matmul"] - timed["MKL packed (the decode step's)"] for name, timed in results.items()}
    print("packing a layer's weight once: " + ", ".join(
        f"{name} {ms:.2f} ms (= {ms / saved[name]:.1f} tokens of what packing saves)" if saved[name] > 0 else
        f"{name} {ms:.2f} ms (packing saves nothing here)" for name, ms in packing.items()))


if __name__ == "__main__":
    sys.exit(main())
