"""Per-GPU memory of a GRPO run, from the config and the model's config.json alone (no weights loaded).

Why: a run that cannot fit should say so, with the keys to change, in the first second instead of an
out-of-memory error after the first rollout. ``paddle-r1 estimate-memory`` prints the table; the trainer calls
``check_fits`` at start-up on GPU.

The model is counted layer by layer from the published config fields (``count_parameters``). Memory is
persistent state (weights, reference, gradients, AdamW state after sharding, a reserve for the CUDA context and
allocator) plus the larger of two phases' working memory:

- rollout: the KV cache of B*G sequences of prompt + completion, the prefill's attention scores (eager only),
  the vision tower's forward. With tools (``max_turns`` > 1) a completion is an episode: ``max_turns`` turns of
  ``max_completion_length`` tokens and between them ``max_turns - 1`` tool results of one image each (what
  ``crop`` and ``zoom`` return) at ``max_pixels``; the log-prob passes run each episode row whole, so the vision
  tower sees every row's images;
- training forward + backward: the decoder activations kept for backward (all layers, or with
  ``gradient_checkpointing`` each layer's input plus one layer recomputed), attention scores (eager: [H, L, L]
  per sequence, kept in float32 for the softmax; sdpa / flash: none), one log-prob chunk of float32 logits,
  and the vision tower's (kept for backward only when it trains).

Activation sizes count the tensors Paddle's autograd keeps per token of one decoder layer: the two norms'
inputs, the q/k/v and o projections' inputs, rotary inputs, the attention output, and the gated MLP's
gate, up, product and down input: 9 h + 4 kv + 4 i elements. An estimate, not a measurement; the real
peak also depends on the allocator.
"""
from __future__ import annotations

import itertools
import json
import os
from dataclasses import dataclass, field, replace
from typing import Optional

GIB = 2.0**30
PROMPT_TEXT_TOKENS = 128  # system prompt, chat template and question around the image tokens
IMAGES_PER_PROMPT = 1
TOOL_TEXT_TOKENS = 32  # a tool result's message around its image: role tokens, the result's text, the next turn's start
DEFAULT_MAX_PIXELS = 12845056  # Qwen's preprocessor_config.json
RESERVE_GIB = 2.0  # CUDA context, cuBLAS / NCCL workspaces, allocator fragmentation
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass
class ModelShape:
    """What the estimate needs of a model, read from its config.json."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_dim: int  # key/value width: num_key_value_heads * head_dim
    vocab: int
    tied: bool
    vision_width: int
    vision_intermediate: int
    vision_depth: int
    vision_heads: int
    vision_full_attention_blocks: int
    patch_size: int
    merge_size: int
    temporal_patch_size: int
    family: str
    q_dim: int = 0  # query width: num_attention_heads * head_dim (hidden, unless head_dim says otherwise)
    vision_positions: int = 0  # PaddleOCR-VL's learned vision position table (rows)

    @classmethod
    def from_config(cls, config: dict) -> "ModelShape":
        text = {**config, **config.get("text_config", {})}
        vision = config["vision_config"]
        family = config["model_type"]
        qwen2_vl = family == "qwen2_vl"  # its vision width is embed_dim; hidden_size is the merger's output
        siglip = family == "paddleocr_vl"  # PaddleOCR-VL's tower names its sizes as SigLIP's
        width = vision["embed_dim"] if qwen2_vl else vision["hidden_size"]
        heads = text["num_attention_heads"]
        head_dim = text.get("head_dim") or text["hidden_size"] // heads
        depth = vision["num_hidden_layers"] if siglip else vision["depth"]
        return cls(
            hidden=text["hidden_size"], intermediate=text["intermediate_size"], layers=text["num_hidden_layers"],
            heads=heads, kv_dim=text.get("num_key_value_heads", heads) * head_dim,
            vocab=text["vocab_size"], tied=bool(config.get("tie_word_embeddings", False)),
            vision_width=width,
            vision_intermediate=width * vision["mlp_ratio"] if qwen2_vl else vision["intermediate_size"],
            vision_depth=depth, vision_heads=vision["num_attention_heads" if siglip else "num_heads"],
            vision_full_attention_blocks=(depth if qwen2_vl or siglip
                                          else len(vision.get("fullatt_block_indexes", [])) or depth),
            patch_size=vision["patch_size"], merge_size=vision["spatial_merge_size"],
            temporal_patch_size=vision.get("temporal_patch_size", 2), family=family, q_dim=heads * head_dim,
            vision_positions=(vision["image_size"] // vision["patch_size"]) ** 2 if siglip else 0,
        )


@dataclass
class ParameterCounts:
    text: int
    vision: int

    @property
    def total(self) -> int:
        return self.text + self.vision


def _linear(n_in: int, n_out: int, bias: bool) -> int:
    return n_in * n_out + (n_out if bias else 0)


def count_parameters(shape: ModelShape) -> ParameterCounts:
    """Parameters of the text decoder (embeddings, layers, final norm, lm_head unless tied) and the vision tower
    (patch embedding, blocks, patch merger), as the published checkpoints lay them out (PaddleOCR-VL's without its
    unused packing table, which paddle_r1 does not hold)."""
    h, kv, i, q = shape.hidden, shape.kv_dim, shape.intermediate, shape.q_dim or shape.hidden
    bias = shape.family != "paddleocr_vl"  # Qwen2's q, k, v have biases; ERNIE-4.5's nothing does
    layer = (_linear(h, q, bias) + 2 * _linear(h, kv, bias) + _linear(q, h, False)  # q, k, v; o
             + 3 * _linear(h, i, False) + 2 * h)  # gate, up, down; two RMSNorms
    embeddings = shape.vocab * h
    text = embeddings + shape.layers * layer + h + (0 if shape.tied else embeddings)
    if shape.family == "paddleocr_vl":
        return ParameterCounts(text=text, vision=_siglip_parameters(shape))

    w, wi = shape.vision_width, shape.vision_intermediate
    qwen2_vl = shape.family == "qwen2_vl"
    norm = 2 * w if qwen2_vl else w  # LayerNorm (weight, bias) or RMSNorm
    mlp = _linear(w, wi, True) * (1 if qwen2_vl else 2) + _linear(wi, w, True)  # fc1, fc2 or gate, up, down
    block = 2 * norm + _linear(w, 3 * w, True) + _linear(w, w, True) + mlp
    merged = w * shape.merge_size**2
    merger = norm + _linear(merged, merged, True) + _linear(merged, h, True)
    patch_embed = w * 3 * shape.temporal_patch_size * shape.patch_size**2
    return ParameterCounts(text=text, vision=patch_embed + shape.vision_depth * block + merger)


def _siglip_parameters(shape: ModelShape) -> int:
    """PaddleOCR-VL's vision tower: patch embedding (with bias), position table, LayerNorm blocks (q, k, v, out,
    fc1, fc2 with biases), the final LayerNorm, and its merger beside it (LayerNorm, two linear layers)."""
    w, wi, h = shape.vision_width, shape.vision_intermediate, shape.hidden
    block = 2 * 2 * w + 4 * _linear(w, w, True) + _linear(w, wi, True) + _linear(wi, w, True)
    patch_embed = w * 3 * shape.temporal_patch_size * shape.patch_size**2 + w
    merged = w * shape.merge_size**2
    merger = 2 * w + _linear(merged, merged, True) + _linear(merged, h, True)
    return patch_embed + shape.vision_positions * w + shape.vision_depth * block + 2 * w + merger


def lora_parameters(shape: ModelShape, rank: int) -> int:
    """Adapters (rank x (in + out) each) on the default targets of every decoder layer: qkv_proj, o_proj,
    up_gate_proj, down_proj (Qwen-VL); q, k, v, o, gate, up and down (PaddleOCR-VL's unfused projections)."""
    h, kv, i, q = shape.hidden, shape.kv_dim, shape.intermediate, shape.q_dim or shape.hidden
    if shape.family == "paddleocr_vl":
        return shape.layers * rank * ((h + q) + 2 * (h + kv) + (q + h) + 2 * (h + i) + (i + h))
    return shape.layers * rank * ((h + h + 2 * kv) + (h + h) + (h + 2 * i) + (i + h))


def read_model_config(model_name_or_path: str) -> dict:
    """config.json of a local folder; for a hub id the published fields when known (offline), else the hub's
    config.json through paddleformers (the config alone, no weights)."""
    from .models.loading import check_model_path
    from .models.published import PUBLISHED_CONFIGS

    check_model_path(model_name_or_path)
    if os.path.isdir(model_name_or_path):
        with open(os.path.join(model_name_or_path, "config.json"), encoding="utf-8") as f:
            return json.load(f)
    if model_name_or_path in PUBLISHED_CONFIGS:
        return PUBLISHED_CONFIGS[model_name_or_path]
    from paddleformers.transformers.configuration_utils import PretrainedConfig

    return PretrainedConfig.get_config_dict(model_name_or_path)[0]


@dataclass
class Estimate:
    rows: list  # (name, GiB, how it was counted)
    gpus: int
    gpu_memory_gib: float
    suggestions: list = field(default_factory=list)  # [(key, value)] that make it fit, in order

    @property
    def total_gib(self) -> float:
        return sum(gib for name, gib, _ in self.rows if not name.startswith("  "))

    @property
    def fits(self) -> bool:
        return self.total_gib <= self.gpu_memory_gib

    def table(self) -> str:
        lines = [f"{'per GPU':<34}{'GiB':>8}  how"]
        lines += [f"{name:<34}{gib:>8.1f}  {how}" for name, gib, how in self.rows]
        verdict = "fits" if self.fits else "does NOT fit"
        lines.append(f"{'total':<34}{self.total_gib:>8.1f}  {verdict} in {self.gpu_memory_gib:g} GiB "
                     f"x {self.gpus} GPU(s)")
        if self.suggestions:
            lines.append("to fit, set: " + " ".join(f"--{k} {v}" for k, v in self.suggestions))
        return "\n".join(lines)


def _activation_elements(width: int, kv: int, intermediate: int) -> int:
    """Elements autograd keeps per token of one block (see the module docstring)."""
    return 9 * width + 4 * kv + 4 * intermediate


def scores_kept_bytes(w: int) -> int:
    """Bytes per eager attention score kept for backward: the float32 softmax and its cast to the weights' dtype."""
    return 4 + w


def scores_transient_bytes(w: int) -> int:
    """Bytes per eager attention score while it is computed: scores, scores + mask, float32 softmax, cast."""
    return 3 * w + 4


def decoder_training_bytes(shape: ModelShape, sequences: int, length: int, w: int, eager: bool,
                           recompute: bool) -> tuple[int, int]:
    """(activations, attention scores) the decoder holds at the peak of a training forward + backward over
    ``sequences`` x ``length`` tokens. Without recompute the peak is the end of the forward: every layer's kept
    tensors. With ``recompute`` each layer keeps only its input, and during backward one layer is rebuilt and
    differentiated: its kept tensors, their gradients and the backward's temporaries (3x), its scores and their
    gradients (2x). Measured on CPU (``benchmarks/memory_estimate.py``): within 10% both ways."""
    tokens = sequences * length
    per_token_layer = _activation_elements(shape.hidden, shape.kv_dim, shape.intermediate) * w
    scores = sequences * shape.heads * length**2 * scores_kept_bytes(w) if eager else 0
    if recompute:
        return tokens * (shape.layers * shape.hidden * w + 3 * per_token_layer), 2 * scores
    return tokens * shape.layers * per_token_layer, shape.layers * scores


def _attention(config) -> str:
    """The estimate is for GPU, where ``attn_implementation: null`` means sdpa."""
    return config.attn_implementation or "sdpa"


def _vision_tokens(shape: ModelShape, max_pixels: int) -> tuple[int, int]:
    """(patches the vision tower sees, merged tokens the decoder sees) for one image at ``max_pixels``."""
    factor = shape.patch_size * shape.merge_size
    merged = max(1, max_pixels // factor**2)
    return merged * shape.merge_size**2, merged


def _rows(config, shape: ModelShape, gpus: int) -> list:
    """The table's rows, GiB each; indented rows are the phases' parts (the phase total counts once)."""
    w = DTYPE_BYTES[config.dtype]
    params = count_parameters(shape)
    eager = _attention(config) == "eager"
    sharding = config.sharding if gpus > 1 else ""
    if config.lora:
        trainable = lora_parameters(shape, config.lora_rank)
    else:
        trainable = params.total - (params.vision if config.freeze_vision else 0)
    optimizer_bytes = 8 + (4 if w < 4 else 0)  # two fp32 moments, + fp32 master weight for 16-bit weights
    optimizer = trainable * optimizer_bytes / (gpus if sharding else 1)
    gradients = trainable * w / (gpus if sharding == "stage2" else 1)
    reference = params.total * w if config.beta > 0 and not config.lora else 0

    patches, image_tokens = _vision_tokens(shape, config.max_pixels or DEFAULT_MAX_PIXELS)
    prompts = config.prompts_per_device
    sequences = prompts * config.generations_per_device
    prompt_len = PROMPT_TEXT_TOKENS + IMAGES_PER_PROMPT * image_tokens
    tool_results = config.max_turns - 1  # one image each
    completion = config.max_turns * config.max_completion_length + tool_results * (TOOL_TEXT_TOKENS + image_tokens)
    length = prompt_len + completion
    activations, train_scores = decoder_training_bytes(shape, sequences, length, w, eager,
                                                       config.gradient_checkpointing)
    logprob_chunk = min(config.logprob_chunk_size, sequences * completion) * shape.vocab * (w + 12)

    vision_trains = not (config.freeze_vision or config.lora)
    images = prompts * IMAGES_PER_PROMPT if not tool_results else sequences * (IMAGES_PER_PROMPT + tool_results)
    vision_patches = images * patches
    vision_layer = vision_patches * _activation_elements(shape.vision_width, shape.vision_width,
                                                         shape.vision_intermediate) * w
    image_scores = shape.vision_heads * patches**2 if eager else 0
    if vision_trains and not config.gradient_checkpointing:
        vision = shape.vision_depth * vision_layer + (shape.vision_full_attention_blocks * images * image_scores
                                                      * scores_kept_bytes(w))
    else:
        vision = vision_layer * (2 if vision_trains else 1) + image_scores * scores_transient_bytes(w)

    kv_cache = 2 * shape.layers * sequences * length * shape.kv_dim * w
    prefill_scores = sequences * shape.heads * prompt_len**2 * scores_transient_bytes(w) if eager else 0
    rollout = kv_cache + prefill_scores + vision
    training = activations + train_scores + logprob_chunk + vision
    attention = "eager [H, L, L] scores" if eager else "sdpa: no score matrix"
    recompute = "each layer recomputed" if config.gradient_checkpointing else "all layers kept"
    return [
        ("weights (policy)", params.total * w / GIB, f"{params.total / 1e9:.2f}B params x {w} B"),
        ("reference model", reference / GIB,
         "none (beta 0 or LoRA)" if not reference else "frozen copy, weights only"),
        ("gradients", gradients / GIB, f"{trainable / 1e9:.3f}B trainable x {w} B"
                                       + (f" / {gpus} (stage2)" if sharding == "stage2" else "")),
        ("AdamW state", optimizer / GIB, f"{optimizer_bytes} B per trainable"
                                         + (f" / {gpus} ({sharding})" if sharding else "")),
        ("reserve", RESERVE_GIB, "CUDA context, workspaces, fragmentation"),
        ("working memory: max(rollout, train)", max(rollout, training) / GIB,
         f"{sequences} sequences x {length} tokens ({image_tokens} image tokens from max_pixels"
         + (f"; episodes of {config.max_turns} turns, {tool_results} tool images)" if tool_results else ")")),
        ("  rollout KV cache", kv_cache / GIB, "2 x layers x kv width x tokens"),
        ("  rollout prefill attention", prefill_scores / GIB, attention),
        ("  train activations", activations / GIB, recompute),
        ("  train attention scores", train_scores / GIB, attention),
        ("  log-prob chunk", logprob_chunk / GIB, f"{config.logprob_chunk_size} tokens x vocab, float32"),
        ("  vision tower", vision / GIB, f"{vision_patches} patches, "
                                         + ("trains" if vision_trains else "frozen: forward only")),
    ]


# What a run that does not fit can change, each choice with a cost: options that only trade memory for time or
# communication are cheap, options that change what trains are dear.
_REMEDIES = [
    ("sharding", {"stage1": 1, "stage2": 2}),
    ("attn_implementation", {"sdpa": 1}),
    ("gradient_checkpointing", {True: 2}),  # ~30% more compute
    ("freeze_vision", {True: 10}),  # the vision tower stops learning
    ("lora", {True: 20}),  # only adapters learn
]
_LOWER_SIZES = "per_device_train_batch_size / num_generations / max_completion_length / max_pixels"


def _current(config, key):
    return _attention(config) if key == "attn_implementation" else getattr(config, key)


def _cheapest_fix(config, gpus: int, fits) -> Optional[dict]:
    """The cheapest set of ``_REMEDIES`` changes under which ``fits(config)`` holds (fewest keys on a tie),
    None when even all of them together are not enough."""
    options = [[(key, None, 0)] + [(key, value, cost) for value, cost in choices.items()
                                   if value != _current(config, key) and not (key == "sharding" and gpus == 1)]
               for key, choices in _REMEDIES]
    best = None
    for combination in itertools.product(*options):
        changes = {key: value for key, value, _ in combination if value is not None}
        rank = (sum(cost for *_, cost in combination), len(changes))
        if changes and (best is None or rank < best[0]) and fits(replace(config, **changes)):
            best = (rank, changes)
    return best and best[1]


def estimate(config, gpus: int, gpu_memory_gib: float, model_config: Optional[dict] = None) -> Estimate:
    """Per-GPU table for ``config`` (a GRPOConfig) on ``gpus`` GPUs of ``gpu_memory_gib`` each. When it does not
    fit, ``suggestions`` holds the cheapest config changes that make it fit, or all of them and a note to lower
    the sizes when none do."""
    shape = ModelShape.from_config(model_config or read_model_config(config.model_name_or_path))

    def fits(cfg) -> bool:
        return Estimate(_rows(cfg, shape, gpus), gpus, gpu_memory_gib).fits

    result = Estimate(_rows(config, shape, gpus), gpus, gpu_memory_gib)
    if not result.fits:
        changes = _cheapest_fix(config, gpus, fits)
        if changes is None:
            changes = {key: max(choices, key=choices.get) for key, choices in _REMEDIES
                       if not (key == "sharding" and gpus == 1)}
            changes[_LOWER_SIZES] = "lower"
        result.suggestions = [(key, "true" if value is True else value) for key, value in changes.items()]
    return result


def check_fits(config, gpus: int) -> Optional[Estimate]:
    """Start-up preflight on GPU: raise a ConfigError carrying the table and the keys to change when the run
    cannot fit this GPU's memory; on CPU nothing is checked (None)."""
    import paddle

    from .errors import ConfigError

    if not paddle.get_device().startswith("gpu"):
        return None
    total = paddle.device.cuda.get_device_properties().total_memory / GIB
    result = estimate(config, gpus, total)
    if not result.fits:
        raise ConfigError(f"this run needs more memory than the GPU has:\n{result.table()}")
    return result


def allocate_optimizer_state(optimizer) -> int:
    """Create AdamW's moments (and float32 master weights) now instead of at the first ``step()``, so that a run
    whose optimizer state does not fit fails in its first minute rather than after the first rollout. Returns the
    bytes allocated. The values are what the first step would create (zeros, beta powers, a cast of the current
    weights), and the step does not create them again: training is unchanged. Under sharding only this rank's
    share is created. Paddle creates these lazily in ``step()`` through ``_create_accumulators``; this calls
    the same method early."""
    import paddle

    inner, params = stepping_optimizer_and_owned_weights(optimizer)
    before = _accumulator_bytes(inner)
    inner._create_accumulators(paddle.static.default_main_program().global_block(),
                               [p for p in params if not p.stop_gradient])
    return _accumulator_bytes(inner) - before


def stepping_optimizer(optimizer):
    """The optimizer whose ``step`` creates and updates the state: stage 2's ``GroupShardedOptimizerStage2`` steps
    its ``_optim``, stage 1's ``DygraphShardingOptimizer`` its ``_inner_opt``; each holds this rank's share only."""
    return optimizer._optim if hasattr(optimizer, "param2rank") else getattr(optimizer, "_inner_opt", optimizer)


def stepping_optimizer_and_owned_weights(optimizer):
    """The optimizer whose ``step`` creates the state, and the weights whose state this rank keeps: stage 2's
    steps on the weights ``param2rank`` gives this rank; stage 1's has already narrowed its ``_inner_opt`` to this
    rank's weights."""
    inner = stepping_optimizer(optimizer)
    if hasattr(optimizer, "param2rank"):
        return inner, [p for p in optimizer.local_params if optimizer.param2rank[p.name] == optimizer._rank]
    return inner, inner._parameter_list


def _accumulator_bytes(optimizer) -> int:
    tensors = [t for per_param in optimizer._accumulators.values() for t in per_param.values()]
    tensors += list(getattr(optimizer, "_master_weights", {}).values())
    return sum(int(t.numel()) * t.element_size() for t in tensors)
