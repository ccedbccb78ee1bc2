"""Rollout speed: paddle_r1's KV-cached decode vs. re-running the prefix (paddleformers' generate).

    python benchmarks/rollout.py [--hidden 256 --layers 4 --prompts 4 --generations 4 --new-tokens 32]

Prints one table: seconds for the same greedy completions, and tokens per second.
"""
from __future__ import annotations

import argparse
import tempfile
import time
import warnings

import paddle

warnings.filterwarnings("ignore")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=32)
    args = parser.parse_args()

    from paddle_r1.quiet import quiet_libraries

    quiet_libraries("ERROR")
    from paddle_r1.data.loader import load_samples
    from paddle_r1.data.synthetic import make_synthetic_rec
    from paddle_r1.models.loading import load_model, load_processor
    from paddle_r1.models.tiny import TinySize, make_tiny_model
    from paddle_r1.generation.generator import build_prompt_batch
    from paddle_r1.generation.rollout import SamplingParams, sample_completions

    work = tempfile.mkdtemp()
    size = TinySize(hidden_size=args.hidden, intermediate_size=4 * args.hidden, num_hidden_layers=args.layers,
                    num_attention_heads=args.hidden // 64 * 2, num_key_value_heads=2)
    model_dir = make_tiny_model(f"{work}/model", size=size)
    model, processor = load_model(model_dir), load_processor(model_dir)
    model.eval()
    samples, _ = load_samples(make_synthetic_rec(f"{work}/data", args.prompts))
    prompt, _ = build_prompt_batch(samples, processor, "{Question}")
    g, n = args.generations, args.new_tokens
    params = SamplingParams(max_new_tokens=n, temperature=0.0)
    no_eos = [-1]  # every row generates all n tokens in both paths

    start = time.perf_counter()
    cached = sample_completions(model, prompt, g, params, no_eos, processor.tokenizer.pad_token_id)
    cached_s = time.perf_counter() - start

    rows = prompt.size * g
    inputs = dict(input_ids=paddle.repeat_interleave(prompt.input_ids, g, 0),
                  attention_mask=paddle.repeat_interleave(prompt.attention_mask, g, 0),
                  pixel_values=prompt.pixel_values, image_grid_thw=prompt.image_grid_thw)
    inputs["pixel_values"] = paddle.concat([p for p in paddle.split(prompt.pixel_values, [
        int(x) for x in prompt.image_grid_thw.prod(axis=1)]) for _ in range(g)])
    inputs["image_grid_thw"] = paddle.repeat_interleave(prompt.image_grid_thw, g, 0)
    start = time.perf_counter()
    with paddle.no_grad():
        generated = model.generate(**inputs, max_new_tokens=n, min_new_tokens=n, decode_strategy="greedy_search")
    generate_s = time.perf_counter() - start
    generated_ids = generated[0] if isinstance(generated, (tuple, list)) else generated
    same = bool((generated_ids[:, -n:] == cached.completion_ids).all())

    print(f"model: hidden {args.hidden}, {args.layers} layers; {rows} sequences x {n} new tokens (greedy)")
    print("| decode | seconds | tokens/s |\n|---|---|---|")
    print(f"| paddle_r1 cached loop | {cached_s:.2f} | {rows * n / cached_s:.0f} |")
    print(f"| paddleformers generate | {generate_s:.2f} | {rows * n / generate_s:.0f} |")
    print(f"speed-up: {generate_s / cached_s:.1f}x; same tokens: {same}")


if __name__ == "__main__":
    main()
