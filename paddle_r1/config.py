"""Job configs: one dataclass per job, read from yaml/json plus ``--key value`` overrides. The keys both
jobs take (model, data, optimizer, output) are defined once, in the key groups the job classes inherit.

Names follow TRL's ``GRPOConfig`` and PaddleMIX's r1_mllm arguments so users can carry their
settings over. Every value is checked against its key's declared type and range, and every rule between keys, in
one step (``validate``), before anything loads; an error names the key, and ``config_reading.load_config`` (which
reads files and command lines) adds the file or command line it came from. A config is not changed once validated.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Optional

from .algorithms import (ADV_ESTIMATORS, IMPORTANCE_SAMPLING_LEVELS, KL_ESTIMATORS, LOSS_TYPES,
                         MULTI_OBJECTIVE_AGGREGATIONS, SCALE_REWARDS, SHARDING_STAGES)
from .config_values import Bounds, above, apply_types, at_least, check_bounds
from .errors import ConfigError


DEFAULT_QUESTION_TEMPLATE = (
    "{Question} First output the thinking process in <think> </think> tags and then output the final "
    "answer in <answer> </answer> tags."
)
# The thinking is left empty: SFT here teaches the format and a first answer.
DEFAULT_ANSWER_TEMPLATE = "<think> </think><answer>{Answer}</answer>"
DTYPES = ("float32", "bfloat16", "float16")
ROLLOUT_ENGINES = ("auto", "one_token", "layers")  # see paddle_r1.generation.decoder
LR_SCHEDULERS = ("linear", "cosine", "constant", "constant_with_warmup", "polynomial")  # paddleformers' SchedulerType
REPORT_TO = ("visualdl", "swanlab", "wandb", "none")  # see paddle_r1.trainer.trackers


def key(default=dataclasses.MISSING, help: str = "", *, factory=dataclasses.MISSING):
    """A config key: its default (``factory`` for a list or dict) and its one help string, which ``paddle-r1 train
    --help`` and docs/config.md show (``paddle_r1.config_help``). A key group's docstring's first line is its title
    there."""
    return field(default=default, default_factory=factory, metadata={"help": help})


@dataclass
class ModelKeys:
    """Model and memory

    The keys both jobs take."""

    model_name_or_path: str = key("", "the model folder: a published Qwen2-VL / Qwen2.5-VL / Qwen3-VL download or a "
                                  "checkpoint-N/ folder")
    dtype: str = key("float32", "float32 | bfloat16 | float16: the weights' and activations' type (a GPU that lacks "
                     "bfloat16 may change it, with a warning)")
    device: Optional[str] = key(None, "gpu, gpu:N, cpu, ...; default: gpu when Paddle was built with CUDA, else cpu")
    tune_cpu_math: bool = key(True, "on the CPU: MKL's AVX2 kernels on AMD processors and glibc's large heap blocks "
                              "(paddle_r1/cpu_math.py)")
    freeze_vision: bool = key(False, "train the language model only; the vision tower's weights stay as loaded")
    gradient_checkpointing: bool = key(False, "recompute activations in the backward pass (memory for time)")
    attn_implementation: Optional[str] = key(None, "eager | sdpa; default: sdpa on GPU (flash / memory-efficient), "
                                             "eager on CPU")
    lora: bool = key(False, "train LoRA adapters on the language model instead of all weights")
    lora_rank: int = key(8, "LoRA's rank r")
    lora_alpha: float = key(16.0, "LoRA's alpha: the adapters' output is scaled by alpha / rank")
    lora_dropout: float = key(0.0, "dropout on the adapters' input")
    lora_target_modules: Optional[list[str]] = key(None, "regexes over layer names; default: the decoder's "
                                                   "projections")
    coord_system: Optional[str] = key(None, "abs_resized | rel_1000 | abs_original: the system the model answers "
                                      "boxes in; default: the model family's own (paddle_r1.models.coords)")
    min_pixels: Optional[int] = key(None, "fewest pixels an image is resized to; default: the processor's "
                                    "preprocessor_config.json")
    max_pixels: Optional[int] = key(None, "most pixels an image is resized to (image tokens = pixels / 28^2); "
                                    "default: the processor's preprocessor_config.json")
    logprob_chunk_size: int = key(1024, "completion tokens whose logits exist at once (memory of the log-probs)")


@dataclass
class DataKeys:
    """Data

    The keys both jobs take."""

    dataset_name: Optional[str] = key(None, "synthetic_rec (shapes to locate) or synthetic_zoom (a small pattern to crop "
                                      "and name, with scripted crop episodes) for a built-in set, else unset")
    data_path: Optional[str] = key(None, "a json/jsonl/csv/parquet file, a datasets folder, or a mixture yaml")
    image_root: Optional[str] = key(None, "folder relative image paths are read from; default: the data file's")
    data_format: Optional[str] = key(None, "rec | conversation | r1v | r1v_eval | grounding | products | generic; "
                                     "default: detected from the records")
    strict_data: bool = key(False, "stop at the first bad record instead of skipping and counting it")
    image_columns: Optional[list[str]] = key(None, "products format: the columns holding image paths")
    image_cache_dir: Optional[str] = key(None, "where images stored inside datasets folders are written")
    image_placement: str = key("markers", "markers: images where the problem's <image> markers are; before_text: "
                               "all images first (VLM-R1's)")
    max_image_pixels: Optional[int] = key(None, "an image with more pixels is a bad image; default: Pillow's limit, "
                                          "about 89M")
    question_template: str = key(DEFAULT_QUESTION_TEMPLATE, "the prompt's text; {Question} is the sample's problem")
    system_prompt: Optional[str] = key(None, "a system message before every prompt; default: none")


@dataclass
class OptimizerKeys:
    """Optimizer and run length

    AdamW, schedule and run-length keys both jobs take (each job sets its own batch size and rate)."""

    per_device_train_batch_size: int = key(1, "samples per device and micro-step")
    learning_rate: float = key(1e-6, "AdamW's peak learning rate")
    weight_decay: float = key(0.0, "AdamW's decoupled weight decay")
    adam_beta1: float = key(0.9, "AdamW's first-moment decay")
    adam_beta2: float = key(0.999, "AdamW's second-moment decay")
    adam_epsilon: float = key(1e-8, "AdamW's epsilon (keeps its division finite)")
    max_grad_norm: float = key(1.0, "gradients are clipped to this global norm; 0: no clipping")
    max_skipped_steps: int = key(5, "a step whose loss or gradient norm is not finite is skipped; this many in a row "
                                 "stop the run")
    undo_non_finite_updates: bool = key(True, "a step that writes a NaN or infinite weight is put back from a host "
                                        "copy of the weights and AdamW state taken before every step (a copy of this "
                                        "rank's share; cost: docs/reference.md, Reliability); false: no copy, such a "
                                        "step stops the run before anything is saved")
    lr_scheduler_type: str = key("constant", "linear | cosine | constant | constant_with_warmup | polynomial")
    warmup_steps: int = key(0, "steps of linear warmup (wins over warmup_ratio when > 0)")
    warmup_ratio: float = key(0.0, "fraction of the run's steps spent in linear warmup")
    max_steps: int = key(-1, "optimizer steps of the run; -1: num_train_epochs decides")
    num_train_epochs: float = key(1.0, "passes over the data when max_steps is -1")
    seed: int = key(42, "the seed of sampling, dropout, LoRA's initial values and (unless data_seed) the data order")
    data_seed: Optional[int] = key(None, "TRL's: the seed of the prompt order alone; default: seed")


@dataclass
class OutputKeys:
    """Output, checkpoints and trackers

    The keys both jobs take."""

    output_dir: str = key("output", "folder of checkpoint-N/, metrics.jsonl, completions.jsonl and the trackers' runs")
    logging_steps: int = key(1, "write metrics every N steps")
    save_steps: int = key(500, "save a checkpoint every N steps (and at the end); 0: only at the end")
    save_total_limit: Optional[int] = key(None, "keep only the newest N checkpoints; default: all")
    save_only_model: bool = key(False, "checkpoints without the optimizer state (AdamW's moments and master weights, "
                                "twice the fp32 weights) nor a synced ref_model/: a resume from one is a warm start "
                                "(weights, step, data position; fresh AdamW state)")
    use_visualdl: bool = key(True, "write the metrics for VisualDL to output_dir/visualdl")
    report_to: list[str] = key(help="TRL's: trackers the run also reports to (the config, each logged step's metrics, "
                               "a table of the completions): visualdl, swanlab, wandb (pip install "
                               "'paddle_r1[swanlab]' / '[wandb]'); none: none, VisualDL included. VisualDL is on "
                               "while use_visualdl is true; where the runs go: paddle_r1/trainer/trackers.py",
                               factory=list)
    disable_tqdm: bool = key(False, "no progress bar")
    resume_from_checkpoint: Optional[str] = key(None, "a checkpoint folder; latest: output_dir's newest (an error "
                                                "when there is none); auto: the newest when output_dir has a complete "
                                                "checkpoint, else a fresh start (VLM-R1's behaviour). Unset: a "
                                                "fresh start, so that an output folder reused by mistake does not "
                                                "silently continue another run")
    collective_timeout: float = key(1800.0, "seconds a rank waits at a collective for the other ranks before the job "
                                    "ends, naming the late rank and its phase; above the slowest bounded wait a step "
                                    "has (docs/reference.md, Reliability)")


def _check_choice(config, key: str, allowed: tuple) -> None:
    if getattr(config, key) not in allowed:
        raise ConfigError(f"config key {key!r}: {getattr(config, key)!r} is not one of {', '.join(allowed)}",
                          keys=(key,))


SEEDS = Bounds(0, 2 ** 32, high_open=True, why="the seeds numpy takes")
UNIT = Bounds(0, 1)  # a fraction or probability, both ends allowed
# Every numeric key of both jobs, with the values it may take (a NaN or infinity never); a list key's items each.
# ``JobKeys.validate`` checks them with the other rules, before anything loads; a test keeps the table complete.
NUMERIC_BOUNDS: dict[str, Bounds] = {
    # model and memory
    "lora_rank": at_least(1), "lora_alpha": above(0), "lora_dropout": Bounds(0, 1, high_open=True),
    "min_pixels": at_least(1), "max_pixels": at_least(1), "logprob_chunk_size": at_least(1),
    "max_image_pixels": at_least(1),
    # optimizer and run length
    "per_device_train_batch_size": at_least(1), "learning_rate": at_least(0), "weight_decay": at_least(0),
    "adam_beta1": Bounds(0, 1, high_open=True), "adam_beta2": Bounds(0, 1, high_open=True),
    "adam_epsilon": above(0, "it keeps AdamW's division finite"), "max_grad_norm": at_least(0),
    "max_skipped_steps": at_least(1), "warmup_steps": at_least(0), "warmup_ratio": UNIT,
    "max_steps": at_least(-1, "-1: num_train_epochs decides"), "num_train_epochs": above(0),
    "seed": SEEDS, "data_seed": SEEDS,
    # output
    "logging_steps": at_least(1), "save_steps": at_least(0), "save_total_limit": at_least(0),
    "collective_timeout": above(0, "seconds a rank waits for the others"),
    # GRPO
    "reward_weights": Bounds(), "num_generations": at_least(2, "GRPO compares completions within a group"),
    "max_completion_length": at_least(1), "temperature": at_least(0), "top_p": Bounds(0, 1, low_open=True),
    "top_k": at_least(0), "beta": at_least(0), "epsilon": at_least(0), "epsilon_high": at_least(0),
    "num_iterations": at_least(1), "ref_model_sync_steps": at_least(1), "ref_model_mixup_alpha": UNIT,
    "ref_ema_decay": Bounds(0, 1, low_open=True, high_open=True), "max_num_gen_batches": at_least(1),
    "overlong_buffer": at_least(0), "overlong_penalty_factor": at_least(0), "gradient_accumulation_steps": at_least(1),
    "log_completions_steps": at_least(0), "eval_steps": at_least(0), "eval_sample_num": at_least(1),
    # TRL 1.16's loss keys, EasyR1's filtering band
    "delta": above(0), "sapo_temperature_pos": above(0), "sapo_temperature_neg": above(0), "vespo_k_pos": Bounds(),
    "vespo_lambda_pos": at_least(0), "vespo_k_neg": Bounds(), "vespo_lambda_neg": at_least(0),
    "top_entropy_quantile": UNIT, "entropy_coef": Bounds(), "off_policy_mask_threshold": at_least(0),
    "filter_low": Bounds(), "filter_high": Bounds(),
}


class JobKeys:
    """What both job configs do once their keys are set: one validation step, types first (so that the rules
    compare numbers with numbers), then the rules on the shared keys (choices, ``NUMERIC_BOUNDS``), then the job's
    own."""

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        apply_types(self)
        _check_choice(self, "dtype", DTYPES)
        _check_choice(self, "lr_scheduler_type", LR_SCHEDULERS)
        check_bounds(self, NUMERIC_BOUNDS)
        for name in self.report_to:
            if name not in REPORT_TO or (name == "none" and len(self.report_to) > 1):
                raise ConfigError(f"config key 'report_to': {name!r} is not one of {', '.join(REPORT_TO)} "
                                  "(none stands alone)", keys=("report_to",))
        self.check_own_keys()

    def check_own_keys(self) -> None:
        """The job's own rules, between its keys."""

    @property
    def trackers(self) -> list[str]:
        """The trackers the run reports to: VisualDL while use_visualdl is true, then report_to's; none when
        report_to is none."""
        if self.report_to == ["none"]:
            return []
        return list(dict.fromkeys((["visualdl"] if self.use_visualdl else []) + self.report_to))

    @property
    def prompts_per_device(self) -> int:
        """Samples each device takes per micro-step: SFT's per_device_train_batch_size counts samples."""
        return self.per_device_train_batch_size

    @property
    def completions_per_device(self) -> int:
        """Rows each device trains on per micro-step (SFT: its samples)."""
        return self.per_device_train_batch_size

    group_size = 1  # rows made from one sample (GRPO: num_generations)

    def check_ranks(self, world_size: int) -> None:
        """The job's rules that need the number of ranks, checked before any model loads."""

    @property
    def prompt_order_seed(self) -> int:
        """TRL's data_seed: the seed of the prompt order alone, when set; else seed."""
        return self.seed if self.data_seed is None else self.data_seed

    def check_machine(self, device: str) -> None:
        """The job's rules that need the machine it runs on (the device, the files the config names);
        ``paddle_r1.trainer.job.prepare_job`` calls it once the device is chosen, before any model loads."""

    config_folder = None  # the folder of the file it was read from (user rewards are looked for there); not a key

    def with_values(self, **changes):
        """A copy with ``changes``, validated again (the config itself is never changed once validated)."""
        copy = dataclasses.replace(self, **changes)
        copy.config_folder = self.config_folder
        return copy


@dataclass
class RewardKeys:
    """Rewards"""

    reward_funcs: list[str] = key(help="registry names (paddle_r1.rewards.REWARDS) or module.path:function for your "
                                  "own", factory=lambda: ["format", "iou"])
    reward_weights: Optional[list[float]] = key(None, "one weight per reward in reward_funcs; default: 1 each")
    reward_kwargs: dict[str, dict] = key(help="{reward name: {keyword: value}} passed to that reward, e.g. "
                                         "{gaussian_point: {alpha: 0.5}, llm_judge: {base_url: ..., model: ...}}",
                                         factory=dict)


@dataclass
class RolloutKeys:
    """Rollout

    How the G completions of each prompt are sampled."""

    num_generations: int = key(8, "G: completions per prompt (a group)")
    max_completion_length: int = key(256, "most new tokens per completion")
    temperature: float = key(1.0, "sampling temperature")
    top_p: float = key(1.0, "nucleus sampling: the smallest set of tokens with this much probability")
    top_k: int = key(0, "sample among the k likeliest tokens; 0: all")
    rollout_engine: str = key("auto", "auto | one_token | layers: the decode step; one_token (Qwen2/2.5-VL, LoRA "
                              "adapters included): plain tensor operations over the decoder's weights; layers: the "
                              "model's own layers (any decoder); auto: one_token where it runs, else layers")


@dataclass
class ObjectiveKeys:
    """GRPO objective and reference model"""

    beta: float = key(0.04, "KL coefficient; 0 loads no reference model")
    epsilon: float = key(0.2, "PPO clip range: ratios outside [1 - epsilon, 1 + epsilon_high] get no gradient")
    epsilon_high: Optional[float] = key(None, "upper clip range (DAPO's clip-higher); default: epsilon. With cispo "
                                        "the cap of the importance weight itself, eps_max (required there; 5.0 "
                                        "recommended)")
    delta: Optional[float] = key(None, "two-sided clipping (INTELLECT-2): the clipped loss types' importance weight "
                                 "w capped at delta first, l = -min(min(w, delta) A, clip(w, 1 - epsilon, 1 + "
                                 "epsilon_high) A): a negative advantage's weight cannot grow past it (set it above 1 "
                                 "+ epsilon_high); default: off")
    num_iterations: int = key(1, "optimizer steps per rollout (old log-probs stored at rollout time)")
    loss_type: str = key(
        "grpo", "TRL 1.16's: the per-token loss l_t and its normalisation; w the importance weight exp(logp_t - "
        "old_t) (per completion exp(mean_t(logp - old)) at sequence level), A the advantage, m the completion mask, N "
        "completions, T_step the completion tokens of the optimizer step (all micro-batches, mean over ranks). grpo: "
        "l = -min(w A, clip(w, 1 - epsilon, 1 + epsilon_high) A), mean_i(sum_t l m / sum_t m) | bnpo: same l, sum l m "
        "/ sum m over the micro-batch | dr_grpo: same l, sum l m / (N max_completion_length) | dapo: same l, sum l m / "
        "T_step | luspo (use with importance_sampling_level sequence): same l, mean_i(sum_t l m), a completion weighs "
        "by its length | cispo (MiniMax-M1, ScaleRL): l = -sg(min(w, epsilon_high)) A logp_t (sg: no gradient "
        "through the weight), sum l m / T_step | sapo: l = -sigmoid(tau (w - 1)) 4 / tau A, tau = "
        "sapo_temperature_pos if A > 0 else sapo_temperature_neg, normalised as grpo | vespo (token level): l = "
        "-sg(phi(W)) A logp_t, W = exp(clip(sum_t m clip(logp - old, -20, 20), ln 1e-8, 20)) the completion's weight, "
        "phi(W) = exp(lambda + k ln W - lambda W) (k, lambda: vespo_*_pos if A >= 0, else vespo_*_neg), sum l m / "
        "T_step. Logged besides: clip_ratio/* (the clipped ones), cispo_clip_ratio (w > epsilon_high, A > 0), "
        "vespo/phi_seq_mean")
    sapo_temperature_pos: float = key(1.0, "sapo's gate temperature tau for positive advantages")
    sapo_temperature_neg: float = key(1.05, "sapo's gate temperature tau for the others")
    vespo_k_pos: float = key(2.0, "vespo's k for A >= 0: how hard a weight W < 1 is turned down")
    vespo_lambda_pos: float = key(3.0, "vespo's lambda for A >= 0: how hard a weight W > 1 is turned down")
    vespo_k_neg: float = key(3.0, "vespo's k for A < 0")
    vespo_lambda_neg: float = key(2.0, "vespo's lambda for A < 0")
    scale_rewards: str = key("group", "group | batch | none: what the advantage is divided by (the std of the group, "
                             "of the batch, or nothing)")
    multi_objective_aggregation: str = key(
        "sum_then_normalize", "sum_then_normalize: r = sum_k w_k s_k over the rewards that scored, then adv_estimator "
        "and scale_rewards | normalize_then_sum (GDPO, for mixes such as format + IoU): each reward normalised in its "
        "group first, s'_k = (s_k - mean_group(s_k)) / (std_group(s_k) + 1e-4), r = sum_k w_k s'_k, then A = (r - "
        "mean(r)) / (std(r) + 1e-4) over the micro-step's completions on all ranks (scale_rewards unused; refused with "
        "another adv_estimator, overlong_buffer or the KL in the reward)")
    top_entropy_quantile: float = key(1.0, "rho of 'Beyond the 80/20 rule': a token's policy loss is kept only when "
                                      "its entropy is at least the (1 - rho) quantile of the entropies of the "
                                      "micro-batch's completion tokens over all ranks (TRL's torch.quantile); 1: every "
                                      "token; 0: the highest only")
    entropy_coef: float = key(0.0, "entropy bonus: minus coef * sum_t H_t m'_t / sum m', H the policy's entropy (with "
                              "its gradient), m' the mask times the high-entropy mask, divided by "
                              "gradient_accumulation_steps only; logs policy_loss and entropy_coef (TRL's adaptive "
                              "use_adaptive_entropy is not offered)")
    off_policy_mask_threshold: Optional[float] = key(None, "DeepSeek-V3.2's off-policy sequence mask: the loss of a "
                                                     "completion with A < 0 whose mean_t(old_t - logp_t) exceeds it "
                                                     "is dropped (0 on-policy: it acts from the second of "
                                                     "num_iterations); default: off")
    use_bias_correction_kl: bool = key(False, "the KL term beta kl_t multiplied by the importance weight (DeepSeek-V3.2"
                                       ": the unbiased reverse-KL gradient; it changes the KL's gradient on-policy too)"
                                       "; false, as before TRL 1.16, whose default is true")
    mask_truncated_completions: bool = key(False, "completions without EOS get no gradient")
    sync_ref_model: bool = key(False, "TR-DPO: ref = a * policy + (1 - a) * ref every ref_model_sync_steps steps "
                               "(ref_model_update sync)")
    ref_model_sync_steps: int = key(64, "sync: steps between two reference updates")
    ref_model_mixup_alpha: float = key(0.6, "sync: a, the policy's share of the new reference")
    ref_model_update: str = key("", "\"\" (sync when sync_ref_model, else none) | none | sync | ema; with LoRA the "
                                "reference's own adapter values are updated")
    ref_ema_decay: float = key(0.99, "ema: ref <- decay * ref + (1 - decay) * policy after every step")


@dataclass
class VariantKeys:
    """Algorithm variants

    Formulas in paddle_r1/trainer/loss.py and dynamic_sampling.py."""

    adv_estimator: str = key("grpo", "EasyR1's names: grpo ((r - mean_group) / std as scale_rewards says) | rloo "
                             "(r_i - mean_{j != i} r_j) | reinforce_plus_plus ((r - mu) / sigma over all completion "
                             "tokens of the batch, no group baseline) | dr_grpo (r - mean_group)")
    kl_estimator: str = key("k3", "k1 (logp - ref) | k2 ((logp - ref)^2 / 2) | k3 (exp(ref - logp) - (ref - logp) "
                            "- 1)")
    use_kl_loss: bool = key(True, "false: beta * sum_t KL is subtracted from each completion's reward instead of "
                            "added to the loss")
    importance_sampling_level: str = key("token", "token | sequence (GSPO, as TRL: one ratio per completion, "
                                         "exp(mean_t(logp - old_logp)); the clip_ratio/* metrics then count "
                                         "completions, not tokens, as TRL 1.16 logs them)")
    dynamic_sampling: bool = key(False, "DAPO: drop groups whose rewards all tie and draw further prompt batches "
                                 "until the micro-batch is full (at most max_num_gen_batches; then the last dropped "
                                 "groups fill it), decided on every rank's completions of a group; logs "
                                 "frac_reward_zero_std, num_gen_batches; deterministic and resumable")
    max_num_gen_batches: int = key(4, "dynamic sampling: prompt batches drawn at most per micro-batch")
    filter_key: str = key("overall", "EasyR1's online filtering band (with dynamic_sampling): overall (the reward) or "
                          "a name in reward_funcs, whose mean over a group's completions must lie strictly between "
                          "filter_low and filter_high for the group to be kept (e.g. an accuracy reward: drop solved "
                          "and hopeless prompts)")
    filter_low: Optional[float] = key(None, "the band's lower bound (strict, as EasyR1's code); default: none")
    filter_high: Optional[float] = key(None, "the band's upper bound (strict); default: none")
    overlong_buffer: int = key(0, "DAPO's soft overlong penalty added to the reward, -factor * (L - (L_max - "
                               "buffer)) / buffer in the last buffer tokens before max_completion_length; 0: off")
    overlong_penalty_factor: float = key(1.0, "the overlong penalty at max_completion_length")


@dataclass
class StepKeys:
    """Step shape, sharding and completions log

    GRPO's keys beyond the shared optimizer and output keys."""

    sharding: str = key("", "\"\" | stage1 (optimizer state split over ranks) | stage2 (+ gradients; GPU/XPU)")
    gradient_accumulation_steps: int = key(1, "micro-steps whose gradients make one optimizer step")
    log_completions_steps: int = key(1, "write completions.jsonl (and the trackers' completions table) every N "
                                     "steps; 0: never")


@dataclass
class HeldoutKeys:
    """Held-out evaluation

    Greedy answers scored by eval_reward, logged as eval/score (paddle_r1.evaluation.heldout)."""

    eval_steps: int = key(0, "evaluate every N steps, plus before the first and after the last step; 0: off")
    eval_data_path: Optional[str] = key(None, "a file in any data format; images relative to image_root or the file")
    eval_sample_num: Optional[int] = key(None, "a seeded random subset of that many samples; default: all")
    eval_reward: str = key("iou_accuracy", "the task's accuracy reward (counting, iou_accuracy, math, ...)")


@dataclass
class GRPOConfig(HeldoutKeys, StepKeys, VariantKeys, ObjectiveKeys, RolloutKeys, RewardKeys, OutputKeys, OptimizerKeys,
                 DataKeys, ModelKeys, JobKeys):
    """``paddle-r1 train``: the shared keys (model, data, optimizer, output) and GRPO's own."""

    per_device_train_batch_size: Optional[int] = key(
        None, "completions per device and micro-step, as in TRL, VLM-R1 and EasyDistill: a multiple of "
        "num_generations (whole groups; prompts per device = this / num_generations), or a divisor of it (part of one "
        "group, whose other completions are on the next num_generations / this ranks, TRL's layout; ranks x this must "
        "be a multiple of num_generations); default: num_generations (one prompt). One optimizer step sees this x "
        "devices x gradient_accumulation_steps completions")

    def check_own_keys(self) -> None:
        _check_choice(self, "rollout_engine", ROLLOUT_ENGINES)
        _check_choice(self, "loss_type", LOSS_TYPES)
        _check_choice(self, "scale_rewards", SCALE_REWARDS)
        _check_choice(self, "multi_objective_aggregation", MULTI_OBJECTIVE_AGGREGATIONS)
        _check_choice(self, "ref_model_update", ("", "none", "sync", "ema"))
        _check_choice(self, "adv_estimator", ADV_ESTIMATORS)
        _check_choice(self, "kl_estimator", KL_ESTIMATORS)
        _check_choice(self, "importance_sampling_level", IMPORTANCE_SAMPLING_LEVELS)
        if self.overlong_buffer >= self.max_completion_length:
            raise ConfigError(f"config key 'overlong_buffer': {self.overlong_buffer} must be below "
                              f"max_completion_length {self.max_completion_length}",
                              keys=("overlong_buffer", "max_completion_length"))
        _check_choice(self, "sharding", SHARDING_STAGES)
        self._check_batch()
        self._check_rewards()
        self._check_reference()
        self._check_policy_loss()
        self._check_filter_band()
        if self.eval_steps and not self.eval_data_path:
            raise ConfigError("config key 'eval_data_path' is required when eval_steps > 0",
                              keys=("eval_data_path", "eval_steps"))

    def _check_batch(self) -> None:
        """per_device_train_batch_size counts completions (TRL's meaning): a device holds whole groups (a multiple of
        num_generations), or a part of one group whose other completions are on the next ranks (a divisor of it)."""
        batch, group = self.per_device_train_batch_size, self.num_generations
        if batch is not None and batch % group and group % batch:
            raise ConfigError(
                f"config keys 'per_device_train_batch_size' and 'num_generations': per_device_train_batch_size counts "
                f"completions (as in TRL), and {batch} neither holds whole groups of num_generations {group} (a "
                f"multiple of it) nor an equal part of one group (a divisor of it, the rest of the group on the next "
                f"ranks); use a multiple or a divisor of {group}", keys=("per_device_train_batch_size", "num_generations"))

    def check_ranks(self, world_size: int) -> None:
        """Before any model loads, once the number of ranks is known: a group spread over ranks needs them all
        (TRL: the global batch, ranks x per_device_train_batch_size, is a multiple of num_generations)."""
        if self.ranks_per_group > 1 and world_size % self.ranks_per_group:
            raise ConfigError(
                f"config keys 'per_device_train_batch_size' and 'num_generations': a group of {self.num_generations} "
                f"completions takes {self.ranks_per_group} ranks of {self.completions_per_device}, but this job has "
                f"{world_size} rank(s): ranks x per_device_train_batch_size ({world_size * self.completions_per_device})"
                f" must be a multiple of num_generations, as in TRL",
                keys=("per_device_train_batch_size", "num_generations"))

    @property
    def completions_per_device(self) -> int:
        """per_device_train_batch_size, num_generations when unset (one prompt's group)."""
        return self.per_device_train_batch_size or self.num_generations

    @property
    def group_size(self) -> int:
        return self.num_generations

    @property
    def prompts_per_device(self) -> int:
        """Prompts each device holds completions of per micro-step: per_device_train_batch_size / num_generations,
        one when a device holds part of a group."""
        return max(1, self.completions_per_device // self.num_generations)

    @property
    def generations_per_device(self) -> int:
        """Completions each of a device's prompts gets there: num_generations, or the device's part of the group."""
        return min(self.completions_per_device, self.num_generations)

    @property
    def ranks_per_group(self) -> int:
        """Consecutive ranks a group's completions are on (1: a device holds whole groups)."""
        return max(1, self.num_generations // self.completions_per_device)

    def _check_rewards(self) -> None:
        if not self.reward_funcs:
            raise ConfigError("config key 'reward_funcs': no rewards", keys=("reward_funcs",))
        if self.reward_weights is not None and len(self.reward_weights) != len(self.reward_funcs):
            raise ConfigError(f"config key 'reward_weights': {len(self.reward_weights)} weights for "
                              f"{len(self.reward_funcs)} reward_funcs {self.reward_funcs}",
                              keys=("reward_weights", "reward_funcs"))
        settable = set(self.reward_funcs) | ({self.eval_reward} if self.eval_steps else set())
        stray = sorted(set(self.reward_kwargs) - settable)
        if stray:
            names = "reward_funcs or eval_reward" if self.eval_steps else "reward_funcs"
            raise ConfigError(f"config key 'reward_kwargs': {', '.join(map(repr, stray))} not in {names}",
                              keys=("reward_kwargs", "reward_funcs"))

    def _check_policy_loss(self) -> None:
        """TRL 1.16's loss keys beyond their ranges: cispo's cap, which TRL takes from epsilon_high (an unset
        epsilon_high would cap every importance weight at epsilon, 0.2), and what GDPO leaves no place for."""
        if self.loss_type == "cispo" and self.epsilon_high is None:
            raise ConfigError("config keys 'loss_type' and 'epsilon_high': cispo caps the importance weight itself at "
                              "epsilon_high (ScaleRL's eps_max; 5.0 recommended); set it (unset, it would be "
                              f"epsilon, {self.epsilon})", keys=("loss_type", "epsilon_high"))
        if self.multi_objective_aggregation == "normalize_then_sum":
            beside = [f"{key} {value!r}" for key, value, alone in (
                ("adv_estimator", self.adv_estimator, self.adv_estimator == "grpo"),
                ("overlong_buffer", self.overlong_buffer, not self.overlong_buffer),
                ("use_kl_loss", self.use_kl_loss, self.use_kl_loss or not self.uses_reference)) if not alone]
            if beside:
                raise ConfigError(f"config key 'multi_objective_aggregation': normalize_then_sum normalises each "
                                  f"reward function's scores (GDPO), which leaves no place for {', '.join(beside)} "
                                  "(they act on the summed reward); use sum_then_normalize with them",
                                  keys=("multi_objective_aggregation",))

    def _check_filter_band(self) -> None:
        """EasyR1's online filtering band goes with dynamic sampling, which draws the groups to replace."""
        band = [key for key in ("filter_low", "filter_high") if getattr(self, key) is not None]
        if band and not self.dynamic_sampling:
            raise ConfigError(f"config key {band[0]!r}: the filtering band drops groups and draws others, which is "
                              "dynamic_sampling: set dynamic_sampling true", keys=(band[0], "dynamic_sampling"))
        if len(band) == 2 and not self.filter_low < self.filter_high:
            raise ConfigError(f"config keys 'filter_low' and 'filter_high': {self.filter_low} is not below "
                              f"{self.filter_high}", keys=("filter_low", "filter_high"))
        if self.filter_key != "overall" and self.filter_key not in self.reward_funcs:
            raise ConfigError(f"config key 'filter_key': {self.filter_key!r} is neither overall (the weighted "
                              f"reward) nor one of reward_funcs {self.reward_funcs}", keys=("filter_key", "reward_funcs"))

    def _check_reference(self) -> None:
        if self.sync_ref_model and self.ref_model_update not in ("", "sync"):
            raise ConfigError(f"config keys 'sync_ref_model' and 'ref_model_update': sync_ref_model is "
                              f"ref_model_update sync, not {self.ref_model_update!r}",
                              keys=("sync_ref_model", "ref_model_update"))

    @property
    def reference_update(self) -> str:
        """How the reference follows the policy: none, sync (TR-DPO's periodic mix, TRL's sync_ref_model) or ema;
        with LoRA it is the reference's own adapter values that are updated."""
        return self.ref_model_update or ("sync" if self.sync_ref_model else "none")

    def check_machine(self, device: str) -> None:
        super().check_machine(device)
        if self.sharding == "stage2" and device.split(":")[0] == "cpu":
            raise ConfigError("config key 'sharding': stage2 runs through paddle.distributed.sharding."
                              "group_sharded_parallel, which supports GPU/XPU only; on CPU use stage1",
                              keys=("sharding",))
        if self.eval_steps and not os.path.exists(self.eval_data_path):
            raise ConfigError(f"config key 'eval_data_path': {self.eval_data_path} not found",
                              keys=("eval_data_path",))

    @property
    def clip_high(self) -> float:
        return self.epsilon if self.epsilon_high is None else self.epsilon_high

    @property
    def uses_reference(self) -> bool:
        """Reference log-probs are computed (for the KL term) only when beta != 0."""
        return self.beta != 0

    @property
    def loads_reference_model(self) -> bool:
        """A second, frozen model is loaded as the reference only when the KL term is on and LoRA is off: with
        LoRA the reference is the policy with its adapters off."""
        return self.uses_reference and not self.lora


@dataclass
class AnswerKeys:
    """SFT target"""

    answer_template: str = key(DEFAULT_ANSWER_TEMPLATE, "the target text SFT teaches; {Answer} is the solution in "
                               "the model's own terms (a box in its coordinate system, a count); must contain {Answer}; "
                               "a sample with an 'episode' is taught its episode's turns as they are")


@dataclass
class SFTConfig(AnswerKeys, OutputKeys, OptimizerKeys, DataKeys, ModelKeys, JobKeys):
    """``paddle-r1 sft``: supervised fine-tuning on the answers built from the solutions, before GRPO.

    The shared keys keep their names and meanings, so one model / data block serves both jobs; the result is
    output_dir/checkpoint-N, a model folder GRPO's model_name_or_path can name.
    """

    per_device_train_batch_size: int = key(8, "samples per device and micro-step (SFT has no generations)")
    learning_rate: float = key(1e-5, "AdamW's peak learning rate")
    output_dir: str = key("output_sft", "folder of checkpoint-N/ (a model folder GRPO's model_name_or_path can name) "
                          "and metrics.jsonl")
    save_steps: int = key(0, "save a checkpoint every N steps (and at the end); 0: only at the end")

    def check_own_keys(self) -> None:
        if "{Answer}" not in self.answer_template:
            raise ConfigError(f"config key 'answer_template': {self.answer_template!r} has no {{Answer}}",
                              keys=("answer_template",))
