"""Tiny, seeded Qwen-VL and PaddleOCR-VL checkpoints in the published layout, for tests and the demo.

The folder looks like a download from a model hub (Qwen2-VL, Qwen2.5-VL, Qwen3-VL or PaddleOCR-VL): its
``config.json`` (flat; nested in ``text_config`` / ``vision_config`` for Qwen3-VL), one ``model.safetensors`` with the
published weight names (``visual.blocks.0.attn.qkv.weight``, ``model.layers.0.self_attn.q_proj.weight``, Qwen3-VL's
``model.visual...`` and ``model.language_model...``, PaddleOCR-VL's ``visual.vision_model...`` and ``mlp_AR...``,
``lm_head.weight``) in PyTorch orientation, a byte-level BPE ``tokenizer.json`` carrying the family's special tokens
(Qwen's, or ERNIE-4.5's for PaddleOCR-VL), the chat template and ``preprocessor_config.json``.
It is loaded through exactly the code path of a real checkpoint.
"""
from __future__ import annotations

import functools
import os

import numpy as np

from ..errors import ConfigError
from ..models.families import DEFAULT_FAMILY, FAMILIES, ModelFamily
from .parts import TinySize, Weights, build_tokenizer, decoder_sizes, mrope_section, write_json, write_tokenizer_files

QWEN2_VL_MLP_RATIO = 4  # every published Qwen2-VL; its vision MLP is mlp_ratio * embed_dim wide
QWEN3_VL_PATCH = 16  # Qwen3-VL's patches are 16 pixels (Qwen2/2.5-VL: 14); merged 2 x 2, a token covers 32 x 32
QWEN2_VL_NORMALIZATION = {"image_mean": [0.48145466, 0.4578275, 0.40821073],  # CLIP's, Qwen2/2.5-VL
                          "image_std": [0.26862954, 0.26130258, 0.27577711]}
QWEN3_VL_NORMALIZATION = {"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}
QWEN3_VL_POSITION_TABLE = 64  # learned vision positions, an 8 x 8 grid interpolated to each image (published: 48 x 48)
# Qwen3-VL's video processor budgets a clip's frames together: at least 4096 pixels (as published) and at most 8
# frames of 64 x 64 (published: 25,165,824, 24,576 patches of 32 x 32)
QWEN3_VL_VIDEO_PIXELS = {"shortest_edge": 4096, "longest_edge": 8 * 64 * 64}

SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>",
    "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>", "<|box_end|>",
    "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
]

# Qwen2's pre-tokenizer split: digits one at a time, words with their leading space.

# Qwen2-VL's and Qwen2.5-VL's published chat template (its video branch too)
CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Text the tokenizer's merges are learned from: the words of prompts and answers the
# synthetic tasks and the chat template use, so that the tiny model sees short sequences.
_CORPUS = [
    "You are a helpful assistant.", "system", "user", "assistant",
    "<think>", "</think>", "<answer>", "</answer>", "[", "]", ", ",
    "Locate the red square in the image. Output its bounding box as [x1, y1, x2, y2].",
    "Please provide the bounding box coordinate of the region this sentence describes:",
    "First output the thinking process in <think> </think> tags and then output the final answer in "
    "<answer> </answer> tags.",
    "How many objects are there in the image?", "Output the final answer (number) in <answer> </answer> tags.",
    "red green blue yellow purple orange white black square circle triangle shape shapes object objects",
    "the a an of in on at is are there left right top bottom small large big count how many",
    "The box is at", "I see a", "answer", "think", "bbox_2d", "label", '{"bbox_2d": [', '"label": "',
]


def _qwen2_weights(size: TinySize, vocab: int, rng: np.random.Generator, layer_norm_fc: bool) -> dict[str, np.ndarray]:
    """Qwen2-VL's or Qwen2.5-VL's published names and shapes (PyTorch [out, in]): ``layer_norm_fc`` (Qwen2-VL),
    LayerNorms with bias and an fc1/fc2 MLP in the vision tower; else RMSNorms and a gated MLP."""
    w = Weights(rng)
    vh, vi = size.vision_hidden_size, size.vision_intermediate_size
    w.normal("visual.patch_embed.proj.weight", (vh, 3, 2, 14, 14))
    for b in range(size.vision_depth):
        p = f"visual.blocks.{b}"
        w.vision_block_attention(p, vh, norm_bias=layer_norm_fc)
        if layer_norm_fc:
            w.linear(f"{p}.mlp.fc1", QWEN2_VL_MLP_RATIO * vh, vh, True)
            w.linear(f"{p}.mlp.fc2", vh, QWEN2_VL_MLP_RATIO * vh, True)
        else:
            w.linear(f"{p}.mlp.gate_proj", vi, vh, True)
            w.linear(f"{p}.mlp.up_proj", vi, vh, True)
            w.linear(f"{p}.mlp.down_proj", vh, vi, True)
    w.norm("visual.merger.ln_q", vh, bias=layer_norm_fc)
    w.linear("visual.merger.mlp.0", 4 * vh, 4 * vh, True)
    w.linear("visual.merger.mlp.2", size.hidden_size, 4 * vh, True)
    w.decoder("model", size, vocab, qk_norm=False, attention_bias=True)
    return dict(w)


def _qwen3_vl_weights(size: TinySize, vocab: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Qwen3-VL's published names (``model.visual...``, ``model.language_model...``): a patch embedding with bias,
    a learned position table, LayerNorm blocks with an fc1/fc2 MLP, the merger and one DeepStack merger per
    DeepStack layer (LayerNorm over the merged 4 x width vector)."""
    w = Weights(rng)
    vh, vi, merged = size.vision_hidden_size, size.vision_intermediate_size, 4 * size.vision_hidden_size
    w.normal("model.visual.patch_embed.proj.weight", (vh, 3, 2, QWEN3_VL_PATCH, QWEN3_VL_PATCH))
    w.normal("model.visual.patch_embed.proj.bias", (vh,))
    w.normal("model.visual.pos_embed.weight", (QWEN3_VL_POSITION_TABLE, vh))
    for b in range(size.vision_depth):
        p = f"model.visual.blocks.{b}"
        w.vision_block_attention(p, vh, norm_bias=True)
        w.linear(f"{p}.mlp.linear_fc1", vi, vh, True)
        w.linear(f"{p}.mlp.linear_fc2", vh, vi, True)
    mergers = ["model.visual.merger"] + [f"model.visual.deepstack_merger_list.{i}"
                                         for i in range(len(_deepstack_indexes(size)))]
    for m, merger in enumerate(mergers):
        w.norm(f"{merger}.norm", merged if m else vh, bias=True)  # DeepStack mergers norm after the 2 x 2 merge
        w.linear(f"{merger}.linear_fc1", merged, merged, True)
        w.linear(f"{merger}.linear_fc2", size.hidden_size, merged, True)
    w.decoder("model.language_model", size, vocab, qk_norm=True, attention_bias=False)
    return dict(w)


def _deepstack_indexes(size: TinySize) -> list[int]:
    """Vision blocks whose output feeds DeepStack: one per decoder layer, as far as both go (published: 3 of 24+)."""
    return list(range(min(size.vision_depth, size.num_hidden_layers)))


def make_tiny_model(out_dir: str, family: str = DEFAULT_FAMILY, seed: int = 0, size: TinySize | None = None,
                    max_pixels: int = 112 * 112, min_pixels: int = 56 * 56) -> str:
    """Write a complete, loadable tiny checkpoint folder of ``family`` (a model_type) and return its path."""
    if family not in FAMILIES:
        raise ConfigError(f"family {family!r} is not supported yet (supported: {', '.join(FAMILIES)})")
    entry = FAMILIES[family]
    return entry.tiny_builder.load()(entry, out_dir, seed, size or TinySize(), max_pixels=max_pixels,
                                     min_pixels=min_pixels)


def make_tiny_qwen2_vl(family: ModelFamily, out_dir: str, seed: int, size: TinySize, max_pixels: int,
                       min_pixels: int) -> str:
    """Qwen2-VL's layout (``ModelFamily.tiny_builder``): flat config.json, its vision tower's width ``embed_dim``."""
    return _write_qwen_vl(family, out_dir, seed, size, max_pixels, min_pixels,
                          functools.partial(_qwen2_weights, layer_norm_fc=True), _flat_config, _qwen2_vl_vision(size),
                          patch=14, normalization=QWEN2_VL_NORMALIZATION)


def make_tiny_qwen2_5_vl(family: ModelFamily, out_dir: str, seed: int, size: TinySize, max_pixels: int,
                         min_pixels: int) -> str:
    """Qwen2.5-VL's layout: flat config.json, a windowed vision tower whose last block attends to the whole image."""
    return _write_qwen_vl(family, out_dir, seed, size, max_pixels, min_pixels,
                          functools.partial(_qwen2_weights, layer_norm_fc=False), _flat_config,
                          _qwen2_5_vl_vision(size), patch=14, normalization=QWEN2_VL_NORMALIZATION)


def make_tiny_qwen3_vl(family: ModelFamily, out_dir: str, seed: int, size: TinySize, max_pixels: int,
                       min_pixels: int) -> str:
    """Qwen3-VL's layout: text fields nested in ``text_config``, 16-pixel patches, DeepStack mergers."""
    folder = _write_qwen_vl(family, out_dir, seed, size, max_pixels, min_pixels, _qwen3_vl_weights, _nested_config,
                            _qwen3_vl_vision(family, size), patch=QWEN3_VL_PATCH, normalization=QWEN3_VL_NORMALIZATION)
    write_json(folder, "video_preprocessor_config.json", qwen3_vl_video_processor(family))
    return folder


def qwen3_vl_video_processor(family: ModelFamily) -> dict:
    """Qwen3-VL's ``video_preprocessor_config.json`` as published, with the tiny clip budget: 2 frames per second,
    4 to 768 frames, 16-pixel patches merged 2 x 2."""
    return {"size": QWEN3_VL_VIDEO_PIXELS, "patch_size": QWEN3_VL_PATCH, "temporal_patch_size": 2, "merge_size": 2,
            **QWEN3_VL_NORMALIZATION, "fps": 2, "min_frames": 4, "max_frames": 768, "do_sample_frames": True,
            "video_processor_type": "Qwen3VLVideoProcessor", "processor_class": family.processor_class}


def _write_qwen_vl(family: ModelFamily, out_dir: str, seed: int, size: TinySize, max_pixels: int, min_pixels: int,
                   weights, config, vision: dict, patch: int, normalization: dict) -> str:
    """What the Qwen-VL checkpoints share (Qwen's tokenizer and chat template, generation and preprocessor configs),
    with the family's ``weights(size, vocab, rng)``, ``config(family, size, vocab, ids, vision)`` and
    ``vision_config``."""
    from safetensors.numpy import save_file

    os.makedirs(out_dir, exist_ok=True)
    tok = build_tokenizer(size.vocab_size, SPECIAL_TOKENS, _CORPUS)
    vocab = tok.get_vocab_size()
    ids = write_tokenizer_files(out_dir, tok, SPECIAL_TOKENS, CHAT_TEMPLATE, {
        "tokenizer_class": "Qwen2Tokenizer",
        "processor_class": family.processor_class,
        "model_max_length": 32768,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "bos_token": None,
        "unk_token": None,
        "errors": "replace",
        "split_special_tokens": False,
        "clean_up_tokenization_spaces": False,
    })

    save_file(weights(size, vocab, np.random.default_rng(seed)), os.path.join(out_dir, "model.safetensors"),
              metadata={"format": "pt"})
    write_json(out_dir, "config.json", config(family, size, vocab, ids, vision))
    write_json(out_dir, "generation_config.json", {
        "bos_token_id": ids["<|endoftext|>"], "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
        "pad_token_id": ids["<|endoftext|>"], "do_sample": False,
    })
    write_json(out_dir, "preprocessor_config.json", {
        "min_pixels": min_pixels,
        "max_pixels": max_pixels,
        "patch_size": patch,
        "temporal_patch_size": 2,
        "merge_size": 2,
        **normalization,
        "image_processor_type": "Qwen2VLImageProcessor",
        "processor_class": family.processor_class,
    })
    return out_dir


def _text_config(size: TinySize, vocab: int, ids: dict[str, int]) -> dict:
    return {
        **decoder_sizes(size, vocab),
        "hidden_act": "silu",
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6,
        "attention_dropout": 0.0,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "use_cache": True,
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": ids["<|endoftext|>"],
    }


def _image_tokens(ids: dict[str, int]) -> dict:
    return {"vision_start_token_id": ids["<|vision_start|>"], "vision_end_token_id": ids["<|vision_end|>"],
            "image_token_id": ids["<|image_pad|>"], "video_token_id": ids["<|video_pad|>"]}


def _flat_config(family: ModelFamily, size: TinySize, vocab: int, ids: dict[str, int], vision: dict) -> dict:
    """Qwen2/2.5-VL's published config.json: the text fields at the top level."""
    head_dim = size.hidden_size // size.num_attention_heads
    return {
        "architectures": [family.model_class.name], "model_type": family.model_type, **_text_config(size, vocab, ids),
        "max_window_layers": size.num_hidden_layers, "rope_theta": 1000000.0,
        "rope_scaling": {"type": "mrope", "mrope_section": mrope_section(head_dim)},
        "sliding_window": 32768, "use_sliding_window": False, "vision_token_id": ids["<|vision_pad|>"],
        **_image_tokens(ids), "vision_config": vision,
    }


def _nested_config(family: ModelFamily, size: TinySize, vocab: int, ids: dict[str, int], vision: dict) -> dict:
    """Qwen3-VL's published config.json: the text fields in ``text_config``, with interleaved M-RoPE (frequency i
    rotates by the time, height or width position as i % 3; sections bound how many go to height and width) and
    Qwen3's own ``head_dim`` field."""
    head_dim = size.hidden_size // size.num_attention_heads
    text = {**_text_config(size, vocab, ids), "model_type": f"{family.model_type}_text", "head_dim": head_dim,
            "attention_bias": False, "rope_theta": 5000000.0,
            "rope_scaling": {"rope_type": "default", "mrope_section": mrope_section(head_dim),
                             "mrope_interleaved": True}}
    return {"architectures": [family.model_class.name], "model_type": family.model_type, "tie_word_embeddings": False,
            "torch_dtype": "float32", "text_config": text, **_image_tokens(ids), "vision_config": vision}


def _qwen3_vl_vision(family: ModelFamily, size: TinySize) -> dict:
    return {
        "model_type": family.model_type,
        "depth": size.vision_depth,
        "hidden_size": size.vision_hidden_size,
        "hidden_act": "gelu_pytorch_tanh",
        "intermediate_size": size.vision_intermediate_size,
        "num_heads": size.vision_num_heads,
        "in_channels": 3,
        "out_hidden_size": size.hidden_size,
        "patch_size": QWEN3_VL_PATCH,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "num_position_embeddings": QWEN3_VL_POSITION_TABLE,
        "deepstack_visual_indexes": _deepstack_indexes(size),
        "initializer_range": 0.02,
    }


def _qwen2_vl_vision(size: TinySize) -> dict:
    """Qwen2-VL's ``vision_config`` names its width ``embed_dim`` and its output ``hidden_size``."""
    return {
        "depth": size.vision_depth,
        "embed_dim": size.vision_hidden_size,
        "hidden_size": size.hidden_size,
        "hidden_act": "quick_gelu",
        "mlp_ratio": QWEN2_VL_MLP_RATIO,
        "num_heads": size.vision_num_heads,
        "in_chans": 3,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
    }


def _qwen2_5_vl_vision(size: TinySize) -> dict:
    return {
        "depth": size.vision_depth,
        "hidden_size": size.vision_hidden_size,
        "hidden_act": "silu",
        "intermediate_size": size.vision_intermediate_size,
        "num_heads": size.vision_num_heads,
        "in_chans": 3,
        "out_hidden_size": size.hidden_size,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "window_size": 112,
        "fullatt_block_indexes": [size.vision_depth - 1],
        "tokens_per_second": 2,
    }
