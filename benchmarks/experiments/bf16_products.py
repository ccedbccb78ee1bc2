"""The decode step's products in bfloat16 on this CPU: the lever ``rollout_bf16_products`` pulls.

    python benchmarks/experiments/bf16_products.py [--hidden 1024] [--intermediate 4096] [--rows 16] [--threads 1]

The one-token step multiplies 16 rows by each weight; in float32 on CPU it runs MKL's packed products
(``paddle_r1/generation/packed_products.py``), about level with the oneDNN kernel vLLM's CPU build runs. oneDNN,
which Paddle's CPU wheel ships (``paddle/libs/libdnnl.so.3``, reached through its C API with ctypes:
``paddle_r1/generation/onednn.py``), also multiplies bfloat16 weights and activations into float32 outputs with the
CPU's bf16 instructions (AVX-512 BF16 on Zen 4 and Cooper Lake, AMX on Sapphire Rapids and later), where Paddle's own
CPU kernels have none. Printed per product of a decoder layer at the given sizes, milliseconds (median of 40 calls
after a warm-up), the weight prepacked once for each kernel: MKL's packed float32 (the step's default), oneDNN
float32, and oneDNN bfloat16 with the activations' cast from float32 (``OneDNNWeight``, what ``rollout_bf16_products``
runs); and the bf16 product's largest difference from the float32 one, relative to its largest value (bf16 keeps 8
significant bits).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import warnings

warnings.filterwarnings("ignore")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--intermediate", type=int, default=4096)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [here, os.path.dirname(os.path.dirname(here))]
    import paddle
    from decode_products import timings  # beside this file

    from paddle_r1.cpu_math import choose_mkl_kernels
    from paddle_r1.generation.onednn import OneDNNWeight, bf16_instructions, bf16_products_run
    from paddle_r1.generation.packed_products import PackedWeight

    choose_mkl_kernels()
    paddle.core.set_num_threads(args.threads)
    if not bf16_products_run():
        print("oneDNN makes no bfloat16 product here (no oneDNN in the wheel, or no AVX-512): nothing to time")
        return
    h, i, rows = args.hidden, args.intermediate, args.rows
    print(f"{rows} rows, hidden {h}, intermediate {i}, {args.threads} thread(s); bf16 instructions: "
          f"{', '.join(bf16_instructions()) or 'none'}")
    print("| product | MKL packed f32 | oneDNN f32 | oneDNN bf16 (x cast) | bf16 / MKL f32 | bf16 difference "
          "| oneDNN's bf16 kernel |")
    print("|---|---|---|---|---|---|---|")
    for name, (inner, outer) in {"qkv + out": (h, 2 * h), "gate/up": (h, 2 * i), "down": (i, h)}.items():
        weight, x = paddle.randn([inner, outer]), paddle.randn([rows, inner])
        mkl, one32, one16 = (PackedWeight(weight, rows), OneDNNWeight(weight, rows, dtype="float32"),
                             OneDNNWeight(weight, rows))
        want = mkl(x)
        gap = float((one16(x) - want).abs().max()) / float(want.abs().max())
        times = [1e3 * statistics.median(timings(lambda: product(x), 40, warmup=3)) for product in (mkl, one32, one16)]
        print(f"| {name} [{rows}, {inner}] x [{inner}, {outer}] | " + " | ".join(f"{t:.3f}" for t in times)
              + f" | {times[2] / times[0]:.2f} | {gap:.1e} | {one16.kernel} |")


if __name__ == "__main__":
    main()
