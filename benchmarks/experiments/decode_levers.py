"""The levers weighed for the rollout's decode step and the log-prob attention, each against what it
replaced, on this machine.

    python benchmarks/experiments/decode_levers.py [--rounds 3] [--length 1024] [--no-cache]

Kernels at the decode step's shapes (16 rows of one token, hidden 256, 4 heads over 2 KV heads of 64, a cache of 113
slots, vocab 4096), microseconds per call (median of 2,000 calls, warm caches): RMSNorm with the residual add before it
as one ``fused_rms_norm`` against ``rms_norm(x + residual)``; ``swiglu`` against ``silu(gate) * up``; writing one slot
of the transposed key cache with a device-side slot (setitem: ``index_elementwise_put_with_tensor``) against a host
slice (``set_value``) and ``put_along_axis_``; the inverse-CDF draw over the vocabulary as one ``searchsorted`` against
a compare, a cast and a sum. Then the masked scores of one block of 256 queries as a scaled query, a product and an add
against one ``baddbmm``, seconds; one layer's attention forward and backward over ``--length`` completion tokens after a
49-token prompt (16 rows), the whole [L, S] square against ``grouped_eager_attention``'s query blocks, seconds (one call
after a warm-up); and, unless ``--no-cache``, ``--length - 1`` decode steps of ``OneTokenDecoder`` (paddle_r1's tiny
model at the speed anchor's sizes) over a cache allocated for all of them at once against one growing by
``kv_cache.GROWTH`` slots, seconds (one call after a warm-up). Each pair alternates ``--rounds`` times; the table gives
the medians.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings

warnings.filterwarnings("ignore")
HERE = os.path.dirname(os.path.abspath(__file__))


def kernel_pairs(paddle):
    """(lever, new name, new call, old name, old call) at the decode step's shapes."""
    from paddle_r1.generation.decoder import _composed_rms_norm, _fused_rms_norm, fused_rms_norm_runs

    hidden, residual, weight = paddle.randn([16, 256]), paddle.randn([16, 256]), paddle.rand([256]) + 0.5
    gate_up = paddle.randn([16, 2048])
    keys, slot, key = paddle.zeros([16, 2, 64, 113]), paddle.full([1], 60, dtype="int64"), paddle.randn([16, 2, 64, 1])
    index = slot.reshape([1, 1, 1, 1]).expand(key.shape)
    cdf = paddle.cumsum(paddle.nn.functional.softmax(paddle.randn([16, 4096]) * 3, axis=-1), axis=-1)
    uniform = paddle.rand([16])

    def write_setitem():
        keys[:, :, :, slot] = key

    def write_set_value():
        keys[:, :, :, 60:61] = key

    def draw_compare_sum():
        return (cdf < (uniform * cdf[:, -1]).unsqueeze(-1)).astype("int64").sum(axis=-1)

    def draw_searchsorted():
        return paddle.searchsorted(cdf, uniform.unsqueeze(-1) * cdf[:, -1:]).squeeze(-1)

    def silu_times_up():
        gate, up = gate_up.chunk(2, axis=-1)
        return paddle.nn.functional.silu(gate) * up

    norms = [("RMSNorm + residual add, [16, 256]", "fused_rms_norm",
              lambda: _fused_rms_norm(hidden, weight, 1e-6, residual), "rms_norm(x + r)",
              lambda: _composed_rms_norm(hidden, weight, 1e-6, residual))]
    if not fused_rms_norm_runs(hidden.place):  # its CPU kernel is AVX-512 code: an illegal instruction here
        print("fused_rms_norm left out: this CPU has no AVX-512, which its CPU kernel needs")
        norms = []
    return norms + [
        ("gate/up activation, [16, 2048]", "chunk, silu, multiply", silu_times_up, "swiglu",
         lambda: paddle.nn.functional.swiglu(gate_up)),
        ("write a key slot, [16, 2, 64, 113]", "setitem (device slot)", write_setitem, "set_value (host slice)",
         write_set_value),
        ("write a key slot, [16, 2, 64, 113]", "setitem (device slot)", write_setitem, "put_along_axis_",
         lambda: keys.put_along_axis_(index, key, axis=3)),
        ("inverse-CDF draw, [16, 4096]", "searchsorted", draw_searchsorted, "compare, cast, sum", draw_compare_sum),
    ]


def attention_pair(paddle, length: int):
    """One layer's attention forward and backward: query blocks against the whole square."""
    import numpy as np

    from paddle_r1.models.text_attention import grouped_attention, grouped_eager_attention

    prompt = 49
    keys = prompt + length
    allowed = np.tril(np.ones([length, keys], bool), prompt)
    mask = paddle.to_tensor(np.where(allowed, 0.0, -np.inf).astype("float32")[None, None].repeat(16, 0))
    inputs = [paddle.randn(shape) for shape in ([16, 4, length, 64], [16, 2, keys, 64], [16, 2, keys, 64])]

    def forward_backward(attention):
        q, k, v = (paddle.to_tensor(x, stop_gradient=False) for x in inputs)
        attention(q, k, v, mask, 0.125).sum().backward()

    return (f"one layer's attention forward + backward, 16 rows x {length} tokens after 49 (s)", "query blocks",
            lambda: forward_backward(grouped_eager_attention), "the whole square",
            lambda: forward_backward(grouped_attention))


def scores_pair(paddle, length: int):
    """The masked, scaled scores of one block of 256 queries over every key: ``grouped_attention``'s scaled query,
    product and add against one ``baddbmm`` (kept until blocks came from the heap: ``cpu_math.py``)."""
    keys = 49 + length
    query, key = paddle.randn([32, 2 * 256, 64]), paddle.randn([32, keys, 64])
    key_t = key.transpose([0, 2, 1])
    mask = paddle.randn([32, 2 * 256, keys])
    return (f"masked scores of 256 queries x {keys} keys, 16 rows x 4 heads (s)", "scaled query, matmul, add",
            lambda: paddle.matmul(query * 0.125, key, transpose_y=True) + mask, "baddbmm",
            lambda: paddle.baddbmm(mask, query, key_t, beta=1.0, alpha=0.125))


def cache_pair(paddle, length: int, work: str):
    """``length - 1`` decode steps: a growing cache against one allocated for every step."""
    from grpo_step import _make_checkpoint, _write_samples

    from paddle_r1.generation import kv_cache
    from paddle_r1.generation.decoder import OneTokenDecoder
    from paddle_r1.generation.generator import build_prompt_batch
    from paddle_r1.generation.rollout import prefill
    from paddle_r1.models.forward import RepeatedPrompt, repeat_rows
    from paddle_r1.models.loading import load_model, load_processor

    model_dir = _make_checkpoint(os.path.join(work, "model"), None)
    model, processor = load_model(model_dir), load_processor(model_dir)
    model.eval()
    prompt, _ = build_prompt_batch(_write_samples(os.path.join(work, "images"), 2), processor, "{Question}")
    with paddle.no_grad():
        cache, logits, next_position = prefill(model, prompt)
    token = repeat_rows(logits, 8).argmax(-1)
    growth = kv_cache.GROWTH

    def decode(step_growth: int):
        kv_cache.GROWTH = step_growth
        try:
            with paddle.no_grad():
                decoder = OneTokenDecoder(model, RepeatedPrompt(cache, 8), repeat_rows(prompt.attention_mask, 8),
                                          repeat_rows(next_position, 8), length)
                for _ in range(length - 1):
                    decoder.step(token)
        finally:
            kv_cache.GROWTH = growth

    return (f"{length - 1} decode steps, 16 rows (s)", f"cache growing by {growth}", lambda: decode(growth),
            "cache for every step at once", lambda: decode(length))


def _seconds(fn) -> float:
    """One call after a warm-up call."""
    fn()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3, help="alternations of each pair (default 3)")
    parser.add_argument("--length", type=int, default=1024, help="completion tokens of the long pairs (default 1024)")
    parser.add_argument("--no-cache", dest="cache", action="store_false", help="skip the decode-cache pair")
    args = parser.parse_args()

    from paddle_r1.cpu_math import tune_cpu_math
    from paddle_r1.quiet import quiet_libraries

    quiet_libraries("ERROR")
    tune_cpu_math()
    import paddle
    from paddle.base import core

    core.set_num_threads(1)
    sys.path.insert(0, HERE)
    sys.path.insert(1, os.path.dirname(HERE))  # grpo_step.py, one folder up
    from decode_products import _microseconds

    rows = []
    for lever, new_name, new, old_name, old in kernel_pairs(paddle):
        times = [(_microseconds(new), _microseconds(old)) for _ in range(args.rounds)]
        rows.append((lever + " (us)", new_name, old_name, times))
    pairs = [scores_pair(paddle, args.length), attention_pair(paddle, args.length)]
    if args.cache:
        pairs.append(cache_pair(paddle, args.length, tempfile.mkdtemp()))
    for lever, new_name, new, old_name, old in pairs:
        rows.append((lever, new_name, old_name, [(_seconds(new), _seconds(old)) for _ in range(args.rounds)]))

    print(f"one thread; each pair alternating {args.rounds} times, medians (the old / new ratio per round in brackets)")
    print("| | kept | time | replaced | time | old / new |\n|---|---|---|---|---|---|")
    for lever, new_name, old_name, times in rows:
        ratios = [old / new for new, old in times]
        print(f"| {lever} | {new_name} | {statistics.median(t[0] for t in times):.3g} | {old_name} | "
              f"{statistics.median(t[1] for t in times):.3g} | {statistics.median(ratios):.2f}x "
              f"({', '.join(f'{r:.2f}' for r in ratios)}) |")


if __name__ == "__main__":
    main()
