"""The Qwen2/2.5-VL vision tower's forward with paddle_r1's CPU vision attention (``models/vision_attention.py``)
against paddleformers' (strided views copied by Paddle's strided copy), on this machine.

    python benchmarks/experiments/vision_attention.py [--side 112] [--images 2] [--calls 20] [--rounds 5]

The speed anchor's checkpoint sizes (paddle_r1's tiny Qwen2.5-VL: vision depth 2, hidden 128, 2 heads; or ``--model
DIR``), ``--images`` synthetic images of ``--side`` x ``--side`` pixels, one thread, no gradients. Per round the
median milliseconds of ``--calls`` forwards each way, the two ways alternating; the table holds the medians over the
rounds. The outputs are checked close first.
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
sys.path.insert(0, os.path.dirname(HERE))  # grpo_step.py, one folder up


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", help="a Qwen2/2.5-VL checkpoint folder (default: the anchor's sizes, built here)")
    parser.add_argument("--side", type=int, default=112)
    parser.add_argument("--images", type=int, default=2)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    from paddle_r1.cpu_math import tune_cpu_math
    from paddle_r1.quiet import quiet_libraries

    quiet_libraries("ERROR")
    tune_cpu_math()
    import numpy as np
    import paddle
    from paddleformers.transformers.qwen2_5_vl.modeling import Qwen2_5_VLVisionAttention

    from grpo_step import _make_checkpoint, _write_samples
    from paddle_r1.generation.generator import build_prompt_batch
    from paddle_r1.models.loading import load_model, load_processor
    from paddle_r1.models.vision_attention import FastVisionAttention

    paddle.base.core.set_num_threads(1)
    work = tempfile.mkdtemp()
    model_dir = args.model or _make_checkpoint(os.path.join(work, "model"), None)
    model, processor = load_model(model_dir), load_processor(model_dir)
    model.eval()
    samples = _write_samples(os.path.join(work, "images"), args.images, args.side)
    prompt, _ = build_prompt_batch(samples, processor, "{Question}")
    visual = model.model.visual

    def use(cls):
        for block in visual.blocks:
            block.attn.__class__ = cls

    def forward():
        return visual(prompt.pixel_values, grid_thw=prompt.image_grid_thw)

    ways = {"paddleformers' attention": Qwen2_5_VLVisionAttention, "paddle_r1's": FastVisionAttention}
    with paddle.no_grad():
        outputs = []
        for cls in ways.values():
            use(cls)
            outputs.append(forward().numpy())
        np.testing.assert_allclose(outputs[0], outputs[1], rtol=1e-4, atol=1e-4)
        times = {name: [] for name in ways}
        for _ in range(args.rounds):
            for name, cls in ways.items():
                use(cls)
                forward()
                calls = []
                for _ in range(args.calls):
                    start = time.perf_counter()
                    forward()
                    calls.append(time.perf_counter() - start)
                times[name].append(statistics.median(calls) * 1e3)
    use(FastVisionAttention)
    patches = prompt.pixel_values.shape[0]
    print(f"vision tower forward, {args.images} image(s) of {args.side}x{args.side} ({patches} patches), depth "
          f"{len(visual.blocks)}, 1 thread; ms, median over {args.rounds} rounds of the median of {args.calls} calls")
    old, new = (statistics.median(t) for t in times.values())
    print("| paddleformers' attention | paddle_r1's | ratio |\n|---|---|---|")
    print(f"| {old:.2f} | {new:.2f} | {old / new:.2f}x |")


if __name__ == "__main__":
    main()
