"""Where a run's numbers go: the console, ``metrics.jsonl``, ``completions.jsonl``, and the trackers of
``report_to`` (VisualDL, SwanLab, W&B: ``trackers.py``).

A resumed run redoes the steps after its checkpoint; its logger drops the rows of those steps first, so each file
describes one history (the rows a step wrote before the interruption are replaced by the rows it writes now)."""
from __future__ import annotations

import json
import os
from typing import Optional

from .trackers import start_trackers


def read_jsonl(path: str) -> list[dict]:
    """The json rows of a run's log ``path``; a line that is not one is skipped: the last one cut off by a kill, or
    still being written by a run in progress (``plot`` and ``view`` read a live run's files)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        return [row for row in map(_json_row, f) if row is not None]


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


def _json_row(line: str) -> Optional[dict]:
    """``line``'s json object, or None when it is not one (cut off, or not an object)."""
    try:
        row = json.loads(line)
    except ValueError:
        return None
    return row if isinstance(row, dict) else None


def _row_step(line: str):
    row = _json_row(line)
    return row.get("step") if row is not None else None


NOTHING_RESUMED = -1  # a resume_step before any step's rows, the initial evaluation's (step 0) included


class MetricsLogger:
    def __init__(self, output_dir: str, trackers: tuple = (), config: Optional[dict] = None,
                 resume_step: Optional[int] = None):
        """``trackers``: names from ``trackers.TRACKERS``, each given ``config`` (the run's keys) at the start;
        ``resume_step``: the step a resumed run continues from; rows of later steps are dropped (all of them with
        ``NOTHING_RESUMED``)."""
        os.makedirs(output_dir, exist_ok=True)
        self.metrics_path = os.path.join(output_dir, "metrics.jsonl")
        self.completions_path = os.path.join(output_dir, "completions.jsonl")
        if resume_step is not None:
            for path in (self.metrics_path, self.completions_path):
                truncate_log(path, resume_step)
        self.trackers = start_trackers(list(trackers), output_dir, config)

    def log(self, step: int, metrics: dict, echo=print) -> None:
        with open(self.metrics_path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"step": step, **metrics}) + "\n")
        for tracker in self.trackers:
            tracker.log(step, metrics)
        shown = ("loss", "reward", "reward_std", "kl", "entropy", "completion_length", "learning_rate", "grad_norm",
                 "step_seconds", "tokens_per_second")
        echo(f"step {step}: " + "  ".join(f"{k}={metrics[k]:.4g}" for k in shown if k in metrics))

    def log_completions(self, rows: list[dict]) -> None:
        """One step's rows (each holds its ``step``): appended to completions.jsonl, and a table for each tracker."""
        with open(self.completions_path, "a", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        for tracker in self.trackers:
            tracker.log_completions(rows[0]["step"], rows)

    @staticmethod
    def print_completions(rows: list[dict], limit: Optional[int], echo=print) -> None:
        """The first ``limit`` (None: all) of one step's rows, as text: each completion with its problem, total
        reward, each reward function's score and advantage (config key ``log_completions``)."""
        shown = rows if limit is None else rows[:limit]
        lines = [f"step {rows[0]['step']}: {len(shown)} of {len(rows)} completions"]
        for i, row in enumerate(shown, 1):
            scores = ", ".join(f"{key.removeprefix('reward/')} {_number(value)}" for key, value in row.items()
                               if key.startswith("reward/"))
            lines += [f"[{i}] reward {_number(row['reward'])} ({scores}), advantage {row['advantage']:.4g}",
                      f"    problem: {row['problem']}", f"    completion: {row['completion']}"]
        echo("\n".join(lines))

    def close(self) -> None:
        for tracker in self.trackers:
            tracker.close()


def _number(value) -> str:
    """A logged score as text: None (a reward that did not apply) as "-"."""
    return "-" if value is None else f"{value:.4g}"
