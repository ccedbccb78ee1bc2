"""The RMSNorm's backward on CPU: Paddle's autograd through ``rms_norm``'s broadcast products against the gradient
written out (``models/rms_norm.py::_Float32RMSNorm``, what ``FastRMSNorm`` runs with gradients on, float32), on this
machine.

    python benchmarks/experiments/rms_norm_backward.py [--shape 16,104,256] [--threads 1] [--rounds 5]

One norm's forward alone and forward + backward (a weighted sum of its output as the loss), milliseconds: the
median over ``--rounds`` rounds of the mean of ``--calls`` calls, the two alternating. The default shape is the
speed anchor's training forward (16 completions, their 64 tokens after a 40-token prompt, hidden 256). The values
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
    parser.add_argument("--shape", default="16,104,256")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    from paddle_r1.cpu_math import tune_cpu_math

    tune_cpu_math()
    import numpy as np
    import paddle
    from paddle.base import core

    from paddle_r1.models.rms_norm import _Float32RMSNorm, rms_norm

    core.set_num_threads(args.threads)
    shape = [int(n) for n in args.shape.split(",")]
    paddle.seed(0)
    x0, loss_weights = paddle.randn(shape), paddle.randn(shape)
    weight0 = paddle.rand(shape[-1:]) + 0.5
    epsilon = 1e-6
    ways = {"autograd": lambda x, w: rms_norm(x, w, epsilon),
            "written out": lambda x, w: _Float32RMSNorm.apply(x, w, epsilon)}

    def run(norm, backward=True):
        x, weight = x0.detach(), weight0.detach()
        x.stop_gradient = weight.stop_gradient = False
        out = norm(x, weight)
        if backward:
            (out * loss_weights).sum().backward()
        return out, x.grad, weight.grad

    (out, x_grad, w_grad), (own_out, own_x_grad, own_w_grad) = (run(way) for way in ways.values())
    np.testing.assert_array_equal(out.numpy(), own_out.numpy())
    np.testing.assert_allclose(x_grad.numpy(), own_x_grad.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(w_grad.numpy(), own_w_grad.numpy(), rtol=1e-5, atol=1e-4)

    def mean_ms(fn):
        start = time.perf_counter()
        for _ in range(args.calls):
            fn()
        return (time.perf_counter() - start) / args.calls * 1e3

    print(f"one RMSNorm over {shape}, float32, {args.threads} thread(s); ms (median of {args.rounds} rounds of "
          f"{args.calls} calls)")
    print("| | autograd | written out | autograd / written out |\n|---|---|---|---|")
    for name, backward in (("forward", False), ("forward + backward", True)):
        calls = [lambda way=way: run(way, backward) for way in ways.values()]
        times = [[mean_ms(call) for call in calls] for _ in range(args.rounds)]
        old, new = (statistics.median(t[i] for t in times) for i in range(2))
        print(f"| {name} | {old:.2f} | {new:.2f} | {old / new:.2f}x |")


if __name__ == "__main__":
    main()
