"""The rollout's one-token decode step against its floors, on this machine.

    python benchmarks/experiments/decode_floor.py --hf PY [--rows 16] [--new-tokens 64] [--steps 200]
    python benchmarks/experiments/decode_floor.py [--model FOLDER] [--threads 1]

The step is ``OneTokenDecoder.step`` (``paddle_r1/generation/decoder.py``) over the speed anchor's checkpoint (with
``--hf PY``: the one ``trl_anchor/make_hf_tiny.py`` writes with transformers, hidden 256, 4 layers, vocab 4096, as
``rollout.py --hf`` and ``grpo_step.py --trl`` use; without it paddle_r1's tiny model at those sizes, whose vocab is
its tokenizer's 507; ``--model`` loads another),
2 prompts with one 112x112 image each, their cache repeated to ``--rows`` rows, room for ``--new-tokens``. Printed:

- the step's kernels, counted and timed by Paddle's profiler over 10 steps (operator events, by name: count per
  step and share of the operators' time; the profiler's own cost inflates the small kernels' share);
- measured: the median and the minimum milliseconds of a step over ``--steps`` steps (one token for every row);
- three floors: (a) streaming the decoder's weights once (their bytes / the memory bandwidth of a 256 MiB numpy
  copy, bytes read + written per second); (b) the kernel count x Paddle's eager cost per kernel (the median of a
  [16, 256] add, timed alone: the dispatch with almost no arithmetic); (c) the step's matrix products' FLOPs / the
  GFLOP/s of one [1024, 1024] x [1024, 1024] product (this core's sustained peak); and (d) the step's matrix
  products alone, timed in the step's order with the step's own weights and shapes; and each kind of product
  alone (all layers' qkv, all layers' q K, ...), its milliseconds per step.

Medians and minimums over many repetitions: the machine may be shared, and the minimum is the least disturbed.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections import Counter

import numpy as np

warnings.filterwarnings("ignore")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))  # grpo_step.py, one folder up
from decode_products import timings  # noqa: E402  (beside this file)


def memory_bandwidth(mib: int = 256) -> float:
    """Bytes per second a large numpy copy moves (read + written), the best of 5."""
    source = np.ones(mib << 20, dtype=np.uint8)
    target = np.empty_like(source)
    return 2 * source.nbytes / min(timings(lambda: np.copyto(target, source), 10, warmup=1))


def seconds_per_kernel(paddle) -> float:
    """Paddle eager's cost of one small kernel: the median of a [16, 256] add (4 K elements: dispatch dominates)."""
    x = paddle.ones([16, 256])
    return statistics.median(timings(lambda: x + x, 5000, warmup=100))


def peak_flops(paddle) -> float:
    """FLOP/s of a [1024, 1024] x [1024, 1024] float32 product on this process's threads."""
    a, b = paddle.randn([1024, 1024]), paddle.randn([1024, 1024])
    return 2 * 1024 ** 3 / min(timings(lambda: paddle.matmul(a, b), 20, warmup=3))


def count_kernels(paddle, step, steps: int = 10) -> tuple[Counter, Counter]:
    """Operator events per step by name, and their nanoseconds per step, from Paddle's profiler (CPU), over
    ``steps`` calls of ``step`` (the caller's cache rewind, one ``set_value`` every ``--new-tokens`` steps, is not
    counted)."""
    import paddle.profiler as profiler
    from paddle.base.core import TracerEventType

    counts: Counter = Counter()
    nanoseconds: Counter = Counter()

    def walk(node):
        for child in node.children_node:
            if child.type == TracerEventType.Operator and not child.name.startswith("set_value"):
                counts[child.name.replace(" dygraph", "")] += 1
                nanoseconds[child.name.replace(" dygraph", "")] += child.end_ns - child.start_ns
            else:
                walk(child)

    recorder = profiler.Profiler(targets=[profiler.ProfilerTarget.CPU], on_trace_ready=lambda _: None)
    recorder.start()
    for _ in range(steps):
        step()
    recorder.stop()
    for root in recorder.profiler_result.get_data().values():
        walk(root)
    return (Counter({name: count / steps for name, count in counts.items()}),
            Counter({name: ns / steps for name, ns in nanoseconds.items()}))


def step_products(paddle, decoder, rows: int):
    """The step's matrix products alone, in its order, with its weights and shapes: qkv, rotation, q K, p V, out,
    gate/up, down per layer, then the LM head. Returns (a function running them once, their FLOPs, their count, and
    per kind of product a function running that kind's products of all layers)."""
    from paddle_r1.models.text_attention import half_rotation

    groups, head_dim, kv_heads = decoder.heads // decoder.kv_heads, decoder.head_dim, decoder.kv_heads
    capacity = decoder.cache.mask.shape[-1]
    hidden = decoder.layers[0].input_norm.shape[0]
    x = paddle.randn([rows, hidden])
    mixed = paddle.randn([rows, kv_heads, groups + 2, head_dim])
    query, probs = paddle.randn([rows, kv_heads, groups, head_dim]), paddle.randn([rows, kv_heads, groups, capacity])
    attended = paddle.randn([rows, decoder.heads * head_dim])
    rotation = half_rotation(head_dim, x.dtype)
    lm_head = decoder.model.lm_head.weight  # [vocab, hidden], multiplied transposed
    products = []  # (function, flops)
    kinds = ["qkv", "rotation", "q K (cache)", "p V (cache)", "out", "gate/up", "down"]
    for index, layer in enumerate(decoder.layers):
        keys, values = decoder.cache.keys[index], decoder.cache.values[index]
        gate_up_width = sum(projection(x).shape[-1] for projection in layer.gate_up)  # fused, or gate and up
        act = paddle.randn([rows, gate_up_width // 2])
        products += [(lambda layer=layer: [projection(x) for projection in layer.qkv],
                      2 * rows * hidden * mixed.shape[2] * head_dim * kv_heads),
                     (lambda: paddle.matmul(mixed, rotation), 2 * mixed.numel().item() * head_dim),
                     (lambda keys=keys: paddle.matmul(query, keys), 2 * query.numel().item() * capacity),
                     (lambda values=values: paddle.matmul(probs, values), 2 * probs.numel().item() * head_dim),
                     (lambda layer=layer: layer.out(attended), 2 * rows * attended.shape[-1] * hidden),
                     (lambda layer=layer: [projection(x) for projection in layer.gate_up],
                      2 * rows * hidden * gate_up_width),
                     (lambda layer=layer, act=act: layer.down(act), 2 * rows * act.shape[-1] * hidden)]
    head = decoder.head or (lambda h: paddle.matmul(h, lm_head, transpose_y=True))  # packed on CPU, as the step's
    products.append((lambda: head(x), 2 * rows * hidden * lm_head.shape[0]))

    def runner(chosen):
        def run():
            for product, _ in chosen:
                product()
        return run
    by_kind = {kind: runner(products[i:-1:len(kinds)]) for i, kind in enumerate(kinds)}
    by_kind["LM head"] = runner(products[-1:])
    return runner(products), sum(flops for _, flops in products), len(products), by_kind


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hf", metavar="PY", help="a torch + transformers interpreter: the anchor's checkpoint")
    parser.add_argument("--model", help="a Qwen2/2.5-VL checkpoint folder (default: the speed anchor's sizes)")
    parser.add_argument("--rows", type=int, default=16, help="rows decoded together (default 16: 2 prompts x 8)")
    parser.add_argument("--new-tokens", type=int, default=64, help="cache room after the prompt (default 64)")
    parser.add_argument("--steps", type=int, default=200, help="timed steps (default 200)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    from paddle_r1.cpu_math import tune_cpu_math
    from paddle_r1.quiet import quiet_libraries

    quiet_libraries("ERROR")
    tune_cpu_math()
    import paddle
    from paddle.base import core

    core.set_num_threads(args.threads)
    from grpo_step import _make_checkpoint, _write_samples
    from paddle_r1.generation.decoder import OneTokenDecoder
    from paddle_r1.generation.generator import build_prompt_batch
    from paddle_r1.generation.rollout import prefill
    from paddle_r1.models.forward import RepeatedPrompt, repeat_rows, text_decoder
    from paddle_r1.models.loading import load_model, load_processor

    work = tempfile.mkdtemp()
    model_dir = args.model or _make_checkpoint(os.path.join(work, "model"), args.hf)
    model, processor = load_model(model_dir), load_processor(model_dir)
    model.eval()
    prompt, _ = build_prompt_batch(_write_samples(os.path.join(work, "images"), 2), processor, "{Question}")
    g = args.rows // prompt.size
    with paddle.no_grad():
        cache, logits, next_position = prefill(model, prompt)
        decoder = OneTokenDecoder(model, RepeatedPrompt(cache, g), repeat_rows(prompt.attention_mask, g),
                                  repeat_rows(next_position, g), args.new_tokens)
        token = repeat_rows(logits, g).argmax(-1)
        rows = token.shape[0]

        # a decoder without a growing cache has no host count (length): rewinding then restores the slot alone
        start_slot, start_length = decoder.cache.slot.clone(), getattr(decoder.cache, "length", None)

        def steps(count: int) -> list[float]:
            """Seconds of ``count`` steps, each timed alone; the cache is rewound every ``--new-tokens`` steps (the
            mask's opened slots stay open: the same shapes and kernels)."""
            seconds = []
            while len(seconds) < count:
                for _ in range(min(args.new_tokens, count - len(seconds))):
                    start = time.perf_counter()
                    decoder.step(token)
                    seconds.append(time.perf_counter() - start)
                decoder.cache.slot.set_value(start_slot)
                if start_length is not None:
                    decoder.cache.length = start_length
            return seconds

        steps(10)  # warm-up
        kernels, kernel_ns = count_kernels(paddle, lambda: steps(1))
        step_s = steps(args.steps)
        products, product_flops, product_count, by_kind = step_products(paddle, decoder, rows)
        products_s = timings(products, args.steps, warmup=5)
        kind_s = {kind: statistics.median(timings(run, args.steps, warmup=5)) for kind, run in by_kind.items()}

    text = text_decoder(model)
    weight_bytes = sum(p.numel().item() * p.element_size() for p in text.parameters()
                       if p is not text.embed_tokens.weight)
    weight_bytes += model.lm_head.weight.numel().item() * model.lm_head.weight.element_size()
    bandwidth, per_kernel, flops = memory_bandwidth(), seconds_per_kernel(paddle), peak_flops(paddle)
    kernel_count = sum(kernels.values())
    measured, best = statistics.median(step_s), min(step_s)

    print(f"one-token step, {rows} rows, cache {decoder.cache.mask.shape[-1]} slots, {args.threads} thread(s); "
          f"decoder weights read per step (layers + norm + LM head, not the embedding): {weight_bytes / 2**20:.1f} MiB")
    total_ns = sum(kernel_ns.values())
    print(f"kernels per step: {kernel_count:.0f}; by name, count per step and share of the operators' "
          f"{total_ns / 1e6:.2f} ms (profiled): " + ", ".join(f"{name} {kernels[name]:g} {ns / total_ns:.0%}"
                                                            for name, ns in kernel_ns.most_common()))
    print(f"machine: memory bandwidth {bandwidth / 1e9:.1f} GB/s (numpy copy, read + write); one small kernel "
          f"{per_kernel * 1e6:.2f} us (a [16, 256] add); peak {flops / 1e9:.0f} GFLOP/s ([1024]^3 product)")
    print("| | ms per step | measured step / this |\n|---|---|---|")
    print(f"| measured step (median; minimum) | {measured * 1e3:.3f}; {best * 1e3:.3f} | 1.00 |")
    rows_out = [("(a) weights streamed once: bytes / bandwidth", weight_bytes / bandwidth),
                (f"(b) {kernel_count:.0f} kernels x {per_kernel * 1e6:.2f} us", kernel_count * per_kernel),
                (f"(c) {product_flops / 1e6:.0f} MFLOP of products / peak", product_flops / flops),
                (f"(d) the step's {product_count} products alone (median; minimum {min(products_s) * 1e3:.3f})",
                 statistics.median(products_s))]
    for name, seconds in rows_out:
        print(f"| {name} | {seconds * 1e3:.3f} | {measured / seconds:.2f} |")
    print("the products by kind, ms per step (median): " + ", ".join(f"{kind} {seconds * 1e3:.3f}"
                                                                     for kind, seconds in kind_s.items()))
    print(f"tokens/s of the step: {rows / measured:.0f} (median), {rows / best:.0f} (minimum)")


if __name__ == "__main__":
    main()
