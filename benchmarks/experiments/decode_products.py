"""The matrix products of one decode step in the layouts weighed for ``generation/decoder.py`` (whose weights are now
packed for MKL on CPU: ``packed_products.py``; the keys are still cached transposed), timed on this machine.

    python benchmarks/experiments/decode_products.py [--model FOLDER] [--rows 16] [--cache 106]

Two tables. The first times each product at the rollout's shapes (16 rows of one token: the speed anchor's 2 prompts
x 8 completions) in both layouts: the weight as stored, [in, out], against a copy stored [out, in] multiplied with
``transpose_y``; and q @ K over keys cached [.., keys, head_dim] (``transpose_y``) against keys cached transposed.
Each is the median of 2,000 calls on the same inputs (warm caches). The second times every product inside one real
greedy rollout of ``--model`` (paddle_r1's tiny model at the anchor's sizes unless given): there the weights do not
stay in cache between tokens, so each product costs more than in the first table.
"""
from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import tempfile
import time
import warnings

import numpy as np
import paddle

warnings.filterwarnings("ignore")


def timings(fn, calls: int, warmup: int) -> list[float]:
    """Seconds of each of ``calls`` calls of ``fn`` after ``warmup`` untimed ones (the speed benchmarks' timer)."""
    for _ in range(warmup):
        fn()
    seconds = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - start)
    return seconds


def _microseconds(fn, calls: int = 2000) -> float:
    return statistics.median(timings(fn, calls, warmup=20)) * 1e6


def layout_table(text_config, rows: int, cache: int) -> list[str]:
    hidden, heads = text_config.hidden_size, text_config.num_attention_heads
    kv_heads, head_dim = text_config.num_key_value_heads, text_config.hidden_size // heads
    projections = {"qkv": (hidden, (heads + 2 * kv_heads) * head_dim), "o_proj": (heads * head_dim, hidden),
                   "gate/up": (hidden, 2 * text_config.intermediate_size),
                   "down": (text_config.intermediate_size, hidden)}
    lines = [f"| product ({rows} rows) | stored [in, out], us | stored [out, in], us | [in, out] / [out, in] |",
             "|---|---|---|---|"]
    with paddle.no_grad():
        for name, (fan_in, fan_out) in projections.items():
            x = paddle.randn([rows, 1, fan_in])
            weight = paddle.randn([fan_in, fan_out])
            transposed = weight.T.contiguous()
            plain = _microseconds(lambda: paddle.matmul(x, weight))
            flipped = _microseconds(lambda: paddle.matmul(x, transposed, transpose_y=True))
            lines.append(f"| {name} {fan_in}->{fan_out} | {plain:.0f} | {flipped:.0f} | {plain / flipped:.2f} |")
        groups = heads // kv_heads
        query = paddle.randn([rows, kv_heads, groups, head_dim])
        keys = paddle.randn([rows, kv_heads, cache, head_dim])
        keys_t = keys.transpose([0, 1, 3, 2]).contiguous()
        plain = _microseconds(lambda: paddle.matmul(query, keys, transpose_y=True))
        flipped = _microseconds(lambda: paddle.matmul(query, keys_t))
        lines.append(f"| q @ K, {cache} cached keys (keys as cached: [.., keys, dim] / [.., dim, keys]) "
                     f"| {plain:.0f} | {flipped:.0f} | {plain / flipped:.2f} |")
    return lines


def rollout_table(model, processor, rows_per_prompt: int, new_tokens: int) -> list[str]:
    """Every ``paddle.matmul`` of one greedy rollout, grouped by operand shapes."""
    from paddle_r1.data.loader import load_samples
    from paddle_r1.synthetic import make_synthetic_rec
    from paddle_r1.generation.generator import build_prompt_batch
    from paddle_r1.generation.rollout import SamplingParams, sample_completions

    samples, _ = load_samples(make_synthetic_rec(tempfile.mkdtemp(), 2))
    prompt, _ = build_prompt_batch(samples, processor, "{Question}")
    params = SamplingParams(max_new_tokens=new_tokens, temperature=0.0)
    sample_completions(model, prompt, rows_per_prompt, params, [-1], 0)  # warm-up
    seconds, calls = collections.defaultdict(float), collections.Counter()
    matmul = paddle.matmul

    def timed(x, y, transpose_x=False, transpose_y=False, name=None):
        start = time.perf_counter()
        out = matmul(x, y, transpose_x, transpose_y)
        key = (tuple(x.shape), tuple(y.shape), transpose_y)
        seconds[key] += time.perf_counter() - start
        calls[key] += 1
        return out

    paddle.matmul = timed
    try:
        start = time.perf_counter()
        sample_completions(model, prompt, rows_per_prompt, params, [-1], 0)
        total = time.perf_counter() - start
    finally:
        paddle.matmul = matmul
    lines = [f"rollout: {total:.2f} s, of which matrix products {sum(seconds.values()):.2f} s",
             "| x | y | transpose_y | calls | us each | ms in all |", "|---|---|---|---|---|---|"]
    for key in sorted(seconds, key=seconds.get, reverse=True)[:10]:
        lines.append(f"| {list(key[0])} | {list(key[1])} | {key[2]} | {calls[key]} | "
                     f"{seconds[key] / calls[key] * 1e6:.0f} | {seconds[key] * 1e3:.0f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", help="a checkpoint folder (default: paddle_r1's tiny model at the anchor's sizes)")
    parser.add_argument("--rows", type=int, default=16, help="decode rows (prompts x completions)")
    parser.add_argument("--cache", type=int, default=106, help="cached keys for the q @ K row")
    parser.add_argument("--new-tokens", type=int, default=64)
    args = parser.parse_args()

    from paddle_r1.cpu_math import tune_cpu_math
    from paddle_r1.quiet import quiet_libraries

    quiet_libraries("ERROR")
    tune_cpu_math()  # what a CPU job does before its first matrix product
    from paddle_r1.models.loading import load_model, load_processor
    from paddle_r1.testing.tiny import make_tiny_model

    sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # anchor.py, one folder up
    from anchor import ANCHOR_SIZE

    model_dir = args.model or make_tiny_model(tempfile.mkdtemp(), size=ANCHOR_SIZE)
    model, processor = load_model(model_dir), load_processor(model_dir)
    np.random.seed(0)
    print("\n".join(layout_table(model.model.language_model.config, args.rows, args.cache)))
    print()
    print("\n".join(rollout_table(model, processor, args.rows // 2, args.new_tokens)))


if __name__ == "__main__":
    main()
