"""Gradients Paddle computes slowly on CPU against the same numbers got another way, on this machine: the RMSNorm's
(``models/rms_norm.py::_Float32RMSNorm``, what ``FastRMSNorm`` runs in float32 with gradients on) and a linear layer's
with a bias (``models/biased_linear.py``, the text attention's qkv product), written out: Paddle's own gradients of a
broadcast product or a bias reduce over the broadcast rows slowly, the written-out ones take those sums as products
with a constant vector; the states before the last position taken with a ``split`` (``logprobs.span``) instead of
a slice, whose gradient fills a zero tensor of the whole size; and the heads moved before the positions by
``models/transposes.py::transposed`` (Paddle's dense transpose kernel, through ``einsum``) instead of a transposed
view that the next kernel copies with Paddle's strided copy.

    python benchmarks/experiments/written_gradients.py [--rows 16 --length 104] [--threads 1] [--rounds 5]

Forward alone and forward + backward (a weighted sum of the output as the loss), milliseconds: the median over
``--rounds`` rounds of the mean of ``--calls`` calls, the two ways alternating. The defaults are the speed anchor's
training forward: 16 completions, their 64 tokens after a 40-token prompt, hidden 256, a qkv product of 512. The values
are checked equal and the gradients close before timing.
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
    parser.add_argument("--length", type=int, default=104)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--qkv", type=int, default=512, help="the qkv product's width")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    from paddle_r1.cpu_math import tune_cpu_math

    tune_cpu_math()
    import numpy as np
    import paddle
    from paddle.base import core

    from paddle_r1.algorithms.logprobs import span
    from paddle_r1.models.biased_linear import biased_linear
    from paddle_r1.models.rms_norm import _Float32RMSNorm, rms_norm
    from paddle_r1.models.transposes import transposed

    core.set_num_threads(args.threads)
    paddle.seed(0)
    x0 = paddle.randn([args.rows, args.length, args.hidden])
    norm_weight = paddle.rand([args.hidden]) + 0.5
    linear = paddle.nn.Linear(args.hidden, args.qkv)
    epsilon = 1e-6
    shape = list(x0.shape)
    heads_first = [args.rows, args.length, args.hidden // 64, 64]
    merged = [args.rows, args.hidden // 64, args.length * 64]
    cases = {
        f"RMSNorm over {shape}": (
            lambda x: rms_norm(x, norm_weight, epsilon), lambda x: _Float32RMSNorm.apply(x, norm_weight, epsilon),
            [norm_weight]),
        f"linear with a bias, {shape} x [{args.hidden}, {args.qkv}]": (
            linear, lambda x: biased_linear(linear, x), [linear.weight, linear.bias]),
        f"all positions but the last of {shape}, slice against split": (
            lambda x: x[:, :-1], lambda x: span(x, 0, x.shape[1] - 1), []),
        f"{shape} as [rows, heads of 64, positions, 64], transposed view against transposed()": (
            lambda x: x.reshape(heads_first).transpose([0, 2, 1, 3]).reshape(merged),
            lambda x: transposed(x.reshape(heads_first), [0, 2, 1, 3]).reshape(merged), []),
    }
    loss_weights = {}  # per output shape: the loss is a weighted sum of the output

    def run(fn, parameters, backward=True):
        x = x0.detach()
        x.stop_gradient = False
        for parameter in parameters:
            parameter.stop_gradient = False
            parameter.clear_gradient(False)
        out = fn(x)
        if not backward:
            return [out]
        if tuple(out.shape) not in loss_weights:
            loss_weights[tuple(out.shape)] = paddle.randn(out.shape)
        weights = loss_weights[tuple(out.shape)]
        (out * weights).sum().backward()
        return [out, x.grad] + [parameter.grad for parameter in parameters]

    def mean_ms(fn):
        start = time.perf_counter()
        for _ in range(args.calls):
            fn()
        return (time.perf_counter() - start) / args.calls * 1e3

    print(f"float32, {args.threads} thread(s); ms (median of {args.rounds} rounds of {args.calls} calls)")
    print("| | Paddle's | the other way | Paddle's / the other way |\n|---|---|---|---|")
    for name, (autograd, written, parameters) in cases.items():
        theirs = [t.numpy() for t in run(autograd, parameters)]  # copied before the next run clears the gradients
        mine = [t.numpy() for t in run(written, parameters)]
        np.testing.assert_array_equal(theirs[0], mine[0])
        for a, b in zip(theirs[1:], mine[1:]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5 * float(np.abs(a).max()))
        for label, backward in (("forward", False), ("forward + backward", True)):
            calls = [lambda fn=fn: run(fn, parameters, backward) for fn in (autograd, written)]
            times = [[mean_ms(call) for call in calls] for _ in range(args.rounds)]
            old, new = (statistics.median(t[i] for t in times) for i in range(2))
            print(f"| {name}: {label} | {old:.2f} | {new:.2f} | {old / new:.2f}x |")


if __name__ == "__main__":
    main()
