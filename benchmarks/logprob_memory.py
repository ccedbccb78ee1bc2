"""Peak memory of the chunked log-probs at Qwen's vocabulary, forward and backward, on CPU.

    python benchmarks/logprob_memory.py [--rows 8 --tokens 1024 --hidden 64 --vocab 151936 --chunks 128 512]

Runs ``paddle_r1.algorithms.logprobs.chunked_token_logprobs`` over rows x tokens hidden states (gradients on, as in the
policy's forward) and prints the rise of Paddle's host allocator peak (``host_memory_stat_peak_value``) in the
forward and in the backward, beside one chunk's float32 logits and the full [rows, tokens, vocab] logits.
A bounded peak stays a small multiple of one chunk's logits whatever the number of tokens.
"""
from __future__ import annotations

import argparse
import warnings

warnings.filterwarnings("ignore")
MIB = 2.0**20


def _allocated(stat) -> float:
    return stat("Allocated", 0) / MIB


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--chunks", type=int, nargs="+", default=[128, 512])
    args = parser.parse_args()

    import paddle
    from paddle.base import core

    from paddle_r1.cpu_math import tune_cpu_math
    from paddle_r1.algorithms.logprobs import chunked_token_logprobs

    tune_cpu_math()  # as a CPU job makes it (glibc's heap settings shape the peaks measured here)
    paddle.seed(0)
    head = paddle.nn.Linear(args.hidden, args.vocab, bias_attr=False)
    hidden = paddle.randn([args.rows, args.tokens, args.hidden])
    hidden.stop_gradient = False
    targets = paddle.randint(0, args.vocab, [args.rows, args.tokens])
    full = args.rows * args.tokens * args.vocab * 4 / MIB
    print(f"{args.rows} x {args.tokens} tokens, vocab {args.vocab}: full float32 logits {full:.0f} MiB")
    print("| chunk | one chunk's logits (MiB) | forward peak (MiB) | backward peak (MiB) |\n|---|---|---|---|")
    for chunk in args.chunks:
        core.host_memory_stat_reset_peak_value("Allocated", 0)
        base = _allocated(core.host_memory_stat_current_value)
        logp = chunked_token_logprobs(head, hidden, targets, chunk)
        forward = _allocated(core.host_memory_stat_peak_value) - base
        core.host_memory_stat_reset_peak_value("Allocated", 0)
        logp.sum().backward()
        backward = _allocated(core.host_memory_stat_peak_value) - base
        print(f"| {chunk} | {chunk * args.vocab * 4 / MIB:.0f} | +{forward:.0f} | +{backward:.0f} |")
        head.clear_gradients()
        hidden.clear_gradient()


if __name__ == "__main__":
    main()
