"""The trainer skeleton GRPO and SFT share: setup (device, ranks, models, optimizer), the step loop with its
progress bar, logging, held-out evaluation and checkpoint cadence, resume, and the guarded update.

A job says only how a step is made (``training_step``), how many passes it makes over one batch
(``passes_per_batch``), and what it adds to a checkpoint (``trainer_state``, ``save_rank_files``); how a batch is
drawn and split over ranks and micro-steps is the config's ``BatchLayout`` (``checkpoints/resume.py``).

The update is guarded: a step whose loss or gradient norm is not finite changes neither the weights nor the
optimizer state, and a step that wrote a non-finite weight is undone (``step_guard``); it is logged
(``train/skipped_steps``) and counted, and ``max_skipped_steps`` of them in a row stop the run, leaving the newest
checkpoint as it was. A checkpoint is never written with a non-finite weight.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import signal
import time
from typing import Optional

import numpy as np
import paddle
from tqdm import tqdm

from ..errors import ConfigError
from ..data.samples import DataError
from ..generation.generator import Generator
from ..data.video import VideoSampling
from ..generation.generator import open_sample_media
from ..models.loading import default_coord_system, disable_dropout, load_models
from ..memory import check_fits
from ..parallel.optimizer_state import allocate_optimizer_state, stepping_optimizer_and_owned_weights
from ..models.lora import ADAPTER_DIR, apply_lora, load_adapter, write_model_folder
from ..models.source_files import source_files
from ..models.precision import check_dtype_runs_here, precision_for_this_device
from ..checkpoints import folders as ckpt
from ..checkpoints import training_state
from ..parallel.distributed import (barrier, decided_by_main, explain_failure, gather_objects, in_rank_order,
                                    init_distributed, phase, replica_io, sum_across_ranks)
from .job import check_ranks_read_the_same_samples, prepare_job
from ..telemetry.metrics import NOTHING_RESUMED, MetricsLogger
from ..checkpoints.model_card import write_model_card
from .optim import build_optimizer
from ..checkpoints.resume import BatchLayout, layout_note, prompts_taken, steps_to_finish_epochs
from .sampler import PromptSampler, rank_share
from .stop import RunStopped, StopSignals
from ..algorithms.logprobs import PolicyLogprobs
from ..parallel.sharding import build_update, fleet_strategy, optimizer_clips
from ..parallel.step_metrics import Stat, Sum, as_stat, merge, reduce_step_metrics
from ..parallel.step_guard import finite_flags

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class Draw:
    """A rank's share of a prompt batch: its samples, their opened images and read clips, each one's place in the
    batch and the generation indices of the completions this rank makes for it."""

    samples: list
    images: list
    clips: list
    places: list[int]
    generations: list[range]


class TrainingDiverged(RuntimeError):
    """``max_skipped_steps`` steps in a row had a non-finite loss, gradient norm or update, or the weights to save
    are not finite."""


class Trainer:
    name = "train"  # the progress bar's label

    def __init__(self, config, samples: Optional[list[dict]] = None, heldout=None):
        """``heldout``: an object with ``samples``, ``due(step, total_steps)`` and ``evaluate(generator, step, echo,
        rank, world_size, sum_over_ranks)`` (the held-out evaluation), run on every rank; None: no held-out
        evaluation."""
        self.config = cfg = config
        self.samples = prepare_job(cfg, samples)
        sharding = self.sharding_stage
        self.rank, self.world_size = init_distributed(fleet_strategy if sharding else None, cfg.collective_timeout,
                                                       cfg.heartbeat_timeout)
        cfg.check_ranks(self.world_size)
        check_ranks_read_the_same_samples(self.samples, self.world_size)
        if heldout is not None:  # each rank scores its slice of it: the slices must cover one list
            check_ranks_read_the_same_samples(heldout.samples, self.world_size, "held-out samples (eval_data_path)")
        self.is_main = self.rank == 0
        # what this device runs (bf16 before sm80 becomes fp16 with a loss scaler), and whether the run fits it
        check_dtype_runs_here(cfg.dtype)
        self.precision = precision_for_this_device(cfg.dtype, cfg.attn_implementation)
        if self.is_main:
            print(f"precision: {self.precision.reason}")
        if self.precision.dtype != cfg.dtype:  # the optimizer's master weights and the saved config follow it
            self.config = cfg = cfg.with_values(dtype=self.precision.dtype)
        # GPU only: refuses, with the table and the keys to change
        check_fits(cfg, self.world_size, echo=print if self.is_main else lambda _: None)
        if not cfg.resume_from_checkpoint:  # decided on rank 0: every rank raises when it refuses
            decided_by_main(lambda: ckpt.claim_for_fresh_start(cfg.output_dir, cfg.overwrite_output_dir), self.rank,
                            self.world_size)
        if self.is_main:
            ckpt.remove_unfinished_checkpoints(cfg.output_dir)
        # chosen and verified on rank 0, for every rank
        self.resume_path = decided_by_main(lambda: ckpt.resolve_checkpoint(cfg.resume_from_checkpoint, cfg.output_dir),
                                           self.rank, self.world_size) if cfg.resume_from_checkpoint else None
        # a resume with more or fewer ranks, or another per-device batch or accumulation: checked before loading
        resumed = ckpt.load_trainer_state(self.resume_path) if self.resume_path else None
        self.layout = layout = BatchLayout.of(cfg, self.world_size)
        saved_layout = BatchLayout.saved(cfg, resumed) if resumed else layout
        if saved_layout != layout:
            self.check_layout_change(self.resume_path, saved_layout, layout)
        paddle.seed(cfg.seed)
        np.random.seed(cfg.seed)
        self.load_models()
        self.generator = Generator(self.policy, self.processor, self.coord_system, VideoSampling.from_config(cfg))

        if cfg.max_steps > 0:
            self.total_steps = cfg.max_steps
        elif saved_layout != layout:  # the prompts left, at the new global batch
            self.total_steps = resumed["global_step"] + steps_to_finish_epochs(
                cfg.num_train_epochs, len(self.samples), layout, self.passes_per_batch,
                taken=prompts_taken(resumed["sampler"], len(self.samples)))
        else:
            self.total_steps = steps_to_finish_epochs(cfg.num_train_epochs, len(self.samples), layout,
                                                      self.passes_per_batch)
        optimizer, self.scheduler = build_optimizer(
            [p for p in self.policy.parameters() if not p.stop_gradient], cfg, self.total_steps,
            clip=optimizer_clips(sharding, self.world_size))
        if sharding and self.world_size == 1:
            print(f"sharding {sharding}: one process, nothing to shard; the optimizer state stays whole")
        # the training forward (wrapped when sharding needs to see it) and the step over ranks
        self.update = build_update(sharding, optimizer, self.policy, cfg.max_grad_norm, self.world_size)
        self.forward = self.update.wrap(PolicyLogprobs(self.policy))
        self.optimizer = self.update.optimizer
        self.scaler = self.update.wrap_scaler(self.precision.make_grad_scaler())  # float16 only
        # one global sequence of prompt batches, one per block; each rank takes its own slices of every batch
        self.sampler = PromptSampler(len(self.samples), layout.block_prompts, cfg.prompt_order_seed,
                                     cfg.shuffle_dataset)
        self.step = 0
        self.skipped_steps = 0  # in all, and in a row
        self.skipped_in_row = 0
        self.step_stats: dict[str, Stat] = {}  # what this rank saw during the step, beyond the job's own metrics
        if self.resume_path:
            self.restore(self.resume_path, resumed)
            if self.is_main and saved_layout != layout:
                print(layout_note(self.resume_path, saved_layout, layout, self.sampler.state_dict(),
                                  len(self.samples), self.step, self.total_steps, epochs_based=cfg.max_steps <= 0))
        allocate_optimizer_state(self.optimizer)  # an optimizer that cannot fit fails now, not after a rollout
        undo_note = self.update.choose_undo(cfg.undo_non_finite_updates)  # auto: by the copy's size, now known
        if self.is_main:
            print(undo_note)
        # after a resume the logs keep only the rows of the steps the run now continues from; resume_from_checkpoint
        # auto without a checkpoint continues from nothing (a run killed before its first save left rows only)
        resume_step = self.step if self.resume_path else None
        if resume_step is None and cfg.resume_from_checkpoint == "auto":
            resume_step = NOTHING_RESUMED
        self.logger = MetricsLogger(cfg.output_dir, trackers=cfg.trackers, config=dataclasses.asdict(cfg),
                                    resume_step=resume_step) if self.is_main else None
        self.heldout = heldout

    # ---- what a job defines ------------------------------------------------------------------
    sharding_stage = ""  # GRPO reads its config key
    loads_reference_model = False  # a frozen reference model is loaded beside the policy
    saves_reference = False  # the reference is part of the run's state (it follows the policy)

    passes_per_batch = 1  # passes over one batch of samples (GRPO's num_iterations)

    def training_step(self) -> dict:
        raise NotImplementedError

    def trainer_state(self) -> dict:
        """What the job adds to a checkpoint's trainer state."""
        return {}

    def write_model_folder(self, folder: str) -> None:
        """The checkpoint's model folder: what ``from_pretrained`` loads (``models/lora.write_model_folder``) and
        the model card (``model_card.py``)."""
        cfg = self.config
        write_model_folder(self.policy, folder, cfg)
        write_model_card(folder, cfg, self.name, self.policy.config.model_type, self.step, self.total_steps,
                         self.logger.metrics_path)

    def save_rank_files(self, folder: str) -> None:
        """Files each rank adds to a checkpoint (every rank calls it)."""

    def restore_job(self, path: str, state: dict) -> None:
        """Restore what ``trainer_state`` / ``save_rank_files`` saved."""

    def check_layout_change(self, path: str, saved: BatchLayout, now: BatchLayout) -> None:
        """Before any model loads, when the checkpoint at ``path`` was saved with another batch layout: raise a
        ``ConfigError`` if what the job saved cannot be restored in the new one."""

    def completion_rows(self) -> Optional[list[dict]]:
        """This rank's rows for completions.jsonl after a step; None when the step writes none (the same on
        every rank: the rows are gathered)."""
        return None

    # ---- setup -------------------------------------------------------------------------------
    def load_models(self) -> None:
        """The policy (from the checkpoint when resuming; with LoRA the base model plus the saved adapter), the
        processor and, when ``loads_reference_model``, the frozen reference."""
        cfg = self.config
        policy_path = cfg.model_name_or_path if cfg.lora else self.resume_path or cfg.model_name_or_path
        with replica_io(self.world_size):
            loaded = in_rank_order(lambda: load_models(
                policy_path, beta=cfg.beta if self.loads_reference_model else 0.0, dtype=cfg.dtype,
                freeze_vision=cfg.freeze_vision,
                min_pixels=cfg.min_pixels, max_pixels=cfg.max_pixels, reference_path=self.reference_path(),
                gradient_checkpointing=cfg.gradient_checkpointing, attn_implementation=self.precision.attention),
                self.rank, self.world_size)
        self.policy, self.reference, self.processor = loaded.policy, loaded.reference, loaded.processor
        if self.is_main:  # the files each save takes from the source: a hub id's are fetched now, not at a save
            source_files(cfg.model_name_or_path)
        if cfg.lora:
            apply_lora(self.policy, cfg.lora_rank, cfg.lora_alpha, cfg.lora_dropout, cfg.lora_target_modules)
            if self.resume_path:
                load_adapter(self.policy, os.path.join(self.resume_path, ADAPTER_DIR))
        if cfg.disable_dropout:  # the reference runs in eval mode, where dropout drops nothing
            disable_dropout(self.policy)
        self.coord_system = cfg.coord_system or default_coord_system(loaded.family)

    def reference_path(self) -> str:
        """The original model, or the synced reference a checkpoint saved (``sync_ref_model``)."""
        synced = os.path.join(self.resume_path, "ref_model") if self.resume_path else None
        return synced if synced and os.path.isdir(synced) else self.config.model_name_or_path

    def restore(self, path: str, state: dict) -> None:
        """The run's state from the checkpoint at ``path``, whose trainer state ``state`` was read already."""
        self.step = state["global_step"]
        self.skipped_steps = state.get("skipped_steps", 0)
        self.sampler.load_state_dict(state["sampler"])
        if state.get("config", {}).get("save_only_model"):
            self.scheduler.step(self.step)  # its state lives in the optimizer's, which this checkpoint lacks
            if self.is_main:
                print(f"{path} was saved with save_only_model: no optimizer state, so this is a warm start "
                      "(its weights, step and data position; a fresh AdamW state), not an exact resume")
        else:  # this rank's share under this run's layout, whatever layout saved it
            _, owned = stepping_optimizer_and_owned_weights(self.optimizer)
            structured = {p.name: name for name, p in self.policy.named_parameters()}
            weights = [structured[p.name] for p in owned if not p.stop_gradient]
            try:
                saved = training_state.read_optimizer_state(path, weights, first_shard=self.rank)
            except ConfigError:  # weights the checkpoint holds no state for: named as they are
                raise
            except ValueError as e:  # paddle.load: "can not parse the file" (a manifest-less checkpoint: unverified)
                raise ckpt.broken(path, f"optimizer state unreadable ({e})") from None
            training_state.load_optimizer_state(self.optimizer, self.policy, saved)
        self.restore_job(path, state)
        training_state.load_rng_state(path)
        if self.is_main:
            position = state["sampler"]
            print(f"resuming from {path}: step {self.step} of {self.total_steps}, data position epoch "
                  f"{position['epoch']}, prompt {position['index']} of {len(self.samples)} in that epoch's order")

    # ---- pieces of a step --------------------------------------------------------------------
    def next_samples(self) -> list[Draw]:
        """This rank's micro-batches of the next block (``layout.block_steps`` of them; ``sampler.rank_share``: whole
        groups, or parts of groups), images opened and clips read once per prompt. A sample whose image or clip fails
        now (a file cut short that the load's header checks passed) is skipped and counted; a block that leaves any
        micro-batch empty on any rank is replaced on every rank, so the ranks' samplers stay in step."""
        layout = self.layout
        shares = [rank_share(layout, self.rank, micro_step) for micro_step in range(layout.block_steps)]
        phase("reading the batch's images and clips")
        while True:
            batch = self.sampler.next_batch()
            opened, draws = {}, []
            for share in shares:
                draw = Draw([], [], [], [], [])
                for place, generations in share:
                    sample = self.samples[batch[place]]
                    if place not in opened:
                        try:
                            opened[place] = open_sample_media(sample, self.generator.video, self.processor)
                        except DataError as e:
                            logger.warning("skipping sample %s: %s", sample.get("_source", batch[place]), e)
                            self.count("data/skipped_samples")
                            opened[place] = None
                    if opened[place] is None:
                        continue
                    draw.samples.append(sample)
                    draw.images.append(opened[place][0])
                    draw.clips.append(opened[place][1])
                    draw.places.append(place)
                    draw.generations.append(generations)
                draws.append(draw)
            empty = not all(draw.samples for draw in draws)
            if sum_across_ranks(float(empty), self.world_size, "the count of empty batches") == 0:
                return draws

    def count(self, key: str, n: float = 1) -> None:
        """A counter of this step (summed over ranks in the logged metrics)."""
        self.record(key, Sum(n))

    def record(self, key: str, stat: Stat) -> None:
        """A statistic of this step, merged with what the step recorded under ``key`` before."""
        self.step_stats[key] = merge(self.step_stats[key], stat) if key in self.step_stats else stat

    def step_metrics(self, stats: dict[str, Stat]) -> dict[str, float]:
        """The step's logged numbers over the global batch: ``stats`` (a plain number is one every rank holds
        alike) and what was recorded during the step, combined over ranks (``step_metrics.reduce_step_metrics``)."""
        for key, stat in stats.items():
            self.record(key, as_stat(stat))
        stats, self.step_stats = self.step_stats, {}
        return reduce_step_metrics(stats, self.world_size)

    def backward(self, loss: paddle.Tensor, last: bool = True) -> None:
        """``loss.backward()``, through the float16 loss scaler when there is one. ``last``: the step's final
        micro-batch, whose backward reduces gradients over ranks as they complete (earlier ones only add up)."""
        with self.update.final_backward() if last else contextlib.nullcontext():
            (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def apply_update(self, losses: list[float]) -> dict:
        """Gradients synced and clipped, then the optimizer step, unless the loss (on any rank) or the gradient
        norm is not finite: then the step is skipped (weights and optimizer state untouched); a step that wrote a
        non-finite weight is undone and skipped the same way. The schedule and the step count move on either way.
        Under float16 loss scaling, infinite gradients with a finite loss are the scaler's business (it lowers the
        scale): skipped, but not counted toward ``max_skipped_steps``. Returns the step's update metrics (alike on every
        rank)."""
        learning_rate = self.optimizer.get_lr()
        finite_loss = sum_across_ranks(float(not all(math.isfinite(x) for x in losses)), self.world_size,
                                       "the check for non-finite losses") == 0
        grad_norm, applied = self.update.step(finite_loss, self.scaler)
        self.update.clear_grad()
        self.scheduler.step()
        self.step += 1
        if self.update.weights_broken:
            raise TrainingDiverged(
                f"step {self.step}: the update made weights non-finite and {self.update.no_undo_reason}, so it "
                "cannot be put back; stopping before anything is saved. " + self._newest_checkpoint_words()
                + "Lower learning_rate, or set undo_non_finite_updates: true to skip such steps.")
        restored = self.update.weights_restored
        overflow_only = self.scaler is not None and finite_loss and not restored
        self.skipped_in_row = 0 if applied or overflow_only else self.skipped_in_row + 1
        self.skipped_steps += not applied
        if not applied and self.is_main:
            what = "the update made weights non-finite; weights and optimizer state restored" if restored \
                else "not finite"
            print(f"step {self.step}: loss {sum(losses):.4g}, gradient norm {grad_norm:.4g}: {what}, update "
                  f"skipped ({self.skipped_in_row} in a row)")
        if self.skipped_in_row >= self.config.max_skipped_steps:
            raise TrainingDiverged(
                f"{self.skipped_in_row} steps in a row (up to step {self.step}) had a non-finite loss, gradient "
                f"norm or update; stopping (config key max_skipped_steps). The weights are those of the last finite "
                "update; " + self._newest_checkpoint_words() + "Lower learning_rate or max_grad_norm, or check the "
                "rewards.")
        return {"learning_rate": float(learning_rate), "grad_norm": grad_norm,
                "train/skipped_steps": self.skipped_steps}

    # ---- checkpoints -------------------------------------------------------------------------
    def _newest_checkpoint_words(self) -> str:
        newest = ckpt.list_checkpoints(self.config.output_dir)
        return f"the newest checkpoint is {newest[-1]}. " if newest else "no checkpoint was saved. "

    def _refuse_non_finite_weights(self) -> None:
        """The last guard before a save: a checkpoint holding a NaN or infinite weight would be resumed, evaluated
        and served as a model. Every rank checks its copy and all agree, so none waits at a barrier alone."""
        saved = [self.policy] + ([self.reference] if self.saves_reference and not self.config.save_only_model else [])
        named = [(name, tensor) for model in saved for name, tensor in model.state_dict().items()
                 if tensor.is_floating_point()]
        bad = [name for (name, _), finite in zip(named, finite_flags([t for _, t in named])) if not finite]
        if sum_across_ranks(float(len(bad)), self.world_size):
            listed = f"{', '.join(bad[:3])}{', ...' if len(bad) > 3 else ''}"
            which = f"{len(bad)} of {len(named)} weight tensors ({listed})" if bad else "another rank's weights"
            raise TrainingDiverged(f"step {self.step}: {which} hold NaN or infinity; "
                                   f"{ckpt.checkpoint_dir(self.config.output_dir, self.step)} is not written; "
                                   + self._newest_checkpoint_words())

    def save(self) -> str:
        """Rank 0 writes the model, optimizer and state (identical on every rank); each rank adds its own files
        (``save_rank_files``), and under sharding its share of the optimizer state. Weights that are not all
        finite are refused (``TrainingDiverged``) before anything is written."""
        self._refuse_non_finite_weights()
        cfg = self.config
        phase(f"saving checkpoint-{self.step}")
        tmp = ckpt.begin_checkpoint(cfg.output_dir, self.step) if self.is_main else None
        barrier(self.world_size, f"the start of saving checkpoint-{self.step}")
        tmp_dir = ckpt.checkpoint_dir(cfg.output_dir, self.step) + ".tmp"
        sharded = self.update.shards_optimizer_state
        with ckpt.removed_if_disk_fills(tmp_dir):
            self.save_rank_files(tmp_dir)
            if sharded and not cfg.save_only_model:
                training_state.save_optimizer(tmp_dir, self.optimizer, self.policy, shard=self.rank)
        barrier(self.world_size, f"the ranks' files of checkpoint-{self.step}")
        final = ckpt.checkpoint_dir(cfg.output_dir, self.step)
        if self.is_main:
            state = {"global_step": self.step, "sampler": self.sampler.state_dict(), "total_steps": self.total_steps,
                     "world_size": self.world_size, "skipped_steps": self.skipped_steps,
                     "config": dataclasses.asdict(cfg), **self.trainer_state()}
            with replica_io(self.world_size):
                ckpt.finish_checkpoint(tmp, final, write_model=self.write_model_folder, policy=self.policy,
                                       optimizer=None if sharded or cfg.save_only_model else self.optimizer,
                                       trainer_state=state,
                                       reference=self.reference if self.saves_reference and not cfg.save_only_model
                                       else None,
                                       save_total_limit=cfg.save_total_limit)
        barrier(self.world_size, f"the end of saving checkpoint-{self.step}")
        return final

    def stop_after_signal(self, signal_number: int, stop: StopSignals, last_saved: Optional[str]) -> None:
        """A stop signal came (``trainer/stop.py``): the checkpoint of the last finished step, unless it was just
        saved, one line from rank 0, and ``RunStopped`` with code 128 + the signal's number."""
        name = signal.Signals(signal_number).name
        started = time.monotonic()
        if self.step == 0:
            what = "before the first step: nothing to save"
        else:
            if last_saved is None or last_saved != ckpt.checkpoint_dir(self.config.output_dir, self.step):
                last_saved = self.save()
            since = f", {stop.seconds_since():.1f} s after the signal" if stop.received_at is not None else ""
            what = (f"{last_saved} holds step {self.step} (written in {time.monotonic() - started:.1f} s{since}); "
                    "--resume latest continues from it")
        code = 128 + signal_number
        if self.is_main:
            print(f"stopped by {name}: {what}; exit code {code}", flush=True)
        raise RunStopped(code)

    # ---- the run -----------------------------------------------------------------------------
    def evaluate(self, echo) -> dict:
        """The held-out score, every rank answering its own slice."""
        phase("held-out evaluation")
        def sum_over_ranks(values):
            return [sum_across_ranks(v, self.world_size, "the held-out scores") for v in values]

        with self.precision.compute():
            return self.heldout.evaluate(self.generator, self.step, echo=echo if self.is_main else lambda _: None,
                                         rank=self.rank, world_size=self.world_size, sum_over_ranks=sum_over_ranks)

    def train(self) -> dict:
        cfg = self.config
        history = []
        bar = tqdm(total=self.total_steps, initial=self.step, disable=cfg.disable_tqdm or not self.is_main,
                   desc=self.name, unit="step")
        last_saved = None
        stop = StopSignals(cfg.stop_signals, cfg.stop_grace_seconds, cfg.output_dir, self.is_main)
        try:
            stop.start()
            if self.heldout is not None and self.step == 0:  # the score training starts from
                start = self.evaluate(bar.write)
                if self.is_main:
                    self.logger.log(0, start, echo=lambda _: None)
            while self.step < self.total_steps:
                if (signal_number := stop.agreed(self.world_size)) is not None:  # every rank, at the same step
                    self.stop_after_signal(signal_number, stop, last_saved)
                metrics = self.training_step()
                if self.heldout is not None and self.heldout.due(self.step, self.total_steps):
                    metrics.update(self.evaluate(bar.write))
                history.append(metrics)
                bar.update(1)
                bar.set_postfix({k: f"{metrics[k]:.4f}" for k in ("reward", "loss") if k in metrics})
                if self.is_main and (self.step % cfg.logging_steps == 0 or "eval/score" in metrics):
                    self.logger.log(self.step, metrics, echo=bar.write)
                rows = self.completion_rows()
                if rows is not None:  # every rank's, gathered, so that the file holds the whole global batch
                    rows = [row for part in gather_objects(rows, self.world_size, "the completions' rows")
                            for row in part]
                if rows and self.is_main:
                    self.logger.log_completions(rows)
                    if cfg.log_completions:
                        self.logger.print_completions(rows, cfg.num_completions_to_print, echo=bar.write)
                if cfg.save_steps and self.step % cfg.save_steps == 0:
                    last_saved = self.save()
            if last_saved is None or not last_saved.endswith(f"checkpoint-{self.step}"):
                last_saved = self.save()
        except (RuntimeError, SystemError) as e:  # a collective that failed: named after the rank that stopped,
            # when one did (a gradient all-reduce that fails inside the backward's hooks reaches here as Paddle's
            # SystemError "run_backward returned a result with an exception set", caused by the collective's error)
            failure = explain_failure(e)
            if failure is e:
                raise
            raise failure from e
        finally:
            stop.close()
            bar.close()
            if self.logger is not None:
                self.logger.close()
        return {"history": history, "checkpoint": last_saved, "output_dir": cfg.output_dir}
