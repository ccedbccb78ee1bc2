"""What guarding the optimizer step costs (``paddle_r1/parallel/step_guard.py``), beside the AdamW step itself.

    python benchmarks/update_guard.py [--repeats 20]

For each model size, a tiny Qwen2.5-VL built at that size with AdamW state allocated and random gradients, times
(median of ``--repeats``, milliseconds, after one warm-up) of: the AdamW step alone; the snapshot taken before
every step (a copy of the weights and AdamW state into host buffers allocated once); the finiteness check of the
updated weights (``finite_flags``: ``(t * 0).sum()`` per tensor, one read from the device) and, for comparison,
``isfinite(t).all()`` per tensor; and the restore that runs only when an update was not finite. "per step" is
snapshot + check: what every applied step pays. Sizes: the speed anchor's model (``benchmarks/grpo_step.py``)
and a larger one (hidden 1024, 8 layers, vocab 16384).
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import timeit
import warnings

from anchor import ANCHOR_SIZE  # beside this file
from paddle_r1.testing.parts import TinySize

warnings.filterwarnings("ignore")

SIZES = {
    "anchor": ANCHOR_SIZE,
    "larger": TinySize(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=8,
                       num_key_value_heads=2, vision_hidden_size=256, vision_intermediate_size=512, vocab_size=16384),
}


def _median_ms(fn, repeats: int) -> float:
    fn()  # warm-up
    return 1e3 * statistics.median(timeit.repeat(fn, number=1, repeat=repeats))


def measure(size: TinySize, repeats: int) -> dict:
    import paddle

    from paddle_r1.parallel.optimizer_state import allocate_optimizer_state
    from paddle_r1.models.loading import load_model
    from paddle_r1.testing.tiny import make_tiny_model
    from paddle_r1.parallel.step_guard import StepSnapshot, finite_flags

    with tempfile.TemporaryDirectory() as folder:
        model = load_model(make_tiny_model(folder + "/m", size=size))
    parameters = [p for p in model.parameters() if not p.stop_gradient]
    optimizer = paddle.optimizer.AdamW(learning_rate=1e-5, parameters=parameters)
    allocate_optimizer_state(optimizer)
    for p in parameters:
        p.grad = paddle.randn(p.shape, dtype=p.dtype) * 1e-3
    snapshot = StepSnapshot(optimizer, parameters)

    def isfinite_all():
        return paddle.stack([paddle.isfinite(p).all() for p in parameters]).numpy()

    snapshot.take()
    row = {"trainable weights (M)": sum(int(p.numel()) for p in parameters) / 1e6,
           "AdamW step": _median_ms(optimizer.step, repeats),
           "snapshot": _median_ms(snapshot.take, repeats),
           "check": _median_ms(lambda: finite_flags(parameters), repeats),
           "check by isfinite().all()": _median_ms(isfinite_all, repeats),
           "restore": _median_ms(snapshot.restore, repeats)}
    row["per step"] = row["snapshot"] + row["check"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    from paddle_r1.quiet import quiet_libraries

    quiet_libraries()
    rows = {name: measure(size, args.repeats) for name, size in SIZES.items()}
    columns = list(next(iter(rows.values())))
    print("| model | " + " | ".join(c if c.endswith("(M)") else f"{c} (ms)" for c in columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for name, row in rows.items():
        print(f"| {name} | " + " | ".join(f"{row[c]:.1f}" for c in columns) + " |")


if __name__ == "__main__":
    main()
