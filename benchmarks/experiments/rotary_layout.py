"""Where the text attention rotates its query and key: apart, after moving the heads first (what paddle_r1 did), or
the whole qkv product at once, in the layout it comes in (``FastTextAttention`` now), on this machine.

    python benchmarks/experiments/rotary_layout.py [--rows 16 --length 64] [--kv-heads 2 --groups 2] [--threads 1]

One layer's step from the qkv product [rows, length, kv_heads * (groups + 2) * head_dim] to the rotated query
[rows, heads, length, head_dim] and key and value [rows, kv_heads, length, head_dim], forward alone (no gradient)
and forward + backward; defaults are the speed anchor's training forward (16 completions of 64 tokens, 4 query
heads over 2 key/value heads of 64). "apart": split, heads first (strided views), each of query and key rotated
with the [rows, 1, length, head_dim] tables expanded over its heads. "whole product": the product rotated with
tables laid out over its heads once (``qkv_rotation_tables``; a forward makes them once for all its layers, so
their cost is printed apart), then split. Both give the same numbers, checked before timing. Milliseconds: the
median over ``--rounds`` rounds of the mean of ``--calls`` calls, the two alternating.
"""
from __future__ import annotations

import argparse
import statistics
import time
import warnings

warnings.filterwarnings("ignore")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--groups", type=int, default=2, help="query heads per key/value head")
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    from paddle_r1.cpu_math import tune_cpu_math

    tune_cpu_math()
    import paddle
    from paddle.base import core

    from paddle_r1.models.text_attention import half_rotation, qkv_rotation_tables, rotate

    core.set_num_threads(args.threads)
    rows, length, kv, groups, dim = args.rows, args.length, args.kv_heads, args.groups, args.head_dim
    heads = kv * groups
    product = paddle.randn([rows, length, kv * (groups + 2) * dim])
    cos, sin = paddle.randn([rows, 1, length, dim]), paddle.randn([rows, 1, length, dim])
    laid_out = qkv_rotation_tables(cos, sin, kv, groups)

    def apart(mixed):
        query, key, value = paddle.split(mixed.reshape([rows, length, kv, (groups + 2) * dim]),
                                         [groups * dim, dim, dim], axis=-1)
        query = query.reshape([rows, length, heads, dim]).transpose([0, 2, 1, 3])
        key, value = key.transpose([0, 2, 1, 3]), value.transpose([0, 2, 1, 3])

        def rotated(x):
            c, s = cos.expand(x.shape), sin.expand(x.shape)
            return x * c + paddle.matmul(x, half_rotation(dim, x.dtype)) * s
        return rotated(query), rotated(key), value

    def whole(mixed):
        mixed = rotate(mixed.reshape([rows, length, kv * (groups + 2), dim]), *laid_out)
        query, key, value = paddle.split(mixed.reshape([rows, length, kv, groups + 2, dim]), [groups, 1, 1], axis=3)
        query = query.reshape([rows, length, heads, dim]).transpose([0, 2, 1, 3])
        return query, key.squeeze(3).transpose([0, 2, 1, 3]), value.squeeze(3).transpose([0, 2, 1, 3])

    def with_gradient(fn):
        mixed = product.detach()
        mixed.stop_gradient = False
        query, key, value = fn(mixed)
        (query.sum() + (key * 2).sum() + (value * 3).sum()).backward()
        return query, key, value, mixed.grad

    for a, b in zip(with_gradient(apart), with_gradient(whole)):
        if not bool(paddle.equal_all(a, b)):
            raise SystemExit("the two layouts differ")

    def mean_ms(fn):
        start = time.perf_counter()
        for _ in range(args.calls):
            fn()
        return (time.perf_counter() - start) / args.calls * 1e3

    def forward_only(fn):
        def run():
            with paddle.no_grad():
                fn(product)
        return run

    cases = {"forward": (forward_only(apart), forward_only(whole)),
             "forward + backward": (lambda: with_gradient(apart), lambda: with_gradient(whole))}
    print(f"{rows} rows x {length} tokens, {heads} query heads over {kv} key/value heads of {dim}, "
          f"{args.threads} thread(s); ms per layer (median of {args.rounds} rounds of {args.calls} calls)")
    print("| | apart | whole product | apart / whole |\n|---|---|---|---|")
    for name, (old, new) in cases.items():
        old(), new()
        times = [(mean_ms(old), mean_ms(new)) for _ in range(args.rounds)]
        a, b = statistics.median(t[0] for t in times), statistics.median(t[1] for t in times)
        print(f"| {name} | {a:.2f} | {b:.2f} | {a / b:.2f}x |")
    tables = statistics.median(mean_ms(lambda: qkv_rotation_tables(cos, sin, kv, groups)) for _ in range(args.rounds))
    print(f"laying the tables out (once per forward, for every layer): {tables:.2f} ms")


if __name__ == "__main__":
    main()
