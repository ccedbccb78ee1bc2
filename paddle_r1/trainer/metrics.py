"""Where a run's numbers go: the console, ``metrics.jsonl``, VisualDL, and ``completions.jsonl``."""
from __future__ import annotations

import json
import os


class MetricsLogger:
    def __init__(self, output_dir: str, use_visualdl: bool = True):
        os.makedirs(output_dir, exist_ok=True)
        self.metrics_path = os.path.join(output_dir, "metrics.jsonl")
        self.completions_path = os.path.join(output_dir, "completions.jsonl")
        self.writer = None
        if use_visualdl:
            from visualdl import LogWriter

            self.writer = LogWriter(logdir=os.path.join(output_dir, "visualdl"))

    def log(self, step: int, metrics: dict, echo=print) -> None:
        with open(self.metrics_path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"step": step, **metrics}) + "\n")
        if self.writer is not None:
            for key, value in metrics.items():
                self.writer.add_scalar(tag=key, value=float(value), step=step)
        shown = ("loss", "reward", "reward_std", "kl", "completion_length", "learning_rate", "grad_norm",
                 "step_seconds", "tokens_per_second")
        echo(f"step {step}: " + "  ".join(f"{k}={metrics[k]:.4g}" for k in shown if k in metrics))

    def log_completions(self, rows: list[dict]) -> None:
        with open(self.completions_path, "a", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
