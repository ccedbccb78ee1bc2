"""``paddle-r1 selftest``: the GPU-only paths of paddle_r1, run on this machine on tiny models it builds itself.

Nothing that builds or tests this project has a GPU, so the branches taken only on one (bf16 through the vision
tower, float16 with its loss scaler, fused attention kernels, the estimate against a GPU's measured memory, NCCL and
sharding stage 2, ...) are first run by their user. This runs each of them in a few minutes, before a long job: one
line per check (PASS / FAIL / SKIP, its figure; on FAIL the error and what to do) and, with ``--output``, a JSON
report to send. On CPU it runs the same checks where they apply (float32, eager and Paddle's math attention, gloo
ranks) and skips the GPU-only ones, saying why.

Each check is one function of ``checks.py`` (one model, in this process) or ``runs.py`` (through the trainer,
in this process or launched ranks); ``CHECKS`` lists them in the order they run.
"""
from __future__ import annotations

import contextlib
import functools
import os
import tempfile
import time
from typing import Callable, Optional

from ..models.families import QWEN3_VL
from . import checks, runs
from .report import Check, console_lines, run_check, summary, write_json

SEND = "send the JSON report (--output)"
RANK_LOGS = "with the ranks' logs (--workdir DIR keeps them in DIR/run-*-logs)"
CHECKS = [
    Check("environment", checks.environment, False,
          "install the paddlepaddle-gpu build for this machine's CUDA (README: Install), run the selftest again, "
          f"and {SEND} if it still fails"),
    Check("training_step", checks.training_step, False,
          f"train with --dtype float32 (twice the memory of weights and activations) and {SEND}"),
    Check("attention", checks.attention, False,
          f"train with --attn_implementation eager (more memory: see paddle-r1 estimate-memory) and {SEND}"),
    Check("one_token_decode", checks.one_token_decode, False,
          f"train with --rollout_engine layers (slower rollouts, the same completions) and {SEND}"),
    Check("cuda_graph_decode", checks.cuda_graph_decode, True,
          f"train with rollout_cuda_graphs false (its default) and {SEND}"),
    Check("lora_merge", checks.lora_merge, False,
          f"train without LoRA, or resume only from checkpoints' adapter/ folders, and {SEND}"),
    Check(QWEN3_VL.model_type, checks.qwen3_vl, False, f"train a Qwen2-VL or Qwen2.5-VL model here and {SEND}"),
    Check("memory_estimate", runs.memory_estimate, True,
          f"leave headroom beyond paddle-r1 estimate-memory's total on this GPU and {SEND}"),
    Check("grpo_run", runs.grpo_run, False,
          f"{SEND}; with --workdir DIR, DIR/run-1-rank keeps the run's files"),
    Check("ranks_data_parallel", functools.partial(runs.ranks, name="data-parallel", sharding=""), True,
          f"train on one GPU until it is fixed and {SEND} {RANK_LOGS}"),
    Check("ranks_stage1", functools.partial(runs.ranks, name="stage1", sharding="stage1"), False,
          f"train without --sharding until it is fixed and {SEND} {RANK_LOGS}"),
    Check("ranks_stage2", functools.partial(runs.ranks, name="stage2", sharding="stage2"), True,
          f"train with --sharding stage1 instead and {SEND} {RANK_LOGS}"),
    Check("ranks_data_parallel_video", functools.partial(runs.ranks, name="data-parallel-video", sharding="",
                                                         media="video"), False,
          f"train on clips on one GPU until it is fixed and {SEND} {RANK_LOGS}"),
    Check("ranks_stage2_video", functools.partial(runs.ranks, name="stage2-video", sharding="stage2", media="video"),
          True, f"train on clips with --sharding stage1 instead and {SEND} {RANK_LOGS}"),
    Check("ranks_overflow_stage1", functools.partial(runs.ranks_overflow, sharding="stage1"), False,
          f"train float16 without --sharding (or on a GPU with bfloat16) until it is fixed and {SEND} {RANK_LOGS}"),
    Check("ranks_overflow_stage2", functools.partial(runs.ranks_overflow, sharding="stage2"), True,
          f"train float16 with --sharding stage1 instead and {SEND} {RANK_LOGS}"),
]
CHECK_NAMES = [check.name for check in CHECKS]


def run_selftest(only: Optional[list[str]] = None, output: Optional[str] = None, nproc: int = 2,
                 dtype: Optional[str] = None, workdir: Optional[str] = None, echo: Callable = print) -> int:
    """Run the checks (all, or those named in ``only``), echoing one line each; 0 when none failed, else 1.
    ``workdir`` keeps the models and runs there (default: a temporary folder, removed)."""
    from .machine import inspect_machine
    from .workspace import Workspace

    start = time.perf_counter()
    if output:  # a report that cannot be written stops the selftest now, not after its minutes of checks
        try:
            open(output, "w").close()
        except OSError as e:
            raise SystemExit(f"selftest: cannot write the report {output}: {e.strerror}") from None
    machine = inspect_machine(dtype)
    selected = [check for check in CHECKS if not only or check.name in only]
    with contextlib.ExitStack() as stack:
        root = workdir or stack.enter_context(tempfile.TemporaryDirectory(prefix="paddle-r1-selftest-"))
        os.makedirs(root, exist_ok=True)
        workspace = Workspace(os.path.abspath(root), machine, nproc)
        echo(f"paddle-r1 selftest: {len(selected)} checks in {machine.dtype}; work folder {root}")
        results = []
        for check in selected:
            results.append(run_check(check, workspace))
            for line in console_lines(results[-1]):
                echo(line)
    seconds = time.perf_counter() - start
    echo(summary(results, seconds) + (f"; report: {output}" if output else ""))
    if output:
        write_json(output, results, machine.environment, seconds)
    return 1 if any(result.status == "FAIL" for result in results) else 0
