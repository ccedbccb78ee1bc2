"""Running one check and reporting it: one console line per check (PASS / FAIL / SKIP, seconds, the figure it
measured; on FAIL the error and what to do) and the whole report as JSON for a bug report."""
from __future__ import annotations

import contextlib
import io
import json
import time
import traceback
from dataclasses import asdict, dataclass
from typing import Callable

LOG_TAIL = 4000  # characters of a failed check's own output kept in the report


class Skip(Exception):
    """The check does not apply to this machine; the message says why."""


@dataclass(frozen=True)
class Check:
    name: str
    run: Callable  # run(workspace) -> the figure it measured (one line); raises Skip, or fails by raising
    gpu_only: bool
    advice: str  # what to do when it fails


@dataclass
class Result:
    name: str
    status: str  # PASS | FAIL | SKIP
    seconds: float
    figure: str = ""
    error: str = ""  # the exception, one line ("Type: message"), or the reason for a SKIP
    advice: str = ""
    traceback: str = ""
    log: str = ""  # the end of what the check printed, when it failed


def run_check(check: Check, workspace) -> Result:
    """``check`` on ``workspace``, its output captured (it is kept in the report when the check fails), under the
    machine's compute context (float16 training's auto_cast), as the trainer runs its forward passes."""
    start = time.perf_counter()
    output = io.StringIO()
    try:
        if check.gpu_only and workspace.machine.no_gpu_reason:
            raise Skip(workspace.machine.no_gpu_reason)
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output), \
                workspace.machine.precision.compute():
            figure = check.run(workspace)
        return Result(check.name, "PASS", time.perf_counter() - start, figure=figure)
    except Skip as reason:
        return Result(check.name, "SKIP", time.perf_counter() - start, error=str(reason))
    except Exception as e:  # noqa: BLE001 -- a failing check is the report's subject, not the selftest's end
        return Result(check.name, "FAIL", time.perf_counter() - start, error=f"{type(e).__name__}: {e}",
                      advice=check.advice, traceback=traceback.format_exc(), log=output.getvalue()[-LOG_TAIL:])


def console_lines(result: Result) -> list[str]:
    """``STATUS  name  seconds  figure`` (a SKIP's reason in the figure's place); a FAIL adds the error, what to do."""
    head = f"{result.status:<4}  {result.name:<25} {result.seconds:6.1f} s"
    if result.status == "PASS":
        return [f"{head}  {result.figure}"]
    if result.status == "SKIP":
        return [f"{head}  {result.error}"]
    return [head] + [f"      error: {line}" for line in result.error.splitlines()[:12]] + \
        [f"      what to do: {result.advice}"]


def summary(results: list[Result], seconds: float) -> str:
    counts = {status: sum(r.status == status for r in results) for status in ("PASS", "FAIL", "SKIP")}
    return f"{counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped in {seconds:.0f} s"


def write_json(path: str, results: list[Result], environment: dict, seconds: float) -> None:
    report = {"checks": [{**asdict(r), "seconds": round(r.seconds, 2)} for r in results],
              "environment": environment, "seconds": round(seconds, 1)}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
