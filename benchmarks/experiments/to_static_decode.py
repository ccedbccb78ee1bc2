"""Why the rollout's decode step is not compiled with ``paddle.jit.to_static`` on CPU (docs/performance.md).

    python benchmarks/experiments/to_static_decode.py [--model FOLDER]

Three measurements on this machine's Paddle:
1. a 160-op function (40 x matmul 16x256 @ 256x256, silu, scale, add), eager against ``to_static(full_graph=True)``;
2. a decode step through the model's own layers (one token for 16 rows over 160 cached positions, a function of
   tensors only) eager against ``to_static`` with its default symbolic-opcode translation (SOT), and whether
   ``full_graph=True`` can trace it;
3. an in-place write into an input buffer inside a compiled function, the buffer read back afterwards.
Times are medians of 50 calls after 3 warm-up calls.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import warnings

import paddle
from decode_products import timings  # beside this file

warnings.filterwarnings("ignore")


def _milliseconds(fn, calls: int = 50) -> float:
    return statistics.median(timings(fn, calls, warmup=3)) * 1e3


def small_function() -> str:
    weights = [paddle.randn([256, 256]) for _ in range(40)]

    def f(x):
        for w in weights:
            x = paddle.nn.functional.silu(paddle.matmul(x, w)) * 0.5 + x
        return x

    x = paddle.randn([16, 256])
    compiled = paddle.jit.to_static(f, full_graph=True)
    with paddle.no_grad():
        return (f"| 160-op function | {_milliseconds(lambda: f(x)):.1f} | "
                f"{_milliseconds(lambda: compiled(x)):.1f} (full graph) |")


class _AppendCache:
    """Each layer's cached keys/values with this token's appended (no in-place write, no Python-int state), so
    that the traced step is a function of its tensor inputs alone."""

    def __init__(self, keys, values):
        self.keys, self.values = keys, values

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.keys[0].shape[2]

    def update(self, key, value, layer_idx):
        return (paddle.concat([self.keys[layer_idx], key], 2), paddle.concat([self.values[layer_idx], value], 2))


def layer_step(model_dir: str) -> list[str]:
    """The model's own layers for one token of 16 rows over 160 cached positions, as a function of tensors."""
    from paddle_r1.models.forward import text_positions
    from paddle_r1.models.loading import load_model

    model = load_model(model_dir)
    model.eval()
    text = model.model.language_model
    config = text.config
    rows, cached, head_dim = 16, 160, config.hidden_size // config.num_attention_heads

    def step(token, position, mask, keys, values):
        cache = _AppendCache(keys, values)
        hidden = text.embed_tokens(token.unsqueeze(-1))
        rotary = text.rotary_emb(hidden, text_positions(position, 1))
        for layer in text.layers:
            hidden = layer(hidden, attention_mask=mask, position_embeddings=rotary, past_key_values=cache,
                           use_cache=True)[0]
        return model.lm_head(text.norm(hidden))[:, -1]

    shape = [rows, config.num_key_value_heads, cached, head_dim]
    inputs = (paddle.randint(0, config.vocab_size, [rows], dtype="int64"), paddle.full([rows], 50, dtype="int64"),
              paddle.zeros([rows, 1, 1, cached + 1]), [paddle.randn(shape) for _ in text.layers],
              [paddle.randn(shape) for _ in text.layers])
    rows_out = []
    with paddle.no_grad():
        eager_ms = _milliseconds(lambda: step(*inputs))
        sot = paddle.jit.to_static(step)
        rows_out.append(f"| the model's layers, one token x {rows} rows | {eager_ms:.1f} | "
                        f"{_milliseconds(lambda: sot(*inputs)):.1f} (SOT) |")
        try:
            paddle.jit.to_static(step, full_graph=True)(*inputs)
            rows_out.append("full_graph=True traced the layers' step")
        except Exception as error:  # what the tracer says is the finding
            rows_out.append(f"full_graph=True on the layers' step: {type(error).__name__}")
    return rows_out


def in_place_write() -> str:
    def write_then_double(buffer, index, value):
        buffer[:, index] = value
        return (buffer * 2).sum()

    compiled = paddle.jit.to_static(write_then_double, full_graph=True)
    buffer = paddle.zeros([2, 5])
    with paddle.no_grad():
        compiled(buffer, paddle.to_tensor(0), paddle.ones([2]))
    return (f"in-place write of ones into column 0 of a zero [2, 5] input, compiled: buffer row 0 reads "
            f"{buffer.numpy()[0].tolist()} (expected [1.0, 0.0, 0.0, 0.0, 0.0])")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", help="a checkpoint folder (default: paddle_r1's tiny model at the anchor's sizes)")
    args = parser.parse_args()

    from paddle_r1.cpu_math import tune_cpu_math
    from paddle_r1.quiet import quiet_libraries

    quiet_libraries("ERROR")
    tune_cpu_math()  # what a CPU job does before its first matrix product
    from paddle_r1.testing.tiny import make_tiny_model

    sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # anchor.py, one folder up
    from anchor import ANCHOR_SIZE

    model_dir = args.model or make_tiny_model(tempfile.mkdtemp(), size=ANCHOR_SIZE)
    print(f"paddle {paddle.__version__}, {paddle.device.get_device()}")
    print("| what | eager, ms | to_static, ms |\n|---|---|---|")
    print(small_function())
    print("\n".join(layer_step(model_dir)))
    print(in_place_write())


if __name__ == "__main__":
    main()
