"""Every config key, declared once: its type, default, help string, and the values it may take (``key``'s bounds
for a number, choices for a word), in groups by concern. The job configs (``paddle_r1.config.jobs``) are made of these
groups and add the rules between keys; ``paddle-r1 train --help`` and docs/config.md show the groups
(``paddle_r1.config.help``).

Names follow TRL's ``GRPOConfig`` and PaddleMIX's r1_mllm arguments so users can carry their settings over.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Optional, Union

from ..algorithms.names import (ADV_ESTIMATORS, ADVANTAGE_ESTIMATORS, IMPORTANCE_SAMPLING_LEVELS, KL_ESTIMATES,
                                KL_ESTIMATORS, LOG_RATIO_LEVELS, LOSS_TYPE_RULES, LOSS_TYPES,
                                MULTI_OBJECTIVE_AGGREGATIONS, SAMPLER_CORRECTIONS, SAMPLER_MODES, SCALE_REWARDS,
                                SHARDING_STAGES)
from .values import Bounds, above, at_least
from ..memory import UNDO_COPY_BUDGET_GIB


DEFAULT_QUESTION_TEMPLATE = (
    "{Question} First output the thinking process in <think> </think> tags and then output the final "
    "answer in <answer> </answer> tags."
)
# The thinking is left empty: SFT here teaches the format and a first answer.
DEFAULT_ANSWER_TEMPLATE = "<think> </think><answer>{Answer}</answer>"
DTYPES = ("float32", "bfloat16", "float16")
ROLLOUT_ENGINES = ("auto", "one_token", "layers")  # see paddle_r1.generation.decoder
LR_SCHEDULERS = ("linear", "cosine", "constant", "constant_with_warmup", "polynomial")  # paddleformers' SchedulerType
REFERENCE_UPDATES = ("", "none", "sync", "ema")  # "": sync when sync_ref_model, else none
REPORT_TO = ("visualdl", "swanlab", "wandb", "none")  # see paddle_r1.telemetry.trackers
SEEDS = Bounds(0, 2 ** 32, high_open=True, why="the seeds numpy takes")
UNIT = Bounds(0, 1)  # a fraction or probability, both ends allowed


def key(default=dataclasses.MISSING, help: str = "", *, factory=dataclasses.MISSING, bounds: Optional[Bounds] = None,
        choices: Optional[tuple] = None):
    """A config key: its default (``factory`` for a list or dict), its one help string, which ``paddle-r1 train
    --help`` and docs/config.md show (``paddle_r1.config.help``), and the values it may take: ``bounds`` for a number
    (a list key's items each; never a NaN or infinity), ``choices`` for a word. ``JobKeys.validate`` checks them; a key
    a job class declares again keeps its base's bounds and choices. A key group's docstring's first line is its title
    in the help."""
    metadata = {"help": help, "bounds": bounds, "choices": choices}
    return field(default=default, default_factory=factory, metadata=metadata)


def declared(cls, what: str) -> dict:
    """{key: its declared ``bounds`` or ``choices``} over ``cls``'s keys, a redeclared key keeping its base's."""
    table = {}
    for klass in reversed(cls.__mro__):
        for name, f in getattr(klass, "__dataclass_fields__", {}).items():
            if f.metadata.get(what) is not None:
                table[name] = f.metadata[what]
    return table


@dataclass
class ModelKeys:
    """Model and memory

    The keys both jobs take."""

    model_name_or_path: str = key("", "the model folder: a published Qwen2-VL / Qwen2.5-VL / Qwen3-VL download or a "
                                  "checkpoint-N/ folder")
    dtype: str = key("float32", "float32 | bfloat16 | float16: the training precision. bfloat16: 16-bit weights and "
                     "activations; float16: Paddle's O1 mixed precision (float32 weights, float16 products, a loss "
                     "scaler), what a GPU without bfloat16 (V100, T4) runs for bfloat16; a CPU runs float32 only",
                     choices=DTYPES)
    device: Optional[str] = key(None, "gpu, gpu:N, cpu, ...; default: gpu when Paddle was built with CUDA, else cpu")
    tune_cpu_math: bool = key(True, "on the CPU: MKL's AVX-512 or AVX2 kernels on AMD processors and glibc's large "
                              "heap blocks (paddle_r1/cpu_math.py)")
    freeze_vision: bool = key(False, "train the language model only; the vision tower's weights stay as loaded")
    gradient_checkpointing: bool = key(False, "recompute activations in the backward pass (memory for time)")
    attn_implementation: Optional[str] = key(None, "eager | sdpa; default: sdpa on GPU (flash / memory-efficient), "
                                             "eager on CPU")
    lora: bool = key(False, "train LoRA adapters on the language model instead of all weights")
    lora_rank: int = key(8, "LoRA's rank r", bounds=at_least(1))
    lora_alpha: float = key(16.0, "LoRA's alpha: the adapters' output is scaled by alpha / rank", bounds=above(0))
    lora_dropout: float = key(0.0, "dropout on the adapters' input", bounds=Bounds(0, 1, high_open=True))
    disable_dropout: bool = key(False, "every dropout layer of the policy drops nothing (TRL's): lora_dropout and "
                                "PaddleOCR-VL's hidden_dropout, whatever their settings")
    lora_target_modules: Optional[list[str]] = key(None, "regexes over layer names; default: the decoder's "
                                                   "projections")
    coord_system: Optional[str] = key(None, "abs_resized | rel_1000 | abs_original: the system the model answers "
                                      "boxes in; default: the model family's own (paddle_r1.models.coords)")
    min_pixels: Optional[int] = key(None, "fewest pixels an image is resized to; default: the processor's "
                                    "preprocessor_config.json", bounds=at_least(1))
    max_pixels: Optional[int] = key(None, "most pixels an image is resized to (image tokens = pixels / 28^2); "
                                    "default: the processor's preprocessor_config.json", bounds=at_least(1))
    logprob_chunk_size: int = key(1024, "completion tokens whose logits exist at once (memory of the log-probs)",
                                  bounds=at_least(1))


@dataclass
class DataKeys:
    """Data

    The keys both jobs take."""

    dataset_name: Optional[str] = key(None, "synthetic_rec (shapes to locate) or synthetic_zoom (a small pattern to "
                                      "crop and name, with scripted crop episodes) for a built-in set, else unset")
    data_path: Optional[str] = key(None, "a json/jsonl/csv/parquet file, a datasets folder, or a mixture yaml")
    image_root: Optional[str] = key(None, "folder relative image paths are read from; default: the data file's")
    data_format: Optional[str] = key(None, "rec | conversation | r1v | r1v_eval | grounding | products | generic | "
                                     "easyr1 | temporal_grounding; default: detected from the records")
    strict_data: bool = key(False, "stop at the first bad record instead of skipping and counting it")
    shuffle_dataset: bool = key(True, "each epoch draws the samples in a seeded random order (TRL's); false: in the "
                                "data's own order, every epoch (a curriculum written into the file)")
    image_columns: Optional[list[str]] = key(None, "products format: the columns holding image paths")
    image_cache_dir: Optional[str] = key(None, "where images stored inside datasets folders are written")
    image_placement: str = key("markers", "markers: images where the problem's <image> markers are; before_text: "
                               "all images first (VLM-R1's)")
    max_image_pixels: Optional[int] = key(None, "an image with more pixels is a bad image; default: Pillow's limit, "
                                          "about 89M", bounds=at_least(1))
    question_template: str = key(DEFAULT_QUESTION_TEMPLATE, "the prompt's text; {Question} is the sample's problem")
    system_prompt: Optional[str] = key(None, "a system message before every prompt; default: none")
    # a clip's frames and their size, as qwen-vl-utils picks them, or Qwen3-VL's video processor (paddle_r1.data.video)
    video_fps: float = key(2.0, "frames kept per second of a clip (EasyR1's, qwen-vl-utils' fps)", bounds=above(0))
    video_min_frames: int = key(4, "fewest frames kept of a clip (rounded up to 2; Qwen3-VL: as it is)",
                                bounds=at_least(2))
    video_max_frames: int = key(768, "most frames kept of a clip (rounded down to 2; Qwen3-VL: as it is)",
                                bounds=at_least(2))
    video_min_pixels: int = key(128 * 28 * 28, "fewest pixels a frame is resized to (Qwen2/2.5-VL; Qwen3-VL budgets "
                                "whole clips by its video_preprocessor_config.json's size)", bounds=at_least(1))
    video_max_pixels: int = key(768 * 28 * 28, "most pixels a frame is resized to, never above 768 x 28 x 28 "
                                "(qwen-vl-utils' cap) (Qwen2/2.5-VL; Qwen3-VL: see video_min_pixels)",
                                bounds=at_least(1))
    video_total_pixels: int = key(int(128000 * 28 * 28 * 0.9), "most pixels of a clip's frames together (video "
                                  "tokens = pixels / 28^2 / 2); long clips get smaller frames; Qwen3-VL: caps its "
                                  "processor's size longest_edge (tokens = pixels / 32^2 / 2)", bounds=at_least(1))
    video_frames_fps: float = key(2.0, "frames per second of a video given as a folder or a list of frames",
                                  bounds=above(0))


@dataclass
class OptimizerKeys:
    """Optimizer and run length

    AdamW, schedule and run-length keys both jobs take (each job sets its own batch size and rate)."""

    per_device_train_batch_size: int = key(1, "samples per device and micro-step", bounds=at_least(1))
    learning_rate: float = key(1e-6, "AdamW's peak learning rate", bounds=at_least(0))
    weight_decay: float = key(0.0, "AdamW's decoupled weight decay", bounds=at_least(0))
    adam_beta1: float = key(0.9, "AdamW's first-moment decay", bounds=Bounds(0, 1, high_open=True))
    adam_beta2: float = key(0.999, "AdamW's second-moment decay", bounds=Bounds(0, 1, high_open=True))
    adam_epsilon: float = key(1e-8, "AdamW's epsilon (keeps its division finite)",
                              bounds=above(0, "it keeps AdamW's division finite"))
    max_grad_norm: float = key(1.0, "gradients are clipped to this global norm; 0: no clipping", bounds=at_least(0))
    max_skipped_steps: int = key(5, "a step whose loss or gradient norm is not finite is skipped; this many in a row "
                                 "stop the run", bounds=at_least(1))
    undo_non_finite_updates: Union[bool, str] = key(
        "auto", "true | false | auto: true: a step that writes a NaN or infinite weight is put back from a host copy "
        "of the weights and AdamW state this rank updates, taken before every step (about 14 bytes per trainable "
        "weight unsharded); false: no copy, such a step stops the run before anything is saved, naming the newest "
        f"checkpoint; auto: true when the copy is at most {UNDO_COPY_BUDGET_GIB:g} GiB on every rank (estimate-memory "
        "shows its size), else false (docs/reference.md, Reliability)", choices=(True, False, "auto"))
    lr_scheduler_type: str = key("constant", "linear | cosine | constant | constant_with_warmup | polynomial",
                                 choices=LR_SCHEDULERS)
    warmup_steps: int = key(0, "steps of linear warmup (wins over warmup_ratio when > 0)", bounds=at_least(0))
    warmup_ratio: float = key(0.0, "fraction of the run's steps spent in linear warmup", bounds=UNIT)
    max_steps: int = key(-1, "optimizer steps of the run; -1: num_train_epochs decides",
                         bounds=at_least(-1, "-1: num_train_epochs decides"))
    num_train_epochs: float = key(1.0, "passes over the data when max_steps is -1", bounds=above(0))
    seed: int = key(42, "the seed of sampling, dropout, LoRA's initial values and (unless data_seed) the data order",
                    bounds=SEEDS)
    data_seed: Optional[int] = key(None, "TRL's: the seed of the prompt order alone; default: seed", bounds=SEEDS)


@dataclass
class OutputKeys:
    """Output, checkpoints and trackers

    The keys both jobs take."""

    output_dir: str = key("output", "folder of checkpoint-N/, metrics.jsonl, completions.jsonl and the trackers' runs")
    logging_steps: int = key(1, "write metrics every N steps", bounds=at_least(1))
    save_steps: int = key(500, "save a checkpoint every N steps (and at the end); 0: only at the end",
                          bounds=at_least(0))
    save_total_limit: Optional[int] = key(None, "keep only the newest N checkpoints; default: all", bounds=at_least(0))
    save_only_model: bool = key(False, "checkpoints without the optimizer state (AdamW's moments and master weights, "
                                "twice the fp32 weights) nor a synced ref_model/: a resume from one is a warm start "
                                "(weights, step, data position; fresh AdamW state)")
    use_visualdl: bool = key(True, "write the metrics for VisualDL to output_dir/visualdl")
    report_to: list[str] = key(help="TRL's: trackers the run also reports to (the config, each logged step's metrics, "
                               "a table of the completions): visualdl, swanlab, wandb (pip install "
                               "'paddle_r1[swanlab]' / '[wandb]'); none: none, VisualDL included. VisualDL is on "
                               "while use_visualdl is true; where the runs go: paddle_r1/telemetry/trackers.py",
                               factory=list)
    disable_tqdm: bool = key(False, "no progress bar")
    resume_from_checkpoint: Optional[str] = key(None, "a checkpoint folder; latest: output_dir's newest (an error "
                                                "when there is none); auto: the newest when output_dir has a complete "
                                                "checkpoint, else a fresh start (VLM-R1's behaviour). Unset: a "
                                                "fresh start, so that an output folder reused by mistake does not "
                                                "silently continue another run")
    overwrite_output_dir: bool = key(False, "TRL's: a fresh start in an output_dir that holds another run (its "
                                     "checkpoint-N folders, metrics.jsonl or completions.jsonl) removes them, and "
                                     "visualdl/, first; false: such a folder stops the start, as two runs' logs "
                                     "would interleave and its checkpoints be overwritten one by one "
                                     "(resume_from_checkpoint latest continues it)")
    collective_timeout: float = key(1800.0, "seconds a rank waits at a collective for the other ranks before the job "
                                    "ends, naming the late rank and its phase; above the slowest bounded wait a step "
                                    "has (docs/reference.md, Reliability)",
                                    bounds=above(0, "seconds a rank waits for the others"))
    heartbeat_timeout: float = key(60.0, "seconds without a heartbeat from a rank (each sends one every 2 s) before "
                                   "a rank waiting for it at a collective ends the job, naming it as stopped: how "
                                   "fast a rank killed on another node ends the job",
                                   bounds=at_least(10.0, "five of the heartbeats a rank sends every 2 s"))
    stop_signals: list[str] = key(help="signals that stop the run after the step in progress, with its checkpoint "
                                  "(exit code 128 + the signal's number: 143 for SIGTERM), rather than at once: "
                                  "SIGTERM is what schedulers, Kubernetes and paddle.distributed.launch send; add "
                                  "e.g. SIGUSR1 for a scheduler told to warn ahead of a time limit; []: none",
                                  factory=lambda: ["SIGTERM"])
    stop_grace_seconds: float = key(25.0, "seconds from a stop signal to the end of the step in progress and its "
                                    "checkpoint; past them the run exits (code 1) with none, naming the newest one. "
                                    "Keep it below what the scheduler waits before SIGKILL (30 s for Kubernetes' "
                                    "default, Slurm's KillWait and paddle.distributed.launch) and above a step's "
                                    "time plus a save: a step waits up to llm_judge's timeout x (max_retries + 1) "
                                    "(30 s by default) and math-verify's batch_timeout_seconds (30 s)",
                                    bounds=above(0, "seconds"))


@dataclass
class RewardKeys:
    """Rewards"""

    reward_funcs: list[str] = key(help="registry names (paddle_r1.rewards.REWARDS) or module.path:function for your "
                                  "own", factory=lambda: ["format", "iou"])
    reward_weights: Optional[list[float]] = key(None, "one weight per reward in reward_funcs; default: 1 each",
                                                bounds=Bounds())
    reward_kwargs: dict[str, dict] = key(help="{reward name: {keyword: value}} passed to that reward, e.g. "
                                         "{gaussian_point: {alpha: 0.5}, llm_judge: {base_url: ..., model: ...}}",
                                         factory=dict)


@dataclass
class RolloutKeys:
    """Rollout

    How the G completions of each prompt are sampled."""

    num_generations: int = key(8, "G: completions per prompt (a group)",
                               bounds=at_least(2, "GRPO compares completions within a group"))
    max_completion_length: int = key(256, "most new tokens per completion", bounds=at_least(1))
    temperature: float = key(1.0, "sampling temperature", bounds=at_least(0))
    top_p: float = key(1.0, "nucleus sampling: the smallest set of tokens with this much probability",
                       bounds=Bounds(0, 1, low_open=True))
    top_k: int = key(0, "sample among the k likeliest tokens; 0: all", bounds=at_least(0))
    min_p: Optional[float] = key(None, "drop the tokens less likely than min_p times the likeliest one (after top_k "
                                 "and top_p, as transformers orders them); null: none", bounds=UNIT)
    repetition_penalty: float = key(1.0, "a token the row has seen (its prompt, its tokens so far, a multi-turn "
                                    "rollout's tool messages) has its logit divided by this when positive, multiplied "
                                    "when not, before temperature (transformers' and vLLM's); also in greedy "
                                    "decoding; 1: none, > 1 discourages repeating",
                                    bounds=above(0, "a penalty multiplies or divides logits"))
    rollout_engine: str = key("auto", "auto | one_token | layers: the decode step; one_token (every supported "
                              "family, LoRA adapters included): plain tensor operations over the decoder's weights; "
                              "layers: the model's own layers (any decoder); auto: one_token where it runs, else "
                              "layers",
                              choices=ROLLOUT_ENGINES)
    rollout_cuda_graphs: bool = key(False, "on a GPU, the one_token decode step replayed as CUDA graphs (one launch a "
                                    "token instead of a few dozen kernels a layer); each rollout checks its first "
                                    "replays against the eager step, and a failed check turns the graphs off with a "
                                    "warning, the tokens unchanged. Not yet run on a GPU: run paddle-r1 selftest "
                                    "--only cuda_graph_decode first. No effect on a CPU or with rollout_engine layers")
    rollout_bf16_products: bool = key(False, "on a CPU, the one_token decode step's products by the decoder's "
                                      "weights in bfloat16 (oneDNN, weights cast and laid out once per rollout; "
                                      "the rest of the step, the prefill and training stay float32): rollouts 1.15x "
                                      "(6.9M parameters) to 1.5x (135M) faster on an AMD Zen 4 with avx512_bf16, "
                                      "slower on a CPU without bf16 instructions (avx512_bf16, amx_bf16), and "
                                      "float32 on one without AVX-512 (oneDNN makes no bf16 product there). The "
                                      "sampled tokens then come from slightly other log-probs than the training "
                                      "forward's: set importance_sampling_correction true with it. No effect on a "
                                      "GPU (the rollout runs in the model's dtype) or with rollout_engine layers")
    tools: list[str] = key(help="tools the model may call in a multi-turn rollout: crop, zoom, frames (a span of "
                           "the sample's clip at a higher frame rate; built in) or module.path:function for your own",
                           factory=list)
    max_turns: int = key(1, "most assistant turns per episode (max_completion_length tokens each); 1: single-turn, "
                         "no tool runs; above 1 needs tools", bounds=at_least(1))


@dataclass
class ObjectiveKeys:
    """GRPO objective and reference model"""

    beta: float = key(0.04, "KL coefficient; 0 loads no reference model", bounds=at_least(0))
    epsilon: float = key(0.2, "PPO clip range: ratios outside [1 - epsilon, 1 + epsilon_high] get no gradient",
                         bounds=at_least(0))
    epsilon_high: Optional[float] = key(None, "upper clip range (DAPO's clip-higher); default: epsilon. With cispo "
                                        "the cap of the importance weight itself, eps_max (required there; 5.0 "
                                        "recommended)", bounds=at_least(0))
    delta: Optional[float] = key(None, "two-sided clipping (INTELLECT-2): the clipped loss types' importance weight "
                                 "w capped at delta first, l = -min(min(w, delta) A, clip(w, 1 - epsilon, 1 + "
                                 "epsilon_high) A): a negative advantage's weight cannot grow past it (set it above 1 "
                                 "+ epsilon_high); default: off", bounds=above(0))
    num_iterations: int = key(1, "optimizer steps per rollout (old log-probs stored at rollout time)",
                              bounds=at_least(1))
    loss_type: str = key(
        "grpo", "TRL 1.16's: the per-token loss l_t and its normalisation; w the importance weight exp(logp_t - "
        "old_t) (per completion exp(mean_t(logp - old)) at sequence level), A the advantage, m the completion mask, N "
        "completions, T_step the completion tokens of the optimizer step (all micro-batches, mean over ranks). "
        + LOSS_TYPE_RULES.choices_help(), choices=LOSS_TYPES)
    sapo_temperature_pos: float = key(1.0, "sapo's gate temperature tau for positive advantages", bounds=above(0))
    sapo_temperature_neg: float = key(1.05, "sapo's gate temperature tau for the others", bounds=above(0))
    vespo_k_pos: float = key(2.0, "vespo's k for A >= 0: how hard a weight W < 1 is turned down", bounds=Bounds())
    vespo_lambda_pos: float = key(3.0, "vespo's lambda for A >= 0: how hard a weight W > 1 is turned down",
                                  bounds=at_least(0))
    vespo_k_neg: float = key(3.0, "vespo's k for A < 0", bounds=Bounds())
    vespo_lambda_neg: float = key(2.0, "vespo's lambda for A < 0", bounds=at_least(0))
    scale_rewards: str = key("group", "group | batch | none: what the advantage is divided by (the std of the group, "
                             "of the generation batch over all ranks, as TRL's, or nothing)", choices=SCALE_REWARDS)
    multi_objective_aggregation: str = key(
        "sum_then_normalize", "sum_then_normalize: r = sum_k w_k s_k over the rewards that scored, then adv_estimator "
        "and scale_rewards | normalize_then_sum (GDPO, for mixes such as format + IoU): each reward normalised in its "
        "group first, s'_k = (s_k - mean_group(s_k)) / (std_group(s_k) + 1e-4), r = sum_k w_k s'_k, then A = (r - "
        "mean(r)) / (std(r) + 1e-4) over the generation batch's completions on all ranks (scale_rewards unused; "
        "refused with another adv_estimator, overlong_buffer or the KL in the reward)",
        choices=MULTI_OBJECTIVE_AGGREGATIONS)
    top_entropy_quantile: float = key(1.0, "rho of 'Beyond the 80/20 rule': a token's policy loss is kept only when "
                                      "its entropy is at least the (1 - rho) quantile of the entropies of the "
                                      "micro-batch's completion tokens over all ranks (TRL's torch.quantile); 1: every "
                                      "token; 0: the highest only", bounds=UNIT)
    entropy_coef: float = key(0.0, "entropy bonus: minus coef * sum_t H_t m'_t / sum m', H the policy's entropy (with "
                              "its gradient), m' the mask times the high-entropy mask, divided by "
                              "gradient_accumulation_steps only; logs policy_loss and entropy_coef; with "
                              "use_adaptive_entropy the coefficient's start", bounds=Bounds())
    use_adaptive_entropy: bool = key(False, "Skywork-OR1's adaptive entropy control (TRL 1.16's): after each optimizer "
                                     "step entropy_coef moves by entropy_coef_delta toward entropy_target (up when the "
                                     "step's entropy over every rank, on the bonus's tokens, is at or below it, else "
                                     "down, within [entropy_coef_min, entropy_coef_max]); the bonus applies only in "
                                     "steps after one whose entropy was at or below the target; logs entropy_coef "
                                     "after the update; saved and restored on resume")
    entropy_target: float = key(0.2, "adaptive entropy: the target mean entropy per token, in nats (TRL's default; "
                                "set it near the entropy your run logs early)", bounds=at_least(0))
    entropy_coef_delta: float = key(0.005, "adaptive entropy: the coefficient's step", bounds=at_least(0))
    entropy_coef_min: float = key(0.0, "adaptive entropy: the coefficient's floor", bounds=Bounds())
    entropy_coef_max: float = key(1.0, "adaptive entropy: the coefficient's ceiling", bounds=Bounds())
    off_policy_mask_threshold: Optional[float] = key(None, "DeepSeek-V3.2's off-policy sequence mask: the loss of a "
                                                     "completion with A < 0 whose mean_t(old_t - logp_t) exceeds it "
                                                     "is dropped (0 on-policy: it acts from the second of "
                                                     "num_iterations); default: off", bounds=at_least(0))
    use_bias_correction_kl: bool = key(False, "the KL term beta kl_t multiplied by the importance weight (DeepSeek-V3.2"
                                       ": the unbiased reverse-KL gradient; it changes the KL's gradient on-policy too)"
                                       "; false, as before TRL 1.16, whose default is true")
    mask_truncated_completions: bool = key(False, "completions without EOS get no gradient")
    sync_ref_model: bool = key(False, "TR-DPO: ref = a * policy + (1 - a) * ref every ref_model_sync_steps steps "
                               "(ref_model_update sync)")
    ref_model_sync_steps: int = key(64, "sync: steps between two reference updates", bounds=at_least(1))
    ref_model_mixup_alpha: float = key(0.6, "sync: a, the policy's share of the new reference", bounds=UNIT)
    ref_model_update: str = key("", "\"\" (sync when sync_ref_model, else none) | none | sync | ema; with LoRA the "
                                "reference's own adapter values are updated", choices=REFERENCE_UPDATES)
    ref_ema_decay: float = key(0.99, "ema: ref <- decay * ref + (1 - decay) * policy after every step",
                               bounds=Bounds(0, 1, low_open=True, high_open=True))


@dataclass
class VariantKeys:
    """Algorithm variants

    Formulas in paddle_r1/algorithms/loss.py and dynamic_sampling.py."""

    adv_estimator: str = key("grpo", "EasyR1's names: " + ADVANTAGE_ESTIMATORS.choices_help(), choices=ADV_ESTIMATORS)
    kl_estimator: str = key("k3", "the per-token estimate of KL(policy || reference) from the sampled tokens "
                            "(Schulman's): " + KL_ESTIMATES.choices_help(), choices=KL_ESTIMATORS)
    use_kl_loss: bool = key(True, "false: beta * sum_t KL is subtracted from each completion's reward instead of "
                            "added to the loss")
    importance_sampling_level: str = key("token", "the importance weight w's level: " + LOG_RATIO_LEVELS.choices_help(),
                                         choices=IMPORTANCE_SAMPLING_LEVELS)
    importance_sampling_correction: bool = key(
        False, "TRL's vllm_importance_sampling_correction for this project's rollout: the policy loss of each token "
        "times rho, made from d_t = old_t - sampled_t, the training forward's log-prob of the token at rollout time "
        "minus the rollout's own (from the logits it sampled from: after the repetition penalty, at the sampling "
        "temperature, after top_k, top_p and min_p); "
        "logs sampling/sampling_logp_difference/mean|max and sampling/importance_sampling_ratio/min|mean|max. Costs "
        "nothing where each micro-batch is trained before an optimizer step follows its rollout (the default: rho "
        "from the training forward's own log-probs), else a forward of the policy per micro-batch at rollout time; "
        "false here (TRL: true with vLLM), the float32 CPU rollout differs by ~1e-6 nats: turn it on where the "
        "rollout's kernels drift from the training forward (bf16 on a GPU, rollout_bf16_products on a CPU) or where "
        "repetition_penalty, top_k, top_p or min_p sample from other than the policy's distribution")
    importance_sampling_mode: str = key("sequence_mask", "the correction's rho (TRL's vllm_importance_sampling_mode): "
                                        + SAMPLER_CORRECTIONS.choices_help(), choices=SAMPLER_MODES)
    importance_sampling_clip_max: Optional[float] = key(3.0, "the correction's C_max: *_truncate caps rho at it, "
                                                        "*_mask zeroes rho above it; none: no upper bound",
                                                        bounds=above(0))
    importance_sampling_clip_min: Optional[float] = key(None, "the correction's C_min: *_truncate raises rho to it, "
                                                        "*_mask zeroes rho below it; default: no lower bound",
                                                        bounds=at_least(0))
    dynamic_sampling: bool = key(False, "DAPO: drop groups whose rewards all tie and draw further prompt batches "
                                 "until the micro-batch is full (at most max_num_gen_batches; then the last dropped "
                                 "groups fill it), decided on every rank's completions of a group; logs "
                                 "frac_reward_zero_std, num_gen_batches; deterministic and resumable")
    max_num_gen_batches: int = key(4, "dynamic sampling: prompt batches drawn at most per micro-batch",
                                   bounds=at_least(1))
    filter_key: str = key("overall", "EasyR1's online filtering band (with dynamic_sampling): overall (the reward) or "
                          "a name in reward_funcs, whose mean over a group's completions must lie strictly between "
                          "filter_low and filter_high for the group to be kept (e.g. an accuracy reward: drop solved "
                          "and hopeless prompts)")
    filter_low: Optional[float] = key(None, "the band's lower bound (strict, as EasyR1's code); default: none",
                                      bounds=Bounds())
    filter_high: Optional[float] = key(None, "the band's upper bound (strict); default: none", bounds=Bounds())
    overlong_buffer: int = key(0, "DAPO's soft overlong penalty added to the reward, -factor * (L - (L_max - "
                               "buffer)) / buffer in the last buffer tokens before max_completion_length (with tools: "
                               "of the episode's longest turn); 0: off",
                               bounds=at_least(0))
    overlong_penalty_factor: float = key(1.0, "the overlong penalty at max_completion_length", bounds=at_least(0))
    temporal_grpo: bool = key(False, "Video-R1's T-GRPO: each video prompt is also answered with its clip's frames "
                              "shuffled (temporal_grpo_generations completions, scored, not trained on); with p and p~ "
                              "the mean accuracy (the first reward function's score) of the ordered and the shuffled "
                              "completions, when p >= temporal_grpo_ratio * p~ every ordered completion with accuracy "
                              "> 0.1 gets temporal_grpo_bonus on its accuracy (w_0 x bonus on its reward); logs "
                              "temporal/ordered_accuracy, temporal/shuffled_accuracy, temporal/bonus_groups. Needs "
                              "whole groups on each device; image prompts are left as they are")
    temporal_grpo_bonus: float = key(0.3, "T-GRPO's alpha", bounds=at_least(0))
    temporal_grpo_ratio: float = key(0.8, "T-GRPO's mu", bounds=at_least(0))
    temporal_grpo_generations: Optional[int] = key(None, "T-GRPO: shuffled-frame completions per video prompt; "
                                                   "default: num_generations // 2 (Video-R1's)", bounds=at_least(1))


@dataclass
class StepKeys:
    """Step shape, sharding and completions log

    GRPO's keys beyond the shared optimizer and output keys."""

    sharding: str = key("", "\"\" | stage1 (optimizer state split over ranks) | stage2 (+ gradients; GPU/XPU)",
                        choices=SHARDING_STAGES)
    gradient_accumulation_steps: int = key(1, "micro-steps whose gradients make one optimizer step", bounds=at_least(1))
    steps_per_generation: Optional[int] = key(
        None, "TRL's: micro-steps one generation batch is split over. Its ranks x per_device_train_batch_size x "
        "steps_per_generation completions (a multiple of num_generations: whole groups) are generated at once, every "
        "steps_per_generation x num_iterations micro-steps (num_iterations counts the passes over it), and micro-step "
        "t trains on its micro-batch t mod steps_per_generation; advantages are computed over whole groups, which may "
        "span ranks and micro-steps. Default: gradient_accumulation_steps (one generation batch per optimizer step); "
        "not with generation_batch_size", bounds=at_least(1))
    generation_batch_size: Optional[int] = key(
        None, "TRL's other spelling of steps_per_generation: completions per generation batch over all ranks, a "
        "multiple of num_generations and of ranks x per_device_train_batch_size; steps_per_generation = "
        "generation_batch_size / (ranks x per_device_train_batch_size); not with steps_per_generation",
        bounds=at_least(1))
    log_completions_steps: int = key(1, "write completions.jsonl (and the trackers' completions table) every N "
                                     "steps; 0: never", bounds=at_least(0))
    log_completions: bool = key(False, "also print each logged step's completions, the rows completions.jsonl gets "
                                "(TRL's prints them every logging_steps): problem, completion, each reward, "
                                "advantage; the launch scripts keep them in train.log")
    num_completions_to_print: Optional[int] = key(None, "with log_completions, the first N of a step's completions "
                                                  "(TRL's); null: all", bounds=at_least(1))


@dataclass
class HeldoutKeys:
    """Held-out evaluation

    Greedy answers scored by eval_reward, logged as eval/score (paddle_r1.evaluation.heldout)."""

    eval_steps: int = key(0, "evaluate every N steps, plus before the first and after the last step; 0: off",
                          bounds=at_least(0))
    eval_data_path: Optional[str] = key(None, "a file in any data format; images relative to image_root or the file")
    eval_sample_num: Optional[int] = key(None, "a seeded random subset of that many samples; default: all",
                                         bounds=at_least(1))
    eval_reward: str = key("iou_accuracy", "the task's accuracy reward (counting, iou_accuracy, math, ...)")


@dataclass
class AnswerKeys:
    """SFT target"""

    answer_template: str = key(DEFAULT_ANSWER_TEMPLATE, "the target text SFT teaches; {Answer} is the solution in "
                               "the model's own terms (a box in its coordinate system, a count); must contain "
                               "{Answer}; a sample with an 'episode' is taught its episode's turns as they are")
