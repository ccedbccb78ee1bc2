"""Every model family paddle_r1 runs, one ``ModelFamily`` each, in one table: ``FAMILIES[model_type]``.

A family is named by its config.json ``model_type``, and everything paddle_r1 does differently per family is a field
of its entry: its model class, the coordinate system of its answers, how a prompt is embedded, where its M-RoPE
positions and its text decoder sit, its config spelling, what the memory estimate reads from its config.json, the
layers LoRA adapts by default, its tiny checkpoint, the attention the one-token decode step reproduces, its
processor, and what it needs installed. Code outside ``paddle_r1/models/`` asks ``family_of(model, config, config
dict or model_type)`` and reads a field; it never tests a family's name or probes a model with ``hasattr``
(``tests/test_families.py`` holds the package to that).

Why one table and not an entry beside each model module: the model modules import paddle and paddleformers (seconds,
and the fused kernels' registration), while the CLI, the config checks and the memory estimate need a family's facts
without them. Code an entry names (model class, embedding, tiny builder) is a ``Ref``, imported on first use, so
importing this module imports nothing heavy, and importing ``paddle_r1`` stays as cheap as it was. Side by side the
entries also show at a glance what differs between the families.

Adding a family: its model module in this folder (a model class with ``config_class``), its tiny builder in
``paddle_r1/testing/``, one ``ModelFamily`` below added to ``FAMILIES``, and its tests (a tiny checkpoint loads,
runs the rollout and log-probs: add it to the parametrized family tests). ``tests/test_families.py`` fails until
every field of the new entry is filled.
"""
from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from typing import Optional

from ..errors import ConfigError


@dataclass(frozen=True)
class Ref:
    """A module-level object named by its module and attribute, imported on first ``load()``: the family table
    names code without importing it."""

    module: str
    name: str

    def load(self):
        return getattr(importlib.import_module(self.module), self.name)


@dataclass(frozen=True)
class Requirement:
    """A package the family needs beyond paddle_r1's own requirements, checked before anything loads."""

    package: str  # the importable module (``importlib.util.find_spec``)
    why: str
    install: str  # the command that installs it

    @property
    def installed(self) -> bool:
        return importlib.util.find_spec(self.package) is not None


@dataclass(frozen=True)
class MemoryLayout:
    """What ``paddle_r1/memory.py`` reads from the family's config.json and how it counts the family's parameters
    (the published checkpoints' layouts; no weights are read)."""

    vision_width: str  # vision_config key of the tower's width (Qwen2-VL's hidden_size is its merger's output)
    vision_depth: str  # vision_config key of the number of blocks
    vision_heads: str  # vision_config key of the attention heads
    vision_mlp: str  # vision_config key of the MLP's width: "intermediate_size", or "mlp_ratio" (times the width)
    # the tower's layout (``memory.VISION_TOWERS``): "layer_norm_fc" (LayerNorm, fc1/fc2), "rms_norm_gated" (RMSNorm,
    # gate/up/down), "deepstack" (LayerNorm, fc1/fc2, a learned position table and one DeepStack merger per
    # ``deepstack_visual_indexes`` entry) or "siglip" (LayerNorm, fc1/fc2, a position table, the merger beside it)
    vision_tower: str
    windowed_vision: bool  # only ``fullatt_block_indexes`` attend to the whole image (Qwen2.5-VL's windows)
    text_bias: bool  # the decoder's q, k, v have biases (Qwen2's; Qwen3's and ERNIE-4.5's have none)
    qk_norm: bool  # the decoder's queries and keys have an RMSNorm over each head (Qwen3's)
    fused_projections: bool  # q/k/v and gate/up are one linear layer each (one LoRA adapter each)


@dataclass(frozen=True)
class ModelFamily:
    model_type: str  # config.json's, the registry's key
    title: str  # as people write it, for messages
    model_class: Ref  # the Paddle model class; its ``config_class`` reads the published config.json
    coord_system: str  # the system its box answers are in (``coords.py``)
    embed_prompt: Ref  # fn(model, input_ids, pixel_values, image_grid_thw) -> forward.InputEmbeddings
    rope_index_at: tuple[str, ...]  # attribute path from the model to the layer whose ``get_rope_index`` it uses
    text_decoder_at: tuple[str, ...]  # attribute path from the model to its text decoder (embed_tokens, layers, norm)
    vision_parts: tuple[str, ...]  # the model's attributes ``freeze_vision`` freezes (the tower and its merger)
    flat_text_config: bool  # paddleformers reads its text fields only at config.json's top level, as published
    # config.json's key for the weights' dtype, as the transformers releases that first had the family write it
    # (``paddle-r1 export``): "torch_dtype" (4.51 writes it), "dtype" (4.57 and 5.x, the first with Qwen3-VL and
    # PaddleOCR-VL respectively)
    dtype_key: str
    memory: MemoryLayout
    # regexes (``re.fullmatch`` over layer names) of the layers LoRA adapts when ``lora_target_modules`` names none:
    # the text decoder's projections, as paddleformers names them; the vision tower is left alone
    lora_targets: tuple[str, ...]
    tiny_builder: Ref  # fn(family, out_dir, seed, size, max_pixels, min_pixels) -> the tiny checkpoint's folder
    demo_task: str  # the synthetic task ``paddle-r1 demo`` trains its tiny model on
    processor_class: str  # its processor's class, as ``processor_config`` files name it
    fast_image_processor: bool  # the processor has a fast image processor (paddleformers' default, when it has one)
    # the text attention class whose arithmetic ``generation/decoder.py``'s one-token step reproduces (the step runs a
    # decoder whose every layer has exactly it), or None: the model's own layers decode
    one_token_attention: Optional[Ref]
    # how its M-RoPE places a clip's frames in time: "seconds" (absolute time through ``second_per_grid_ts``),
    # "frames" (one step per frame pair), "text" (each frame pair its own image after its time written as text,
    # "<1.2 seconds>", the pairs' positions in text order), "none" (no video here: ``VIDEO_REFUSED`` says why)
    video_time: str
    # how a clip's frames are counted and sized (``data/video.py``): "frame" (qwen-vl-utils' per-frame pixel limits,
    # a count rounded to pairs), "clip" (its video processor's: the pixels of all frames together within its
    # ``size``, an odd count padded with the last frame)
    video_budget: str
    requirements: tuple[Requirement, ...]


_QWEN_MEMORY = dict(vision_depth="depth", vision_heads="num_heads", fused_projections=True)
_QWEN_VL = dict(rope_index_at=("model",), text_decoder_at=("model", "language_model"), vision_parts=("visual",),
                flat_text_config=False, demo_task="rec", fast_image_processor=True, requirements=(),
                # q, k, v fused into qkv_proj, gate and up into up_gate_proj
                lora_targets=(r".*language_model\.layers\.\d+\.self_attn\.(qkv_proj|o_proj)",
                              r".*language_model\.layers\.\d+\.mlp\.(up_gate_proj|down_proj)"))
_SCATTERED = Ref("paddle_r1.models.forward", "embed_scattered")
_FAST_TEXT_ATTENTION = Ref("paddle_r1.models.text_attention", "FastTextAttention")

QWEN2_VL = ModelFamily(
    model_type="qwen2_vl", title="Qwen2-VL",
    model_class=Ref("paddle_r1.models.qwen2_vl", "Qwen2VLForConditionalGeneration"),
    coord_system="rel_1000", embed_prompt=_SCATTERED, dtype_key="torch_dtype",
    memory=MemoryLayout(vision_width="embed_dim", vision_mlp="mlp_ratio", vision_tower="layer_norm_fc",
                        windowed_vision=False, text_bias=True, qk_norm=False, **_QWEN_MEMORY),
    tiny_builder=Ref("paddle_r1.testing.tiny", "make_tiny_qwen2_vl"), processor_class="Qwen2VLProcessor",
    one_token_attention=_FAST_TEXT_ATTENTION, video_time="frames", video_budget="frame", **_QWEN_VL)
QWEN2_5_VL = ModelFamily(
    model_type="qwen2_5_vl", title="Qwen2.5-VL",
    model_class=Ref("paddle_r1.models.qwen2_5_vl", "Qwen2_5_VLForConditionalGeneration"),
    coord_system="abs_resized", embed_prompt=_SCATTERED, dtype_key="torch_dtype",
    memory=MemoryLayout(vision_width="hidden_size", vision_mlp="intermediate_size", vision_tower="rms_norm_gated",
                        windowed_vision=True, text_bias=True, qk_norm=False, **_QWEN_MEMORY),
    tiny_builder=Ref("paddle_r1.testing.tiny", "make_tiny_qwen2_5_vl"), processor_class="Qwen2_5_VLProcessor",
    one_token_attention=_FAST_TEXT_ATTENTION, video_time="seconds", video_budget="frame", **_QWEN_VL)
QWEN3_VL = ModelFamily(
    model_type="qwen3_vl", title="Qwen3-VL",
    model_class=Ref("paddle_r1.models.qwen3_vl", "Qwen3VLForConditionalGeneration"),
    coord_system="rel_1000", embed_prompt=Ref("paddle_r1.models.forward", "embed_with_deepstack"), dtype_key="dtype",
    memory=MemoryLayout(vision_width="hidden_size", vision_mlp="intermediate_size", vision_tower="deepstack",
                        windowed_vision=False, text_bias=False, qk_norm=True, **_QWEN_MEMORY),
    tiny_builder=Ref("paddle_r1.testing.tiny", "make_tiny_qwen3_vl"), processor_class="Qwen3VLProcessor",
    one_token_attention=Ref("paddle_r1.models.qwen3_vl", "Qwen3VLTextAttention"), video_time="text",
    video_budget="clip", **_QWEN_VL)
PADDLEOCR_VL = ModelFamily(
    model_type="paddleocr_vl", title="PaddleOCR-VL",
    model_class=Ref("paddle_r1.models.paddleocr_vl", "PaddleOCRVLForConditionalGeneration"),
    # its tasks (OCR, tables, formulas, charts) answer in text, with no boxes; its ERNIE vocabulary's location
    # tokens (<|LOC_0|> .. <|LOC_1000|>) count 0-1000, so a box reward reads its boxes that way
    coord_system="rel_1000",
    embed_prompt=Ref("paddle_r1.models.forward", "embed_by_model"),
    rope_index_at=(),  # the whole model's (``paddleocr_vl.py``), not its decoder's
    text_decoder_at=("model",),  # ERNIE-4.5, with the vision tower beside it
    vision_parts=("visual", "mlp_AR"),  # its patch merger sits beside the tower; the Qwen-VL mergers are inside
    flat_text_config=True,  # paddleformers' config asserts on a nested text_config, which transformers 5 writes
    dtype_key="dtype",
    memory=MemoryLayout(vision_width="hidden_size", vision_depth="num_hidden_layers",
                        vision_heads="num_attention_heads", vision_mlp="intermediate_size", vision_tower="siglip",
                        windowed_vision=False, text_bias=False, qk_norm=False, fused_projections=False),
    # its ERNIE-4.5 decoder at ``model.layers``, projections unfused
    lora_targets=(r"model\.layers\.\d+\.self_attn\.(q_proj|k_proj|v_proj|o_proj)",
                  r"model\.layers\.\d+\.mlp\.(gate_proj|up_proj|down_proj)"),
    tiny_builder=Ref("paddle_r1.testing.tiny_paddleocr_vl", "make_tiny_paddleocr_vl"),
    demo_task="ocr_lines",  # it reads text: rendered text lines, answered as they are
    processor_class="PaddleOCRVLProcessor",
    fast_image_processor=False,  # it has none, and asking for one, even by default, prints a warning
    one_token_attention=Ref("paddle_r1.models.paddleocr_vl", "MaskedErnieAttention"), video_time="none",
    video_budget="frame",
    requirements=(Requirement("triton", "paddleformers' paddleocr_vl module imports it; on CPU it then runs plain "
                                        "Paddle", "pip install 'paddle_r1[paddleocr_vl]'"),))

FAMILIES = {family.model_type: family for family in (QWEN2_VL, QWEN2_5_VL, QWEN3_VL, PADDLEOCR_VL)}
DEFAULT_FAMILY = QWEN2_5_VL.model_type  # the tiny model's and the demo's when none is named

# Families recognised and refused, with the reason. The mixture-of-experts Qwen3-VL shares the dense one's vision
# tower but not its decoder, and paddleformers 1.2.0 builds that decoder only on paddlefleet (not on PyPI): no
# plain-Paddle variant exists to build on.
REFUSED = {
    "qwen3_vl_moe": "qwen3_vl_moe (Qwen3-VL-30B-A3B, Qwen3-VL-235B-A22B) is not supported yet: paddleformers 1.2.0 "
                    "builds its mixture-of-experts decoder only on paddlefleet, which is not on PyPI; the dense "
                    "Qwen3-VL models (qwen3_vl) load",
}


# Families that read no video here yet, and why (refused before any model loads: ``check_video``)
VIDEO_REFUSED = {
    "paddleocr_vl": "PaddleOCR-VL reads images only",
}


def check_video(model_type: str) -> None:
    """A ConfigError when the family cannot read the videos of a dataset."""
    family = family_of(model_type)
    if family.video_time == "none":
        raise ConfigError(f"the dataset has videos and the model is {family.title}: {VIDEO_REFUSED[model_type]}")


def family_of_processor(processor) -> ModelFamily:
    """The family whose ``processor_class`` the processor is (a ConfigError for one of no family)."""
    name = type(processor).__name__
    for family in FAMILIES.values():
        if family.processor_class == name:
            return family
    raise ConfigError(f"processor {name} is of no supported model family ({', '.join(FAMILIES)})")


def not_supported(model_type) -> str:
    """Why ``model_type`` has no family here: the refusal's reason, or the list of the supported ones."""
    return REFUSED.get(model_type) or \
        f"model_type {model_type!r} is not supported yet (supported: {', '.join(FAMILIES)})"


def family_of(thing) -> ModelFamily:
    """The family of a model (``model.config.model_type``), a model config, a config.json dict or a model_type;
    a ConfigError for a model_type without one."""
    if isinstance(thing, str):
        model_type = thing
    elif isinstance(thing, dict):
        model_type = thing.get("model_type")
    else:  # a model carries its config; a config is its own
        model_type = getattr(thing, "config", thing).model_type
    family: Optional[ModelFamily] = FAMILIES.get(model_type)
    if family is None:
        raise ConfigError(not_supported(model_type))
    return family
