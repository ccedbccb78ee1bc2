"""The experiment trackers a run reports to beside ``metrics.jsonl`` (config keys ``report_to``, ``use_visualdl``),
each through its own library: VisualDL (the metrics), SwanLab and Weights & Biases (the config at the start, the
metrics of every logged step, and a table of the completions each time ``completions.jsonl`` gets rows).

SwanLab's and W&B's runs are written under ``output_dir`` (``swanlog/``, ``wandb/``), named after it, in the project
``paddle_r1`` unless ``SWANLAB_PROJ_NAME`` / ``WANDB_PROJECT`` say otherwise; their other settings are their own
environment variables (``SWANLAB_MODE=offline``, ``WANDB_MODE=offline``, API keys). A resumed run starts a new
tracker run."""
from __future__ import annotations

import importlib
import json
import os
from typing import Optional

from ..errors import ConfigError


def check_installed(trackers: list[str]) -> None:
    """A ConfigError naming the package and the extra to install for the first of ``trackers`` whose library
    cannot be imported; called before any model loads."""
    for name in trackers:
        tracker = TRACKERS[name]
        try:
            importlib.import_module(tracker.library)
        except ImportError as e:
            install = f"pip install 'paddle_r1[{tracker.extra}]'" if tracker.extra else f"pip install {tracker.library}"
            raise ConfigError(f"config key 'report_to': {name} needs the {tracker.library} package, which cannot be "
                              f"imported ({e}): {install}", keys=("report_to",)) from None


def _cell(value):
    """A table cell: numbers and text as they are, lists and mappings (images, solution, sizes) as json text."""
    return value if value is None or isinstance(value, (int, float, str)) else json.dumps(value, ensure_ascii=False)


def completions_table(rows: list[dict]) -> tuple[list[str], list[list]]:
    """``completions.jsonl``'s rows as one table: the columns of the first row (every row of a step has them),
    the rows' cells in that order."""
    columns = list(rows[0])
    return columns, [[_cell(row.get(column)) for column in columns] for row in rows]


class VisualDLTracker:
    """The metrics as VisualDL scalars in ``output_dir/visualdl``."""

    library, extra = "visualdl", None  # no extra: paddleformers itself requires visualdl
    offline = None  # it only writes files

    def __init__(self, output_dir: str, run_name: str, config: dict):
        from visualdl import LogWriter

        self.writer = LogWriter(logdir=os.path.join(output_dir, "visualdl"))

    def log(self, step: int, metrics: dict) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(tag=key, value=float(value), step=step)

    def log_completions(self, step: int, rows: list[dict]) -> None:
        """VisualDL gets the metrics only: completions.jsonl and ``paddle-r1 view`` show the completions."""

    def close(self) -> None:
        self.writer.close()


class SwanLabTracker:
    """A SwanLab run in ``output_dir/swanlog``; the completions as an ECharts table (``completions``)."""

    library, extra = "swanlab", "swanlab"  # the package, and paddle_r1's pip extra that installs it
    offline = "SWANLAB_MODE=offline"  # how its runs are written without an account or a network

    def __init__(self, output_dir: str, run_name: str, config: dict):
        import swanlab

        self.table_class = swanlab.echarts.Table
        self.run = swanlab.init(project=os.environ.get("SWANLAB_PROJ_NAME") or "paddle_r1", name=run_name,
                                log_dir=os.path.join(output_dir, "swanlog"), config=config, reinit=True)

    def log(self, step: int, metrics: dict) -> None:
        self.run.log(metrics, step=step)

    def log_completions(self, step: int, rows: list[dict]) -> None:
        self.run.log({"completions": self.table_class().add(*completions_table(rows))}, step=step)

    def close(self) -> None:
        self.run.finish()


class WandbTracker:
    """A W&B run in ``output_dir/wandb``; the completions as a ``wandb.Table`` (``completions``)."""

    library, extra = "wandb", "wandb"
    offline = "WANDB_MODE=offline"

    def __init__(self, output_dir: str, run_name: str, config: dict):
        import wandb

        self.table_class = wandb.Table
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT") or "paddle_r1", name=run_name, dir=output_dir,
                              config=config)

    def log(self, step: int, metrics: dict) -> None:
        self.run.log(metrics, step=step)

    def log_completions(self, step: int, rows: list[dict]) -> None:
        columns, data = completions_table(rows)
        self.run.log({"completions": self.table_class(columns=columns, data=data)}, step=step)

    def close(self) -> None:
        self.run.finish()


TRACKERS = {"visualdl": VisualDLTracker, "swanlab": SwanLabTracker, "wandb": WandbTracker}


def start_trackers(trackers: list[str], output_dir: str, config: Optional[dict] = None) -> list:
    """One started tracker per name of ``trackers``, each given ``config`` (the run's keys) once. A library that
    cannot start its run (not logged in, a bad setting of its own) is a ConfigError carrying its message."""
    run_name = os.path.basename(os.path.abspath(output_dir))
    started = []
    for name in trackers:
        tracker = TRACKERS[name]
        try:
            started.append(tracker(output_dir, run_name, config or {}))
        except Exception as e:  # the library's own failure, whatever its type: said in one line, as a setup mistake
            hint = f"; {tracker.offline} writes its runs on this machine only" if tracker.offline else ""
            raise ConfigError(f"config key 'report_to': {name} could not start its run: {type(e).__name__}: "
                              f"{' '.join(str(e).split())}{hint}", keys=("report_to",)) from e
    return started
