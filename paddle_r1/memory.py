"""Per-GPU memory of a GRPO run, from the config and the model's config.json alone (no weights loaded).

Why: a run that cannot fit should say so, with the keys to change, in the first second instead of an
out-of-memory error after the first rollout. ``paddle-r1 estimate-memory`` prints the table; the trainer calls
``check_fits`` at start-up on GPU.

The model is counted layer by layer from the published config fields (``count_parameters``). Memory is
persistent state (weights, reference, gradients, AdamW state after sharding, a reserve for the CUDA context and
allocator) plus the larger of two phases' working memory:

- rollout: the KV cache at its peak, where copies coexist (``rollout_kv_parts``): the prefill's cache of the B
  prompts (kept until the rollout ends), its rows repeated for the G completions (``RepeatedPrompt``), the decode
  buffers of B*G sequences of prompt + completion (``generation/kv_cache.py``) and, for the growing cache of the
  one-token decoder, the old and new buffers of its last growth; the prefill's attention scores (eager, or sdpa
  without flash attention), K/V expanded to the query heads for one layer (sdpa without flash attention), and the
  vision tower's forward. With tools (``max_turns`` > 1) a completion is an episode: ``max_turns`` turns of
  ``max_completion_length`` tokens and between them ``max_turns - 1`` tool results of one image each (what
  ``crop`` and ``zoom`` return) at ``max_pixels``, or with ``frames`` among the tools and clips, of one clip as the
  prompt's when that is larger (``frames`` returns as many frames as the prompt's clip by default); the log-prob
  passes run each episode row whole, so the vision tower sees every row's images and clips. With a clip per prompt
  (``VideoClip``: ``estimate-memory --video_seconds``), its tokens join the prompt and its frames the vision tower's
  input: frames and their size as ``data/video.py`` picks
  them for the family (the ``video_*`` keys; Qwen3-VL's pixels per clip from its ``video_preprocessor_config.json``),
  ``VideoSampling.clip_tokens``, the very count the processor gives (``tests/test_qwen3_video.py``);
- training forward + backward: the decoder activations kept for backward (all layers, or with
  ``gradient_checkpointing`` each layer's input plus one layer recomputed), attention scores (eager: [H, L, L]
  per sequence, kept in float32 for the softmax; sdpa with flash attention: none), one log-prob chunk of float32
  logits, and the vision tower's (kept for backward only when it trains).

Attention without flash attention: Paddle's sdpa (``paddle/nn/functional/sdpa.py``, Paddle 3.3) takes flash
attention only on sm80 and newer (A100, H100, RTX 30xx/40xx) in half precision. On a V100 (sm70) or T4 (sm75) it
takes memory-efficient attention when a mask's last dimension is a multiple of 8, else its math path; both first
copy K and V to every query head (``_repeat_kv``: [B, L, H, D], per call), and the math path builds the [B, H, L, L]
scores, mask sum and softmax in the weights' dtype (the softmax kept for backward). The estimate counts the math
path there (the larger; which one runs depends on each batch's padded length): ``estimate(flash_attention=False)``,
``estimate-memory --sm 70``, and ``check_fits`` on such a GPU.

Host memory, per rank (``Estimate.host_rows``): the update guard's copy (``parallel/step_guard.py``; config key
``undo_non_finite_updates``, kept by ``auto`` up to ``UNDO_COPY_BUDGET_GIB``) and the checkpoint read into host
memory while the model loads (every rank reads the whole checkpoint). They do not coexist (the copy is made at the
first step), so the rank's peak is the larger. paddle_r1 offloads no optimizer state to the host. ``check_fits``
compares the peak times the ranks on the machine with the machine's RAM.

Activation sizes count the tensors Paddle's autograd keeps per token of one decoder layer: the two norms'
inputs, the q/k/v and o projections' inputs, rotary inputs, the attention output, and the gated MLP's
gate, up, product and down input: 9 h + 4 kv + 4 i elements. An estimate, not a measurement; the real
peak also depends on the allocator. paddle_r1's own gradients keep fewer (the rotation's input and the MLP's
activation: ``text_attention._Rotation``, ``swiglu.SwigluDown``), so the count errs high where they run
(``benchmarks/memory_estimate.py``).
"""
from __future__ import annotations

import itertools
import json
import os
from dataclasses import dataclass, field, replace
from typing import Callable, Optional

from .models.families import MemoryLayout, family_of
from .models.query_blocks import QUERY_BLOCK, in_blocks

GIB = 2.0**30
PROMPT_TEXT_TOKENS = 128  # system prompt, chat template and question around the image tokens
IMAGES_PER_PROMPT = 1
TOOL_TEXT_TOKENS = 32  # a tool result's message around its image: role tokens, the result's text, the next turn's start
# text a clip brings beside its tokens, per frame pair: Qwen3-VL's "<12.5 seconds>" and its vision start and end
# (at most 9 tokens); the other families' one vision start and end per clip are within PROMPT_TEXT_TOKENS
PAIR_TEXT_TOKENS = {"text": 9}
DEFAULT_MAX_PIXELS = 12845056  # Qwen's preprocessor_config.json
RESERVE_GIB = 2.0  # CUDA context, cuBLAS / NCCL workspaces, allocator fragmentation
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# undo_non_finite_updates: auto keeps the update guard's host copy while it is at most this many GiB on every rank.
# Why 8: the copy is taken before every step into pageable memory, at a few GB/s: ~1-3 s a step, against GRPO steps
# of tens of seconds for the models it admits (LoRA rank 8 on 7B: 0.2 GiB; Qwen2.5-VL-3B sharded stage 1 over 8
# GPUs: 6.1 GiB); 8 ranks then hold at most 64 GiB of a machine's RAM. A 7B full fine-tune (vision frozen) unsharded
# (99 GiB) or sharded stage 1 over 8 (12.4 GiB) is over it, and only detects (``paddle-r1 estimate-memory``).
UNDO_COPY_BUDGET_GIB = 8.0


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
    vision_positions: int = 0  # rows of the learned vision position table (PaddleOCR-VL's, Qwen3-VL's)
    deepstack_mergers: int = 0  # Qwen3-VL's mergers beside the main one, one per ``deepstack_visual_indexes`` entry

    @property
    def layout(self) -> MemoryLayout:
        return family_of(self.family).memory

    @classmethod
    def from_config(cls, config: dict) -> "ModelShape":
        """The sizes under the names the family's config.json gives them (``MemoryLayout``)."""
        text = {**config, **config.get("text_config", {})}
        vision = config["vision_config"]
        layout = family_of(config).memory
        width = vision[layout.vision_width]
        mlp = vision[layout.vision_mlp]
        heads = text["num_attention_heads"]
        head_dim = text.get("head_dim") or text["hidden_size"] // heads
        depth = vision[layout.vision_depth]
        tower = layout.vision_tower
        positions = ((vision["image_size"] // vision["patch_size"]) ** 2 if tower == "siglip"
                     else vision["num_position_embeddings"] if tower == "deepstack" else 0)
        return cls(
            hidden=text["hidden_size"], intermediate=text["intermediate_size"], layers=text["num_hidden_layers"],
            heads=heads, kv_dim=text.get("num_key_value_heads", heads) * head_dim,
            vocab=text["vocab_size"], tied=bool(config.get("tie_word_embeddings", False)),
            vision_width=width, vision_intermediate=width * mlp if layout.vision_mlp == "mlp_ratio" else mlp,
            vision_depth=depth, vision_heads=vision[layout.vision_heads],
            vision_full_attention_blocks=(len(vision.get("fullatt_block_indexes", [])) or depth
                                          if layout.windowed_vision else depth),
            patch_size=vision["patch_size"], merge_size=vision["spatial_merge_size"],
            temporal_patch_size=vision.get("temporal_patch_size", 2), family=config["model_type"],
            q_dim=heads * head_dim, vision_positions=positions,
            deepstack_mergers=len(vision["deepstack_visual_indexes"]) if tower == "deepstack" else 0,
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
    (patch embedding, blocks, patch mergers), as the published checkpoints lay them out (PaddleOCR-VL's without its
    unused packing table, which paddle_r1 does not hold)."""
    h, kv, i, q = shape.hidden, shape.kv_dim, shape.intermediate, shape.q_dim or shape.hidden
    layout = shape.layout
    bias = layout.text_bias  # Qwen2's q, k, v have biases; Qwen3's and ERNIE-4.5's nothing does
    layer = (_linear(h, q, bias) + 2 * _linear(h, kv, bias) + _linear(q, h, False)  # q, k, v; o
             + 3 * _linear(h, i, False) + 2 * h)  # gate, up, down; two RMSNorms
    if layout.qk_norm:
        layer += 2 * q // shape.heads  # Qwen3's RMSNorm over each query head and each key head
    embeddings = shape.vocab * h
    text = embeddings + shape.layers * layer + h + (0 if shape.tied else embeddings)
    return ParameterCounts(text=text, vision=VISION_TOWERS[layout.vision_tower](shape))


def _vision_block(w: int, wi: int, gated_rms_norm: bool = False) -> int:
    """One vision block: two norms (LayerNorm: weight and bias; RMSNorm: weight), qkv and proj with biases, the
    MLP with biases (fc1, fc2; or gate, up, down)."""
    norm = w if gated_rms_norm else 2 * w
    mlp = _linear(w, wi, True) * (2 if gated_rms_norm else 1) + _linear(wi, w, True)
    return 2 * norm + _linear(w, 3 * w, True) + _linear(w, w, True) + mlp


def _patch_embedding(shape: ModelShape, bias: bool) -> int:
    w = shape.vision_width
    return w * 3 * shape.temporal_patch_size * shape.patch_size**2 + (w if bias else 0)


def _merger(shape: ModelShape, norm: int) -> int:
    """A patch merger: its norm (``norm`` parameters), then two linear layers from the 2 x 2 merged vector to the
    decoder's width."""
    merged = shape.vision_width * shape.merge_size**2
    return norm + _linear(merged, merged, True) + _linear(merged, shape.hidden, True)


def _qwen_vl_tower(shape: ModelShape) -> int:
    """Qwen2-VL's (LayerNorm blocks, fc1/fc2) and Qwen2.5-VL's (RMSNorm blocks, gate/up/down) towers: a patch
    embedding without bias, the blocks and the merger (its norm over the width, before the merge)."""
    w, gated = shape.vision_width, shape.layout.vision_tower == "rms_norm_gated"
    block = _vision_block(w, shape.vision_intermediate, gated)
    return _patch_embedding(shape, bias=False) + shape.vision_depth * block + _merger(shape, w if gated else 2 * w)


def _deepstack_tower(shape: ModelShape) -> int:
    """Qwen3-VL's tower: a patch embedding with bias, the learned position table, LayerNorm blocks (fc1/fc2), the
    merger (LayerNorm over the width, before the merge) and the DeepStack mergers (LayerNorm over the merged
    vector, after the merge)."""
    w = shape.vision_width
    merged = w * shape.merge_size**2
    return (_patch_embedding(shape, bias=True) + shape.vision_positions * w
            + shape.vision_depth * _vision_block(w, shape.vision_intermediate)
            + _merger(shape, 2 * w) + shape.deepstack_mergers * _merger(shape, 2 * merged))


def _siglip_tower(shape: ModelShape) -> int:
    """PaddleOCR-VL's vision tower: patch embedding (with bias), position table, LayerNorm blocks (q, k, v, out,
    fc1, fc2 with biases), the final LayerNorm, and its merger beside it (LayerNorm, two linear layers)."""
    w = shape.vision_width
    return (_patch_embedding(shape, bias=True) + shape.vision_positions * w
            + shape.vision_depth * _vision_block(w, shape.vision_intermediate) + 2 * w + _merger(shape, 2 * w))


# the parameter count of each ``MemoryLayout.vision_tower``
VISION_TOWERS = {"layer_norm_fc": _qwen_vl_tower, "rms_norm_gated": _qwen_vl_tower, "deepstack": _deepstack_tower,
                 "siglip": _siglip_tower}


def lora_parameters(shape: ModelShape, rank: int) -> int:
    """Adapters (rank x (in + out) each) on the default targets of every decoder layer: qkv_proj, o_proj,
    up_gate_proj, down_proj (Qwen-VL); q, k, v, o, gate, up and down (PaddleOCR-VL's unfused projections)."""
    h, kv, i, q = shape.hidden, shape.kv_dim, shape.intermediate, shape.q_dim or shape.hidden
    if not shape.layout.fused_projections:
        return shape.layers * rank * ((h + q) + 2 * (h + kv) + (q + h) + 2 * (h + i) + (i + h))
    return shape.layers * rank * ((h + h + 2 * kv) + (h + h) + (h + 2 * i) + (i + h))


def read_model_config(model_name_or_path: str) -> dict:
    """config.json of a local folder; for a hub id the published fields when known (offline), else the hub's
    config.json through paddleformers (the config alone, no weights)."""
    from .models.model_path import check_model_path
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
    host_rows: list = field(default_factory=list)  # per rank, host RAM: (name, GiB, how); the peak is the larger
    ranks_per_host: int = 1  # ranks sharing one machine's RAM
    host_memory_gib: Optional[float] = None  # that machine's RAM; None: not checked

    @property
    def host_gib(self) -> float:
        """One rank's peak host memory (its rows do not coexist: the larger)."""
        return max((gib for _, gib, _ in self.host_rows), default=0.0)

    @property
    def host_fits(self) -> bool:
        return self.host_memory_gib is None or self.host_gib * self.ranks_per_host <= self.host_memory_gib

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
        lines.append(f"{'host RAM per rank':<34}{'GiB':>8}  how")
        lines += [f"{name:<34}{gib:>8.1f}  {how}" for name, gib, how in self.host_rows]
        machine = f"{self.host_gib:.1f} GiB x {self.ranks_per_host} rank(s) per machine"
        if self.host_memory_gib is not None:
            machine += f": {'fits' if self.host_fits else 'does NOT fit'} in {self.host_memory_gib:.0f} GiB of RAM"
        lines.append(f"{'host peak (the larger)':<34}{self.host_gib:>8.1f}  {machine}")
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


def block_scores_bytes(w: int) -> int:
    """Bytes per score of a query block in its backward (``text_attention.BlockedAttention``): the product computed
    again, the mask expanded, their sum, the float32 softmax, the probabilities' gradient and the scores', and the
    float32 copies the softmax's gradient takes of a 16-bit block."""
    return 6 * w + 8


def expands_kv(shape: ModelShape) -> bool:
    """Whether sdpa without flash attention copies K and V to every query head (grouped-query attention)."""
    return (shape.q_dim or shape.hidden) != shape.kv_dim


def decoder_training_bytes(shape: ModelShape, sequences: int, length: int, w: int, attention: str,
                           recompute: bool, queries: Optional[int] = None) -> tuple[int, int]:
    """(activations, attention scores) the decoder holds at the peak of a training forward + backward over
    ``sequences`` x ``length`` tokens; ``attention``: ``eager``, ``flash`` or ``math`` (sdpa without flash
    attention: its expanded K/V kept for backward, and [H, L, L] softmax in the weights' dtype). Without recompute
    the peak comes in the backward of the last layer: every layer's kept tensors and the last one's gradients and
    the backward's temporaries (2x one layer's). With ``recompute`` each layer keeps only its input, and during
    backward one layer is rebuilt and differentiated: its kept tensors, their gradients and the backward's
    temporaries (3x), its scores and their gradients (2x). Eager attention over ``queries`` queries a
    pass (the completion's tokens, the fewest; default ``length``) that go in blocks (``models/query_blocks.py``)
    keeps no scores: one block's, computed in the forward and again in the backward, exist at a time.
    ``benchmarks/memory_estimate.py`` compares both ways with a measured peak on CPU for eager (its figures in
    benchmarks/README.md)."""
    tokens = sequences * length
    expanded = 2 * (shape.q_dim or shape.hidden) if attention == "math" and expands_kv(shape) else 0
    per_token_layer = (_activation_elements(shape.hidden, shape.kv_dim, shape.intermediate) + expanded) * w
    activations = tokens * (shape.layers * shape.hidden * w + 3 * per_token_layer) if recompute else \
        tokens * (shape.layers + 2) * per_token_layer
    if attention == "eager" and in_blocks(length if queries is None else queries):
        return activations, sequences * shape.heads * QUERY_BLOCK * length * block_scores_bytes(w)
    per_score = {"eager": scores_kept_bytes(w), "math": w, "flash": 0}[attention]
    scores = sequences * shape.heads * length**2 * per_score
    return activations, (2 if recompute else shape.layers) * scores


def _attention(config) -> str:
    """The estimate is for GPU, where ``attn_implementation: null`` means sdpa."""
    return config.attn_implementation or "sdpa"


def attention_path(config, flash_attention: bool) -> str:
    """What computes attention on the GPU: ``eager``, ``flash`` (sdpa where flash attention runs), or ``math`` (sdpa
    without it, counted as its math path: see the module docstring)."""
    if _attention(config) == "eager":
        return "eager"
    return "flash" if flash_attention else "math"


def rollout_kv_parts(shape: ModelShape, prompts: int, generations: int, prompt_len: int, new_tokens: int, w: int,
                     growing: bool) -> dict:
    """Bytes of the rollout's KV tensors by name, and ``peak``: what coexists at the worst moment. The prefill's
    cache of ``prompts`` rows lives until the rollout ends (``rollout.sample_completions`` holds it); while the
    decoder is made, the prompt repeated for each completion (``RepeatedPrompt``) and the decode buffers exist too.
    ``growing`` (``TransposedKVCache``, the one-token decoder): the buffers start at the prompt + ``GROWTH`` slots and
    grow by ``GROWTH`` while the decode needs room (it writes ``new_tokens`` - 1 slots: the last token is not fed
    back); each growth copies the keys of every layer, then the values, so at the last growth from ``n`` slots both
    the new buffers and half of the old ones (``n / 2`` slots' worth) exist. Else (``StaticKVCache``, the model's own
    layers) the buffers hold prompt + ``new_tokens`` slots from the start."""
    from .generation.kv_cache import GROWTH

    per_slot = 2 * shape.layers * shape.kv_dim * w  # one token of one sequence: keys and values of every layer
    sequences = prompts * generations
    capacity = prompt_len + new_tokens
    first = min(capacity, prompt_len + GROWTH) if growing else capacity
    growths = max(0, new_tokens - 2) // GROWTH if growing else 0
    old = prompt_len + GROWTH * growths if growths else 0  # slots before the last growth
    final = min(capacity, old + GROWTH) if growths else first
    parts = {"prefill cache": prompts * prompt_len * per_slot,
             "prompt repeated per completion": sequences * prompt_len * per_slot if generations > 1 else 0,
             "decode buffers": sequences * final * per_slot,
             "growth copy": sequences * old // 2 * per_slot}
    at_start = parts["prompt repeated per completion"] + sequences * first * per_slot
    parts["peak"] = parts["prefill cache"] + max(at_start, parts["decode buffers"] + parts["growth copy"])
    return parts


def one_token_decodes(config, shape: ModelShape) -> bool:
    """Whether the rollout may take the one-token decoder (its growing cache): ``rollout_engine`` one_token, or
    auto on the families it runs (``ModelFamily.one_token_attention``, ``generation.decoder.supports``)."""
    return config.rollout_engine == "one_token" or (
        config.rollout_engine == "auto" and family_of(shape.family).one_token_attention is not None)


def undo_copy_bytes(config, shape: ModelShape, gpus: int) -> int:
    """Host bytes of the update guard's copy on one rank (``step_guard.StepSnapshot``): the weights its step writes
    (every trainable one; under stage 1 its share) in the weights' dtype, and the AdamW state it holds (float32 m and
    v, and a float32 master weight for 16-bit weights; under sharding its share)."""
    w = DTYPE_BYTES[config.dtype]
    params = count_parameters(shape)
    trainable = lora_parameters(shape, config.lora_rank) if config.lora else \
        params.total - (params.vision if config.freeze_vision else 0)
    sharding = config.sharding if gpus > 1 else ""
    share = gpus if sharding else 1
    written = trainable / (gpus if sharding == "stage1" else 1)  # stage 2 broadcasts, and checks, every weight
    return int(written * w + trainable * (8 + (4 if w < 4 else 0)) / share)


def undo_copy_kept(setting, copy_bytes: int) -> bool:
    """Whether ``undo_non_finite_updates`` (true, false, "auto") keeps a copy of ``copy_bytes`` on a rank: the rule
    the trainer applies (``sharding.Update.choose_undo``) and the estimate shows."""
    return copy_bytes <= UNDO_COPY_BUDGET_GIB * GIB if setting == "auto" else setting


def _host_rows(config, shape: ModelShape, gpus: int, checkpoint_dtype: str) -> list:
    """Per rank, host RAM: the update guard's copy (as ``undo_non_finite_updates`` decides) and the checkpoint being
    loaded."""
    copy = undo_copy_bytes(config, shape, gpus)
    kept = undo_copy_kept(config.undo_non_finite_updates, copy)
    setting = str(config.undo_non_finite_updates).lower()
    if config.undo_non_finite_updates == "auto":
        how = (f"auto: {copy / GIB:.1f} GiB, {'within' if kept else 'over'} the {UNDO_COPY_BUDGET_GIB:g} GiB budget"
               + ("" if kept else ": no copy, a non-finite update stops the run"))
    else:
        how = f"undo_non_finite_updates {setting}" + (": no copy" if not kept else "")
    params = count_parameters(shape).total
    checkpoint = params * DTYPE_BYTES.get(checkpoint_dtype, DTYPE_BYTES[config.dtype])
    return [("update guard copy", copy / GIB if kept else 0.0, how + " (weights, AdamW m, v, master)"),
            ("checkpoint while loading", checkpoint / GIB, f"{params / 1e9:.2f}B params read in {checkpoint_dtype}")]


@dataclass(frozen=True)
class VideoClip:
    """The clips a prompt brings, as the estimate counts them: ``per_prompt`` clips of ``seconds`` at ``fps`` and
    ``width`` x ``height`` (the data's longest and largest)."""

    seconds: float
    width: int
    height: int
    fps: float = 30.0
    per_prompt: int = 1


@dataclass(frozen=True)
class VideoLoad:
    """What a prompt's clips add: decoder tokens (video tokens and the text between frame pairs) and vision patches
    (``frame_patches`` per frame pair, which attends within itself)."""

    tokens: int  # video tokens of one clip
    text_tokens: int  # text of one clip (Qwen3-VL's times)
    pairs: int  # frame pairs of one clip
    frame_patches: int  # vision patches of one frame pair
    per_prompt: int

    @property
    def prompt_tokens(self) -> int:
        return self.per_prompt * (self.tokens + self.text_tokens)

    @property
    def patches(self) -> int:
        return self.per_prompt * self.pairs * self.frame_patches


def video_load(config, shape: ModelShape, clip: VideoClip, model_dir: str) -> VideoLoad:
    """The tokens and patches of ``clip`` for the model in ``model_dir`` (its video processor's size, for a family
    that budgets whole clips) under the config's ``video_*`` keys."""
    from .data.video import VideoSampling
    from .models.resize import video_processor_size

    family = family_of(shape.family)
    sampling = VideoSampling.from_config(config)
    if family.video_budget == "clip":
        sampling = sampling.for_family(family.video_budget, video_processor_size(model_dir))
    factor = shape.patch_size * shape.merge_size
    frames = max(1, round(clip.seconds * clip.fps))
    pairs, tokens = sampling.clip_tokens(frames, clip.fps, (clip.width, clip.height), factor)
    return VideoLoad(tokens=tokens, text_tokens=pairs * PAIR_TEXT_TOKENS.get(family.video_time, 0), pairs=pairs,
                     frame_patches=tokens // pairs * shape.merge_size**2, per_prompt=clip.per_prompt)


def _vision_tokens(shape: ModelShape, max_pixels: int) -> tuple[int, int]:
    """(patches the vision tower sees, merged tokens the decoder sees) for one image at ``max_pixels``."""
    factor = shape.patch_size * shape.merge_size
    merged = max(1, max_pixels // factor**2)
    return merged * shape.merge_size**2, merged


def _rows(config, shape: ModelShape, gpus: int, flash_attention: bool = True,
          video: Optional[VideoLoad] = None) -> list:
    """The table's rows, GiB each; indented rows are the phases' parts (the phase total counts once; deeper ones are
    the parts of a part). ``video``: what each prompt's clips add."""
    w = DTYPE_BYTES[config.dtype]
    params = count_parameters(shape)
    path = attention_path(config, flash_attention)
    eager = path == "eager"
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
    prompt_len = PROMPT_TEXT_TOKENS + IMAGES_PER_PROMPT * image_tokens + (video.prompt_tokens if video else 0)
    tool_results = config.max_turns - 1
    # a tool result: one image at max_pixels (crop, zoom) or, where the frames tool may answer and that is larger, one
    # clip as the prompt's (its default: as many frames as the prompt's clip, sized alike)
    clip_results = bool(video) and "frames" in config.tools and video.tokens + video.text_tokens > image_tokens
    result_tokens = video.tokens + video.text_tokens if clip_results else image_tokens
    completion = config.max_turns * config.max_completion_length + tool_results * (TOOL_TEXT_TOKENS + result_tokens)
    length = prompt_len + completion
    activations, train_scores = decoder_training_bytes(shape, sequences, length, w, path,
                                                       config.gradient_checkpointing, queries=completion)
    logprob_chunk = min(config.logprob_chunk_size, sequences * completion) * shape.vocab * (w + 12)

    vision_trains = not (config.freeze_vision or config.lora)
    tool_images = 0 if clip_results else tool_results
    images = prompts * IMAGES_PER_PROMPT if not tool_results else sequences * (IMAGES_PER_PROMPT + tool_images)
    clip_rows = (sequences if tool_results else prompts) if video else 0  # episodes' log-probs run rows whole
    clips_per_row = video.per_prompt + (tool_results if clip_results else 0) if video else 0
    vision_patches = images * patches + clip_rows * clips_per_row * (video.pairs * video.frame_patches if video else 0)
    vision_layer = vision_patches * _activation_elements(shape.vision_width, shape.vision_width,
                                                         shape.vision_intermediate) * w
    image_scores = shape.vision_heads * patches**2 if eager else 0
    # a clip's frame pairs attend within themselves: [heads, patches, patches] per pair
    pair_scores = shape.vision_heads * video.frame_patches**2 if eager and video else 0
    all_scores = images * image_scores + clip_rows * clips_per_row * video.pairs * pair_scores if video else \
        images * image_scores
    if vision_trains and not config.gradient_checkpointing:
        vision = shape.vision_depth * vision_layer + shape.vision_full_attention_blocks * all_scores \
            * scores_kept_bytes(w)
    else:
        vision = vision_layer * (2 if vision_trains else 1) + max(image_scores, pair_scores) \
            * scores_transient_bytes(w)

    # the auto engine's decoder depends on the device's layers: the larger of the two caches
    kv = max((rollout_kv_parts(shape, prompts, config.generations_per_device, prompt_len, completion, w, growing)
              for growing in {False, one_token_decodes(config, shape)}), key=lambda parts: parts["peak"])
    prefilled = sequences if tool_results else prompts  # later turns prefill their tool results on every row
    per_score = {"eager": scores_transient_bytes(w), "math": 3 * w, "flash": 0}[path]
    prefill_in_blocks = eager and in_blocks(prompt_len)
    prefill_queries = QUERY_BLOCK if prefill_in_blocks else prompt_len  # eager in blocks: a block at a time
    prefill_scores = prefilled * shape.heads * prefill_queries * prompt_len * per_score
    # sdpa without flash copies one layer's K/V to every query head per call: over the whole cache in a decode step
    expanded = sequences * length * 2 * (shape.q_dim or shape.hidden) * w \
        if path == "math" and expands_kv(shape) else 0
    rollout = kv["peak"] + prefill_scores + expanded + vision
    training = activations + train_scores + logprob_chunk + vision
    attention = {"eager": "eager [H, L, L] scores", "flash": "sdpa, flash attention: no score matrix",
                 "math": "sdpa without flash attention (sm < 80): math path's [H, L, L] scores"}[path]
    blocks = f"eager in blocks of {QUERY_BLOCK} queries: one block's scores at a time"
    prefill_attention = blocks if prefill_in_blocks else attention
    train_attention = blocks + ", computed again in the backward" if eager and in_blocks(completion) else attention
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
         + (f"; {video.per_prompt} x {video.tokens} video tokens, {video.pairs} frame pairs" if video else "")
         + (f"; episodes of {config.max_turns} turns, {tool_results} tool {'clips' if clip_results else 'images'})"
            if tool_results else ")")),
        ("  rollout KV cache (peak)", kv["peak"] / GIB,
         "prefill + max(repeated prompt + first buffers, buffers + growth copy); 2 x layers x kv width per token"),
        ("    prefill cache", kv["prefill cache"] / GIB, f"{prompts} prompts x {prompt_len} tokens, kept to the end"),
        ("    prompt repeated per completion", kv["prompt repeated per completion"] / GIB,
         f"{sequences} rows x {prompt_len} tokens, while the decoder is made"),
        ("    decode buffers", kv["decode buffers"] / GIB, f"{sequences} rows, prompt + completion slots"),
        ("    growth copy", kv["growth copy"] / GIB, "the one-token decoder's last growth: half the old buffers"),
        ("  rollout prefill attention", prefill_scores / GIB, prefill_attention),
        ("  rollout K/V expanded to heads", expanded / GIB,
         "sdpa without flash: one layer's cache per decode step" if expanded else "none"),
        ("  train activations", activations / GIB, recompute),
        ("  train attention scores", train_scores / GIB, train_attention),
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


def estimate(config, gpus: int, gpu_memory_gib: float, model_config: Optional[dict] = None,
             flash_attention: bool = True, host_memory_gib: Optional[float] = None,
             ranks_per_host: Optional[int] = None, video: Optional[VideoClip] = None) -> Estimate:
    """Per-GPU table for ``config`` (a GRPOConfig) on ``gpus`` GPUs of ``gpu_memory_gib`` each (``flash_attention``:
    whether sdpa can take it: sm80 and newer), and per rank host RAM, ``ranks_per_host`` (default: all ``gpus``) of
    them sharing ``host_memory_gib`` (None: not compared); ``video``: the clips each prompt brings (their tokens from
    the model folder's processor files). When the GPU part does not fit, ``suggestions`` holds the cheapest config
    changes that make it fit, or all of them and a note to lower the sizes when none do."""
    model_config = model_config or read_model_config(config.model_name_or_path)
    shape = ModelShape.from_config(model_config)
    checkpoint_dtype = model_config.get("torch_dtype") or model_config.get("dtype") or config.dtype
    clips = video and video_load(config, shape, video, config.model_name_or_path)

    def fits(cfg) -> bool:
        return Estimate(_rows(cfg, shape, gpus, flash_attention, clips), gpus, gpu_memory_gib).fits

    result = Estimate(_rows(config, shape, gpus, flash_attention, clips), gpus, gpu_memory_gib,
                      host_rows=_host_rows(config, shape, gpus, checkpoint_dtype),
                      ranks_per_host=ranks_per_host or gpus, host_memory_gib=host_memory_gib)
    if not result.fits:
        changes = _cheapest_fix(config, gpus, fits)
        if changes is None:
            changes = {key: max(choices, key=choices.get) for key, choices in _REMEDIES
                       if not (key == "sharding" and gpus == 1)}
            changes[_LOWER_SIZES] = "lower"
        result.suggestions = [(key, "true" if value is True else value) for key, value in changes.items()]
    return result


def machine_memory_gib() -> float:
    """This machine's RAM."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB


def check_host(result: Estimate, config) -> Optional[str]:
    """When the ranks on this machine need more RAM than it has: a ConfigError when the update guard's copy was
    asked for (``undo_non_finite_updates: true``) and is the larger part, else a warning (returned, for the log);
    both name the key. None when it fits."""
    from .errors import ConfigError

    if result.host_fits:
        return None
    text = (f"the {result.ranks_per_host} rank(s) on this machine need {result.host_gib * result.ranks_per_host:.0f} "
            f"GiB of host RAM, more than its {result.host_memory_gib:.0f} GiB:\n{result.table()}\n")
    copy = result.host_rows[0][1]
    if config.undo_non_finite_updates is True and copy >= result.host_gib:
        raise ConfigError(text + "set undo_non_finite_updates: auto (or false) to take no host copy of the weights "
                                 "and AdamW state, or shard the optimizer state (sharding: stage1)",
                          keys=("undo_non_finite_updates",))
    return "warning: " + text + ("the update guard's copy is kept (undo_non_finite_updates); set it to false to "
                                 "take none" if copy else "the checkpoint is read by every rank while loading")


def check_fits(config, gpus: int, echo: Callable[[str], None] = print) -> Optional[Estimate]:
    """Start-up preflight on GPU: raise a ConfigError carrying the table and the keys to change when the run
    cannot fit this GPU's memory (counting attention without flash attention before sm80), or this machine's RAM
    (``check_host``: a warning, handed to ``echo``, unless the update guard's copy was asked for); on CPU nothing
    is checked (None)."""
    import paddle

    from .errors import ConfigError

    if not paddle.get_device().startswith("gpu"):
        return None
    total = paddle.device.cuda.get_device_properties().total_memory / GIB
    major, _ = paddle.device.cuda.get_device_capability()
    result = estimate(config, gpus, total, flash_attention=major >= 8, host_memory_gib=machine_memory_gib(),
                      ranks_per_host=min(gpus, paddle.device.cuda.device_count()))
    if not result.fits:
        raise ConfigError(f"this run needs more memory than the GPU has:\n{result.table()}")
    warning = check_host(result, config)
    if warning:
        echo(warning)
    return result
