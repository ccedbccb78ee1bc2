"""Optimizer-state memory per rank with and without stage-1 sharding (CPU, gloo).

    python benchmarks/sharding.py [--ranks 2 --hidden 256 --layers 4 --steps 2]

Runs the same GRPO job on a tiny model with ``sharding: ""`` and ``sharding: stage1`` over ``--ranks``
processes and prints one table: trainable weights, the AdamW state each rank holds (moments, and fp32
master weights when there are any), and seconds per step.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import warnings

warnings.filterwarnings("ignore")


def _state_bytes(state: dict) -> int:
    total = 0
    for key, value in state.items():
        values = value.values() if key == "master_weights" else [value]
        total += sum(v.numel().item() * v.element_size() for v in values if hasattr(v, "element_size"))
    return total


def run_rank(settings: dict, report_dir: str) -> None:
    warnings.filterwarnings("ignore")
    import paddle.distributed as dist

    from paddle_r1.config.jobs import GRPOConfig
    from paddle_r1.cpu_math import tune_cpu_math
    from paddle_r1.quiet import quiet_libraries
    from paddle_r1.trainer.grpo import GRPOTrainer

    quiet_libraries("ERROR")
    tune_cpu_math()  # what a CPU job does before its first matrix product
    trainer = GRPOTrainer(GRPOConfig(**settings))
    start = time.perf_counter()
    trainer.train()
    seconds = (time.perf_counter() - start) / trainer.total_steps
    trainable = sum(p.numel().item() for p in trainer.policy.parameters() if not p.stop_gradient)
    report = {"trainable": trainable, "optimizer_bytes": _state_bytes(trainer.optimizer.state_dict()),
              "seconds_per_step": seconds}
    with open(os.path.join(report_dir, f"rank{dist.get_rank()}.json"), "w") as f:
        json.dump(report, f)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args()

    import paddle.distributed as dist

    from paddle_r1.synthetic import make_synthetic_rec
    from anchor import decoder_size  # beside this file
    from paddle_r1.testing.tiny import make_tiny_model

    work = tempfile.mkdtemp()
    size = decoder_size(args.hidden, args.layers)
    model_dir = make_tiny_model(f"{work}/model", size=size)
    data = make_synthetic_rec(f"{work}/data", 8)
    rows = []
    for stage in ("", "stage1"):
        report_dir = f"{work}/report-{stage or 'none'}"
        os.makedirs(report_dir)
        settings = dict(model_name_or_path=model_dir, data_path=data, output_dir=f"{work}/run-{stage or 'none'}",
                        reward_funcs=["format", "iou"], num_generations=2, per_device_train_batch_size=2,
                        max_completion_length=8, max_steps=args.steps, save_steps=0, use_visualdl=False,
                        disable_tqdm=True, beta=0.0, device="cpu", sharding=stage)
        dist.spawn(run_rank, args=(settings, report_dir), nprocs=args.ranks, backend="gloo")
        reports = [json.load(open(f"{report_dir}/rank{r}.json")) for r in range(args.ranks)]
        rows.append((stage or '""', reports))

    full = max(r["optimizer_bytes"] for r in rows[0][1])
    print(f"\n{args.ranks} ranks, tiny Qwen2.5-VL (hidden {args.hidden}, {args.layers} layers), "
          f"{rows[0][1][0]['trainable'] / 1e6:.2f}M trainable weights, float32\n")
    print("| sharding | AdamW state per rank (MB) | share of the unsharded state | s/step (rank 0) |")
    print("|---|---|---|---|")
    for stage, reports in rows:
        per_rank = [r["optimizer_bytes"] for r in reports]
        print(f"| {stage} | {' / '.join(f'{b / 2**20:.1f}' for b in per_rank)} | "
              f"{max(per_rank) / full:.0%} (largest rank) | {reports[0]['seconds_per_step']:.2f} |")


if __name__ == "__main__":
    main()
