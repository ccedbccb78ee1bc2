"""``paddle-r1 plot RUN_DIR [RUN_DIR ...]``: one PNG of a run's curves against step, from its metrics.jsonl.

Panels: reward (the total solid, each reward function's mean in its own dash), KL, the policy's entropy, completion
length, and the held-out score (``eval/score``). A panel whose metric no run logged says so instead of drawing nothing.
Several run folders (e.g. the seeds of a benchmark) are drawn in the same panels, one colour each.
"""
from __future__ import annotations

import math
import os
from typing import Optional

from .telemetry.metrics import read_jsonl

DASHES = ("--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)))
PANELS = (("reward", "reward: total (solid) and per function"), ("kl", "KL to the reference"),
          ("entropy", "policy entropy (nats per token)"), ("completion_length", "completion length (tokens)"),
          ("eval/score", "held-out score"))


def read_metrics(run_dir: str) -> list[dict]:
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no metrics.jsonl in {run_dir}")
    return read_jsonl(path)


def series(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of the rows that logged a finite ``key``."""
    points = [(row["step"], float(row[key])) for row in rows
              if isinstance(row.get(key), (int, float)) and math.isfinite(row[key])]
    return [s for s, _ in points], [v for _, v in points]


def reward_function_keys(rows: list[dict]) -> list[str]:
    return sorted({k for row in rows for k in row if k.startswith("rewards/") and k.endswith("/mean")})


def plot_runs(run_dirs: list[str], output: str, title: Optional[str] = None,
              labels: Optional[list[str]] = None) -> str:
    """Write the PNG to ``output`` and return its path; ``labels`` name the runs (default: the folders' names)."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    labels = labels or [os.path.basename(os.path.normpath(d)) for d in run_dirs]
    runs = [(label, read_metrics(d)) for label, d in zip(labels, run_dirs)]
    reward_keys = sorted({k for _, rows in runs for k in reward_function_keys(rows)})
    styles = {k: DASHES[i % len(DASHES)] for i, k in enumerate(reward_keys)}
    fig, axes = plt.subplots(2, math.ceil(len(PANELS) / 2), figsize=(13, 6), dpi=80)
    for ax in axes.flat[len(PANELS):]:
        ax.set_visible(False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (key, label) in zip(axes.flat, PANELS):
        handles = []
        for i, (name, rows) in enumerate(runs):
            color = colors[i % len(colors)]
            steps, values = series(rows, key)
            if steps:
                handles += ax.plot(steps, values, color=color, marker="o" if key == "eval/score" else None,
                                   markersize=3, label=name)
            if key == "reward":  # each reward function's mean: the run's colour, the function's dash
                for reward_key in reward_function_keys(rows):
                    ax.plot(*series(rows, reward_key), color=color, linestyle=styles[reward_key], linewidth=1,
                            alpha=0.6)
        if key == "reward":
            handles += [Line2D([], [], color="gray", linestyle=styles[k], linewidth=1, label=k.split("/")[1])
                        for k in reward_keys]
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("step", fontsize=9)
        ax.grid(alpha=0.3)
        if handles:
            ax.legend(handles=handles, fontsize=7)
        else:
            ax.text(0.5, 0.5, f"no '{key}' logged", ha="center", va="center", transform=ax.transAxes, color="gray")
    fig.suptitle(title or ", ".join(name for name, _ in runs), fontsize=11)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    fig.savefig(output)
    plt.close(fig)
    return output
