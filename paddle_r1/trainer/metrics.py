"""Where a run's numbers go: the console, ``metrics.jsonl``, VisualDL, and ``completions.jsonl``.

A resumed run redoes the steps after its checkpoint; its logger drops the rows of those steps first, so each file
describes one history (the rows a step wrote before the interruption are replaced by the rows it writes now)."""
from __future__ import annotations

import json
import os
from typing import Optional


def truncate_log(path: str, last_step: int) -> None:
    """Keep the rows of ``path`` (jsonl) whose step is at most ``last_step``, rewriting it atomically (a copy
    renamed over it), so a kill during the rewrite leaves the old file whole. Lines that are not json rows with
    a step (a line cut off by a kill) are dropped too: a resumed run appends after a clean line end."""
    if not os.path.isfile(path):
        return
    kept = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            step = _row_step(line)
            if step is not None and step <= last_step:
                kept.append(line if line.endswith("\n") else line + "\n")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.writelines(kept)
    os.replace(path + ".tmp", path)


def _row_step(line: str):
    try:
        row = json.loads(line)
    except ValueError:
        return None
    return row.get("step") if isinstance(row, dict) else None


class MetricsLogger:
    def __init__(self, output_dir: str, use_visualdl: bool = True, resume_step: Optional[int] = None):
        """``resume_step``: the step a resumed run continues from; rows of later steps are dropped."""
        os.makedirs(output_dir, exist_ok=True)
        self.metrics_path = os.path.join(output_dir, "metrics.jsonl")
        self.completions_path = os.path.join(output_dir, "completions.jsonl")
        if resume_step is not None:
            for path in (self.metrics_path, self.completions_path):
                truncate_log(path, resume_step)
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
        shown = ("loss", "reward", "reward_std", "kl", "entropy", "completion_length", "learning_rate", "grad_norm",
                 "step_seconds", "tokens_per_second")
        echo(f"step {step}: " + "  ".join(f"{k}={metrics[k]:.4g}" for k in shown if k in metrics))

    def log_completions(self, rows: list[dict]) -> None:
        with open(self.completions_path, "a", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
