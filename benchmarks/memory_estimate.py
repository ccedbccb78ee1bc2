"""The memory estimate's decoder activations against a measured peak (CPU, float32, eager attention).

    python benchmarks/memory_estimate.py [--sequences 4 --length 1024 --hidden 512 --layers 4] [--recompute]

Builds a tiny Qwen2.5-VL of the given size, runs one training forward + backward of its text decoder over
``sequences`` x ``length`` tokens (with ``--recompute``: each layer recomputed in backward), and prints the rise of the
process's peak resident memory (VmHWM, reset before each run) beside ``paddle_r1.memory.decoder_training_bytes``.
Weights and their gradients exist before the measured pass, so the rise is the pass's own working memory. One pass per
process: Paddle's allocator keeps freed memory, so a second pass would reuse it unseen. On CPU Paddle has
no fused attention kernel, so only eager is measured here; the sdpa rows of the estimate are for GPU kernels.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import warnings

warnings.filterwarnings("ignore")
MIB = 2.0**20


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field))


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def measure(model, sequences: int, length: int) -> float:
    """MiB by which the peak resident memory rises during one forward + backward of the text decoder."""
    import paddle

    decoder = model.model.language_model
    embeds = paddle.randn([sequences, length, model.config.text_config.hidden_size])
    positions = paddle.arange(length).reshape([1, 1, -1]).expand([3, sequences, -1])
    out = decoder(inputs_embeds=embeds[:, :8], position_ids=positions[:, :, :8], use_cache=False, return_dict=True)
    out.last_hidden_state.mean().backward()
    _reset_peak()
    before = _rss_kib("VmRSS")
    hidden = decoder(inputs_embeds=embeds, position_ids=positions, use_cache=False, return_dict=True).last_hidden_state
    hidden.mean().backward()
    return (_rss_kib("VmHWM") - before) / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sequences", type=int, default=4)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--recompute", action="store_true")
    args = parser.parse_args()

    from paddle_r1.memory import ModelShape, decoder_training_bytes
    from paddle_r1.models.loading import load_model
    from paddle_r1.testing.tiny import TinySize, make_tiny_model
    from paddle_r1.cpu_math import tune_cpu_math
    from paddle_r1.quiet import quiet_libraries

    quiet_libraries("ERROR")
    tune_cpu_math()  # what a CPU job does before its first matrix product
    size = TinySize(hidden_size=args.hidden, intermediate_size=3 * args.hidden, num_hidden_layers=args.layers,
                    num_attention_heads=8, num_key_value_heads=2)
    folder = make_tiny_model(os.path.join(tempfile.mkdtemp(), "model"), size=size)
    shape = ModelShape.from_config(json.load(open(os.path.join(folder, "config.json"))))
    model = load_model(folder, gradient_checkpointing=args.recompute, attn_implementation="eager")
    model.train()
    activations, scores = decoder_training_bytes(shape, args.sequences, args.length, 4, "eager", args.recompute)
    print(f"decoder hidden {args.hidden}, {args.layers} layers, {args.sequences} x {args.length} tokens, float32, "
          f"eager, recompute {args.recompute}: estimate {(activations + scores) / MIB:.0f} MiB, "
          f"measured {measure(model, args.sequences, args.length):.0f} MiB")


if __name__ == "__main__":
    main()
