"""The checks that train through the trainer's public entry points: a short GRPO run in this process, the memory
estimate against one GRPO step's measured peak, and multi-rank runs through ``paddle.distributed.launch`` and
``paddle-r1 train`` (gloo on CPU, NCCL on GPUs) compared with the 1-rank run over the same global batch, on images or
on clips."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from dataclasses import dataclass

import numpy as np

from .report import Skip
from .tolerances import CheckFailed, largest_change, relative_to_movement, within
from .workspace import CLIP_SIZE

REWARD = "paddle_r1.selftest.runs:prefer_short"
STEPS = 2
LAUNCH_TIMEOUT = 900  # seconds for a launched run: start-up of every rank, 2 steps, a checkpoint
LOG_LINES = 20  # lines of a failed rank's log quoted in the error
# GRPO config keys of each kind of prompt the runs train on (``Workspace.data``): a clip's frames are read at the
# tiny clips' own size, so each prompt holds a few vision tokens a time step
MEDIA_SETTINGS = {"image": {}, "video": {"video_min_pixels": CLIP_SIZE ** 2, "video_max_pixels": CLIP_SIZE ** 2}}


def prefer_short(completions, **columns):
    """The runs' reward: shorter completions score higher. A random tiny model's completions differ in length, so
    every group has a spread, and every step a gradient (a reward of 0 for all would leave the weights alone)."""
    return [1.0 - len(text) / 200.0 for text in completions]


def run_settings(ws, output_dir: str, prompts_per_device: int, media: str = "image", **extra) -> dict:
    """GRPO config keys of the runs: ``STEPS`` steps of ``prompts_per_device`` prompts (``media``: ``image`` or
    ``video``) x 2 completions of 8 tokens. AdamW's epsilon is 1e-6, not 1e-8: at its first step AdamW moves every
    weight by about the learning rate times the sign of its gradient, so a gradient that float rounding leaves at
    +1e-12 in one run and -1e-12 in another (an embedding row whose tokens' contributions cancel) puts the two runs
    a whole step apart there. One core running both ranks did that (1.2e-3 of the movement against 1.3e-5 with
    epsilon 1e-6, gradient norms 1e-8 apart either way); the epsilon damps such gradients in both runs alike."""
    return {"model_name_or_path": ws.tiny_model(), "data_path": ws.data(media), **MEDIA_SETTINGS[media],
            "output_dir": output_dir, "dtype": ws.dtype, "reward_funcs": [REWARD], "num_generations": 2,
            "per_device_train_batch_size": 2 * prompts_per_device, "max_completion_length": 8, "max_steps": STEPS,
            "learning_rate": 5e-3, "adam_epsilon": 1e-6, "beta": 0.04, "max_grad_norm": 1.0, "seed": 1,
            "save_steps": STEPS, "use_visualdl": False, "disable_tqdm": True, "collective_timeout": 300.0, **extra}


@dataclass
class Run:
    output_dir: str
    metrics: list  # metrics.jsonl's rows

    @property
    def checkpoint(self) -> str:
        return os.path.join(self.output_dir, f"checkpoint-{STEPS}")


def _metrics(output_dir: str) -> list:
    with open(os.path.join(output_dir, "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _float32_state(model) -> dict:
    return {name: t.astype("float32").numpy() for name, t in model.state_dict().items()}


def _shown(run: Run, media: str) -> list[tuple[int, str]]:
    """(step, file names) of each completion in the run's completions.jsonl: the images or clips (``media``) its
    prompt showed the policy, ``none`` when it showed none."""
    column = {"image": "images", "video": "videos"}[media]
    with open(os.path.join(run.output_dir, "completions.jsonl"), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    return sorted((row["step"], " ".join(os.path.basename(p) for p in row.get(column) or []) or "none") for row in rows)


def _checkpoint_weights(folder: str, dtype: str) -> dict:
    from ..models.loading import load_model

    return _float32_state(load_model(folder, dtype=dtype))


def single_run(ws, media: str = "image") -> tuple[Run, dict]:
    """One process over the global batch the ranks checks split (``ws.nproc`` prompts of ``media`` per step), made
    once per ``media``: the run and the weights the trainer ended with."""
    def train():
        from ..config.jobs import GRPOConfig
        from ..trainer.grpo import GRPOTrainer

        output_dir = ws.fresh("run-1-rank" + ("" if media == "image" else f"-{media}"))
        trainer = GRPOTrainer(GRPOConfig(**run_settings(ws, output_dir, ws.nproc, media)))
        trainer.train()
        return Run(output_dir, _metrics(output_dir)), _float32_state(trainer.policy)

    return ws.once(("single run", media), train)


def grpo_run(ws) -> str:
    """A short GRPO run (``STEPS`` steps, this machine's precision) through ``GRPOTrainer``: every step's loss, reward
    and gradient norm finite and the update applied, and its checkpoint a model folder that loads (model and
    processor, ``from_pretrained``) with exactly the weights training ended with, which differ from the initial."""
    from ..models.loading import load_processor

    run, trained = single_run(ws)
    for row in run.metrics:
        values = {key: row.get(key) for key in ("loss", "reward", "grad_norm")}
        if not all(v is not None and math.isfinite(v) for v in values.values()) or row["train/skipped_steps"]:
            raise CheckFailed(f"step {row['step']}: {values}, skipped steps {row['train/skipped_steps']}")
    reloaded = _checkpoint_weights(run.checkpoint, ws.dtype)
    load_processor(run.checkpoint)
    initial = _checkpoint_weights(ws.tiny_model(), ws.dtype)
    if sorted(reloaded) != sorted(trained):
        raise CheckFailed(f"{run.checkpoint} loads other weights than the trainer's: "
                          f"{sorted(set(reloaded) ^ set(trained))[:4]}")
    differ = [name for name in trained if not np.array_equal(reloaded[name], trained[name])]
    if differ:
        raise CheckFailed(f"{run.checkpoint} loads weights that differ from the trainer's: {differ[:4]}")
    moved = largest_change(trained, initial)
    if not moved > 0:
        raise CheckFailed("training changed no weight")
    steps = ", ".join(f"loss {row['loss']:.2g} reward {row['reward']:.3f}" for row in run.metrics)
    return (f"{len(run.metrics)} steps ({steps}); {os.path.basename(run.checkpoint)} loads the trained weights "
            f"exactly (moved up to {moved:.2g} from the initial); {_sampler_correction_run(ws)}")


SAMPLER_DRIFT_LIMIT = 0.1  # nats: a rollout's log-probs misaligned with the training forward's differ by several


def _sampler_correction_run(ws) -> str:
    """The same run with ``importance_sampling_correction``: rho made from the training forward's log-probs in this
    machine's precision (``GRPOTrainer._rho_from_training_forward``), every step's sampling/* metrics finite and the
    rollout's log-probs within ``SAMPLER_DRIFT_LIMIT`` of the training forward's on average."""
    from ..config.jobs import GRPOConfig
    from ..trainer.grpo import GRPOTrainer

    output_dir = ws.fresh("run-1-rank-corrected")
    GRPOTrainer(GRPOConfig(**run_settings(ws, output_dir, ws.nproc, importance_sampling_correction=True))).train()
    names = ("sampling/sampling_logp_difference/mean", "sampling/importance_sampling_ratio/mean")
    for row in _metrics(output_dir):
        drift, ratio = (row.get(name) for name in names)
        if drift is None or ratio is None or not (math.isfinite(drift) and math.isfinite(ratio)) \
                or drift > SAMPLER_DRIFT_LIMIT:
            shown = ", ".join(f"{name} {'missing' if value is None else format(value, '.4g')}"
                              for name, value in zip(names, (drift, ratio)))
            raise CheckFailed(f"importance_sampling_correction, step {row['step']}: {shown}"
                              f" (the mean difference's limit {SAMPLER_DRIFT_LIMIT} nats)")
    return (f"with importance_sampling_correction the rollout's log-probs {drift:.1e} nats from the training "
            f"forward's on average, rho {ratio:.4f} (limit {SAMPLER_DRIFT_LIMIT})")


# A model big enough that its working memory, not allocator rounding, makes the peak (93M parameters), with a GRPO step
# of 8 completions x up to 512 tokens: 3.2 GiB estimated in 16-bit, on any GPU training is meant for.
MEMORY_MODEL = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
                    num_key_value_heads=4, vision_hidden_size=128, vision_intermediate_size=256, vision_num_heads=4)


def memory_estimate(ws) -> str:
    """``memory.check_fits`` on this GPU for one GRPO step of a 93M-parameter model (8 completions x up to 512
    tokens, ``MEMORY_MODEL``), against the step's measured peaks over loading, rollout, training and the optimizer
    step. The estimate bounds reserved memory (``max_memory_reserved``: what the allocator took from the GPU, what an
    out-of-memory error is about): the estimate with its reserve (for the CUDA context, workspaces and the
    allocator's fragmentation) must be at least the reserved peak, and without the reserve at least the allocated
    peak (``max_memory_allocated``: the tensors alone). The update guard's host copy (``StepSnapshot``'s buffers,
    kept or not as ``undo_non_finite_updates`` decides) must be within the estimate's host row."""
    import paddle

    from ..config.jobs import GRPOConfig
    from ..errors import ConfigError
    from ..memory import GIB, RESERVE_GIB, check_fits
    from ..testing.tiny import TinySize, make_tiny_model
    from ..trainer.grpo import GRPOTrainer
    from ..parallel.step_guard import copy_bytes

    folder = ws.once(("model", "memory"), lambda: make_tiny_model(ws.path("memory-model"),
                                                                  size=TinySize(**MEMORY_MODEL)))
    config = GRPOConfig(**run_settings(ws, ws.fresh("run-memory"), 1, model_name_or_path=folder, num_generations=8,
                                       per_device_train_batch_size=8, max_completion_length=512, max_steps=1,
                                       save_steps=0, save_only_model=True, learning_rate=1e-5, min_pixels=3136,
                                       max_pixels=12544))
    paddle.device.cuda.synchronize()
    before = paddle.device.cuda.memory_allocated()
    reserved_before = paddle.device.cuda.memory_reserved()
    paddle.device.cuda.reset_max_memory_allocated()
    paddle.device.cuda.reset_max_memory_reserved()
    try:
        estimate = check_fits(config, 1)
    except ConfigError as e:
        total = next(line for line in str(e).splitlines() if line.startswith("total"))
        raise Skip(f"the check's own config does not fit this GPU: {' '.join(total.split())}") from None
    try:
        trainer = GRPOTrainer(config)
        trainer.train()
        paddle.device.cuda.synchronize()
        peak = (paddle.device.cuda.max_memory_allocated() - before) / GIB
        reserved = (paddle.device.cuda.max_memory_reserved() - reserved_before) / GIB
    finally:
        paddle.device.cuda.empty_cache()  # the cached blocks back to the GPU, for the ranks checks' processes
    bound = estimate.total_gib - RESERVE_GIB
    figure = (f"estimate {bound:.2f} GiB + {RESERVE_GIB:g} GiB reserve; measured peak allocated {peak:.2f} GiB "
              f"({peak / bound:.0%} of the estimate), reserved {reserved:.2f} GiB "
              f"({reserved / estimate.total_gib:.0%} of the estimate with its reserve)")
    if peak > bound or reserved > estimate.total_gib:
        raise CheckFailed(f"{figure}: the estimate is below what one step used\n{estimate.table()}")
    # the update guard's host copy: what the trainer's snapshot holds against the estimate's host row
    guard = trainer.update
    held = copy_bytes(guard.optimizer, guard.stepped_parameters()) / GIB if guard.undo_non_finite else 0.0
    counted = next(gib for name, gib, _ in estimate.host_rows if name == "update guard copy")
    figure += f"; update guard host copy {held:.3f} GiB, estimated {counted:.3f}"
    if held > counted * 1.01 + 1e-3:
        raise CheckFailed(f"{figure}: the estimate's host row is below the guard's copy\n{estimate.table()}")
    return figure


def _failed_rank_log(logs: str) -> str:
    """The end of the first rank log holding a traceback (else the launcher's), to quote in the error."""
    names = sorted(n for n in os.listdir(logs) if n.startswith("workerlog")) + ["launcher.log"]
    for name in names:
        with open(os.path.join(logs, name), encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
        if "Traceback" in "\n".join(lines) or name == "launcher.log":
            return f"the end of {os.path.join(logs, name)}:\n" + "\n".join(lines[-LOG_LINES:])
    return ""


def launch(ws, name: str, sharding: str, media: str = "image") -> Run:
    """``ws.nproc`` ranks, one prompt of ``media`` each, through ``python -m paddle.distributed.launch ... paddle-r1
    train``."""
    output_dir, logs = ws.fresh(f"run-{ws.nproc}-ranks-{name}"), ws.fresh(f"run-{ws.nproc}-ranks-{name}-logs")
    os.makedirs(logs, exist_ok=True)
    config = os.path.join(logs, "config.json")
    with open(config, "w", encoding="utf-8") as f:
        json.dump(run_settings(ws, output_dir, 1, media, sharding=sharding), f)
    _launch(ws, logs, ["paddle_r1.cli", "train", "--config", config])
    return Run(output_dir, _metrics(output_dir))


def _launch(ws, logs: str, module: list) -> None:
    """``python -m <module...>`` on ``ws.nproc`` ranks through ``paddle.distributed.launch``, logs in ``logs``: one
    process per GPU (NCCL), or ``--nproc_per_node`` processes on CPU (gloo)."""
    os.makedirs(logs, exist_ok=True)
    devices = (["--devices", ",".join(str(i) for i in range(ws.nproc))] if ws.machine.gpus
               else ["--nproc_per_node", str(ws.nproc)])
    # a non-.py launch target is run as it is: the interpreter, then the module's own command line
    command = [sys.executable, "-m", "paddle.distributed.launch", *devices, "--log_dir", logs,
               sys.executable, "-m", *module]
    with open(os.path.join(logs, "launcher.log"), "w", encoding="utf-8") as out:
        # its own process group, so that nothing it started outlives a timeout or an interrupted selftest
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = process.wait(timeout=LAUNCH_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise CheckFailed(f"no result within {LAUNCH_TIMEOUT} s; " + _failed_rank_log(logs)) from None
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    if code != 0:
        raise CheckFailed(f"paddle.distributed.launch exited with {code}; " + _failed_rank_log(logs))


def _optimizer_shards(checkpoint: str) -> list[int]:
    return [os.path.getsize(os.path.join(checkpoint, n)) for n in sorted(os.listdir(checkpoint))
            if n.startswith("optimizer.shard")]


def _skip_without_ranks(ws) -> None:
    if ws.nproc < 2:
        raise Skip(f"--nproc {ws.nproc}: a multi-rank check needs 2 or more ranks")
    if ws.machine.gpus and ws.machine.gpus < ws.nproc:
        raise Skip(f"{ws.machine.gpus} GPU(s) visible; {ws.nproc} ranks need {ws.nproc} (--nproc)")


def ranks(ws, name: str, sharding: str, media: str = "image") -> str:
    """The 1-rank run (``grpo_run``'s on images, or its twin on clips with ``media="video"``) split over
    ``ws.nproc`` launched ranks (one prompt each) with ``sharding``: each step's loss and gradient norm, the trained
    weights and the images or clips each step's prompts showed equal the 1-rank run's; with sharding, every rank
    saved a share of the AdamW state, none more than 3/4 of it."""
    _skip_without_ranks(ws)
    (single, trained), launched = single_run(ws, media), launch(ws, name, sharding, media)
    tolerance = ws.tolerance
    if [row["step"] for row in launched.metrics] != [row["step"] for row in single.metrics]:
        raise CheckFailed(f"the ranks logged steps {[row['step'] for row in launched.metrics]}")
    shown = _shown(launched, media)
    if shown != _shown(single, media) or any(files == "none" for _, files in shown):
        raise CheckFailed(f"the ranks' prompts showed {shown}, the 1-rank run's {_shown(single, media)}: each must "
                          f"show the same {media} files")
    pairs = list(zip(launched.metrics, single.metrics))
    figure = [f"{ws.nproc} ranks ({'NCCL' if ws.machine.gpus else 'gloo'}, {sharding or 'data parallel'}"
              + (", clips)" if media == "video" else ")"),
              within("loss vs 1 rank", max(abs(a["loss"] - b["loss"]) for a, b in pairs), tolerance.loss)]
    norms = [(a["grad_norm"], b["grad_norm"]) for a, b in pairs if math.isfinite(a["grad_norm"])]
    if norms:  # stage 2 clips the gradients inside Paddle's wrapper and logs NaN
        figure.append(within("gradient norm", max(abs(a - b) / b for a, b in norms), tolerance.grad_norm))
    initial = _checkpoint_weights(ws.tiny_model(), ws.dtype)
    apart = relative_to_movement(_checkpoint_weights(launched.checkpoint, ws.dtype), trained, initial)
    figure.append(within("weights apart (share of what training moved)", apart, tolerance.weights))
    if sharding:
        shards = _optimizer_shards(launched.checkpoint)
        if len(shards) != ws.nproc or max(shards) > 0.75 * sum(shards):
            raise CheckFailed(f"optimizer shards saved by the ranks: {shards} bytes")
        figure.append(f"AdamW state per rank {'/'.join(f'{s / 2**20:.2f}' for s in shards)} MB")
    return "; ".join(figure)


def ranks_overflow(ws, sharding: str) -> str:
    """float16's loss scaler on ``ws.nproc`` launched ranks with ``sharding`` (``selftest.overflow``): a normal step,
    one whose gradient overflows on the last rank only, a normal step. Every rank must skip the overflowing step,
    leave the weights as they were, lower its loss scale to the same value, and apply the next step. On CPU Paddle
    turns GradScaler off; it runs there forced on, over float32 weights."""
    from .overflow import OVERFLOW_STEP

    _skip_without_ranks(ws)
    if ws.machine.gpus and not ws.machine.precision.grad_scaler:
        raise Skip(f"training here runs {ws.dtype}, without a loss scaler (--dtype float16 runs this check)")
    logs = ws.fresh(f"run-{ws.nproc}-ranks-overflow-{sharding}-logs")
    reports = os.path.join(logs, "reports")
    _launch(ws, logs, ["paddle_r1.selftest.overflow", "--stage", sharding, "--dtype", ws.dtype, "--out", reports])
    ranks = [json.load(open(os.path.join(reports, f"rank{r}.json"), encoding="utf-8")) for r in range(ws.nproc)]
    initial, steps = ranks[0]["initial"], list(zip(*(r["steps"] for r in ranks)))
    overflow = steps[OVERFLOW_STEP]
    skipped = [r for r, step in enumerate(overflow) if not step["applied"]]
    scales = sorted({step["scale"] for step in overflow})
    if len(skipped) != ws.nproc or len(scales) != 1:
        raise CheckFailed(f"a gradient overflowed on rank {ws.nproc - 1} only: ranks {skipped} skipped the step, the "
                          f"others applied it; loss scales after it {[step['scale'] for step in overflow]} (from "
                          f"{initial['scale']:g}). Under float16 the ranks' loss scales part and later overflows "
                          "leave some ranks stepping alone")
    if not scales[0] < initial["scale"]:
        raise CheckFailed(f"the loss scale stayed {scales[0]:g} after an overflow: every overflowing step would be "
                          "skipped at the same scale")
    for number, step in enumerate(steps):
        if len({rank["weights"] for rank in step}) != 1:
            raise CheckFailed(f"after step {number + 1} the ranks hold different weights")
    before = steps[OVERFLOW_STEP - 1][0]["weights"] if OVERFLOW_STEP else initial["weights"]
    if overflow[0]["weights"] != before:
        raise CheckFailed("the step whose gradient overflowed changed the weights")
    after = steps[OVERFLOW_STEP + 1]
    if not all(step["applied"] for step in after) or after[0]["weights"] == overflow[0]["weights"]:
        raise CheckFailed("the step after the overflow was not applied on every rank")
    how = "float16" if ws.machine.gpus else f"{ws.dtype} weights, GradScaler forced on (Paddle's is off on CPU)"
    return (f"{ws.nproc} ranks ({'NCCL' if ws.machine.gpus else 'gloo'}, {sharding}, {how}): an overflow on rank "
            f"{ws.nproc - 1} skipped on every rank, loss scale {initial['scale']:g} -> {scales[0]:g} on all, weights "
            "equal and unchanged; the next step applied on all")
