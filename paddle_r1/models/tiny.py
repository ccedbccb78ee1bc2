"""Tiny, seeded Qwen-VL checkpoints in the published layout, for tests and the demo.

The folder looks like a download from a model hub (Qwen2-VL or Qwen2.5-VL): a flat ``config.json``, one
``model.safetensors`` with the published weight names (``visual.blocks.0.attn.qkv.weight``,
``model.layers.0.self_attn.q_proj.weight``, ``lm_head.weight``) in PyTorch orientation,
a byte-level BPE ``tokenizer.json`` carrying Qwen's special tokens, the chat template and
``preprocessor_config.json``. It is loaded through exactly the code path of a real checkpoint.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np

from ..config import ConfigError
from .qwen3_vl import QWEN3_VL_NOT_SUPPORTED

FAMILIES = ("qwen2_vl", "qwen2_5_vl")
ARCHITECTURES = {"qwen2_vl": "Qwen2VLForConditionalGeneration", "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration"}
PROCESSOR_CLASSES = {"qwen2_vl": "Qwen2VLProcessor", "qwen2_5_vl": "Qwen2_5_VLProcessor"}
QWEN2_VL_MLP_RATIO = 4  # every published Qwen2-VL; its vision MLP is mlp_ratio * embed_dim wide

SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>",
    "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>", "<|box_end|>",
    "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
]

# Qwen2's pre-tokenizer split: digits one at a time, words with their leading space.
QWEN_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
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
    "First output the thinking process in <think> </think> tags and then output the final answer in <answer> </answer> tags.",
    "How many objects are there in the image?", "Output the final answer (number) in <answer> </answer> tags.",
    "red green blue yellow purple orange white black square circle triangle shape shapes object objects",
    "the a an of in on at is are there left right top bottom small large big count how many",
    "The box is at", "I see a", "answer", "think", "bbox_2d", "label", '{"bbox_2d": [', '"label": "',
]


@dataclass
class TinySize:
    """Dimensions of a tiny model; the defaults keep a test's forward pass in milliseconds."""

    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    vision_hidden_size: int = 32
    vision_intermediate_size: int = 64  # Qwen2.5-VL; Qwen2-VL's MLP is QWEN2_VL_MLP_RATIO times the width
    vision_depth: int = 2
    vision_num_heads: int = 2
    vocab_size: int = 512


def build_tokenizer(vocab_size: int):
    """Train a byte-level BPE with Qwen's pre-tokenizer and special tokens (deterministic)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer)
    return tok


def _random_weights(size: TinySize, vocab: int, rng: np.random.Generator,
                   family: str = "qwen2_5_vl") -> dict[str, np.ndarray]:
    """Weights named and shaped as in the family's published safetensors (PyTorch [out, in])."""
    weights: dict[str, np.ndarray] = {}

    def normal(shape):
        return (rng.standard_normal(shape) * 0.02).astype("float32")

    def linear(name, out_dim, in_dim, bias):
        weights[f"{name}.weight"] = normal((out_dim, in_dim))
        if bias:
            weights[f"{name}.bias"] = normal((out_dim,))

    def norm(name, dim, bias=False):
        weights[f"{name}.weight"] = np.ones(dim, "float32")
        if bias:
            weights[f"{name}.bias"] = np.zeros(dim, "float32")

    vh, vi = size.vision_hidden_size, size.vision_intermediate_size
    weights["visual.patch_embed.proj.weight"] = normal((vh, 3, 2, 14, 14))
    qwen2_vl = family == "qwen2_vl"  # LayerNorms with bias and an fc1/fc2 MLP; Qwen2.5-VL: RMSNorms, gated MLP
    for b in range(size.vision_depth):
        p = f"visual.blocks.{b}"
        norm(f"{p}.norm1", vh, bias=qwen2_vl)
        norm(f"{p}.norm2", vh, bias=qwen2_vl)
        linear(f"{p}.attn.qkv", 3 * vh, vh, True)
        linear(f"{p}.attn.proj", vh, vh, True)
        if qwen2_vl:
            linear(f"{p}.mlp.fc1", QWEN2_VL_MLP_RATIO * vh, vh, True)
            linear(f"{p}.mlp.fc2", vh, QWEN2_VL_MLP_RATIO * vh, True)
        else:
            linear(f"{p}.mlp.gate_proj", vi, vh, True)
            linear(f"{p}.mlp.up_proj", vi, vh, True)
            linear(f"{p}.mlp.down_proj", vh, vi, True)
    norm("visual.merger.ln_q", vh, bias=qwen2_vl)
    linear("visual.merger.mlp.0", 4 * vh, 4 * vh, True)
    linear("visual.merger.mlp.2", size.hidden_size, 4 * vh, True)

    h, i = size.hidden_size, size.intermediate_size
    kv = size.num_key_value_heads * (h // size.num_attention_heads)
    weights["model.embed_tokens.weight"] = normal((vocab, h))
    for layer in range(size.num_hidden_layers):
        p = f"model.layers.{layer}"
        linear(f"{p}.self_attn.q_proj", h, h, True)
        linear(f"{p}.self_attn.k_proj", kv, h, True)
        linear(f"{p}.self_attn.v_proj", kv, h, True)
        linear(f"{p}.self_attn.o_proj", h, h, False)
        linear(f"{p}.mlp.gate_proj", i, h, False)
        linear(f"{p}.mlp.up_proj", i, h, False)
        linear(f"{p}.mlp.down_proj", h, i, False)
        norm(f"{p}.input_layernorm", h)
        norm(f"{p}.post_attention_layernorm", h)
    norm("model.norm", h)
    linear("lm_head", vocab, h, False)
    return weights


def _mrope_section(head_dim: int) -> list[int]:
    """Split head_dim/2 rotary frequencies over (time, height, width) as Qwen does (16, 24, 24 of 64)."""
    half = head_dim // 2
    t = half // 4
    h = (half - t) // 2
    return [t, h, half - t - h]


def make_tiny_model(out_dir: str, family: str = "qwen2_5_vl", seed: int = 0, size: TinySize | None = None,
                    max_pixels: int = 112 * 112, min_pixels: int = 56 * 56) -> str:
    """Write a complete, loadable tiny checkpoint folder and return its path."""
    if family == "qwen3_vl":
        raise ConfigError(QWEN3_VL_NOT_SUPPORTED)
    if family not in FAMILIES:
        raise ConfigError(f"make-tiny-model: family {family!r} is not supported yet (supported: {', '.join(FAMILIES)})")
    from safetensors.numpy import save_file

    size = size or TinySize()
    os.makedirs(out_dir, exist_ok=True)
    tok = build_tokenizer(size.vocab_size)
    vocab = tok.get_vocab_size()
    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    tok.save(os.path.join(out_dir, "tokenizer.json"))

    weights = _random_weights(size, vocab, np.random.default_rng(seed), family)
    save_file(weights, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})

    head_dim = size.hidden_size // size.num_attention_heads
    config = {
        "architectures": [ARCHITECTURES[family]],
        "model_type": family,
        "vocab_size": vocab,
        "hidden_size": size.hidden_size,
        "intermediate_size": size.intermediate_size,
        "num_hidden_layers": size.num_hidden_layers,
        "num_attention_heads": size.num_attention_heads,
        "num_key_value_heads": size.num_key_value_heads,
        "hidden_act": "silu",
        "max_position_embeddings": 32768,
        "max_window_layers": size.num_hidden_layers,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_scaling": {"type": "mrope", "mrope_section": _mrope_section(head_dim)},
        "sliding_window": 32768,
        "use_sliding_window": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "use_cache": True,
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": ids["<|endoftext|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
        "vision_token_id": ids["<|vision_pad|>"],
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_config": _vision_config(family, size),
    }
    _write_json(out_dir, "config.json", config)
    _write_json(out_dir, "generation_config.json", {
        "bos_token_id": ids["<|endoftext|>"], "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
        "pad_token_id": ids["<|endoftext|>"], "do_sample": False,
    })
    _write_json(out_dir, "tokenizer_config.json", {
        "tokenizer_class": "Qwen2Tokenizer",
        "processor_class": PROCESSOR_CLASSES[family],
        "model_max_length": 32768,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "bos_token": None,
        "unk_token": None,
        "errors": "replace",
        "split_special_tokens": False,
        "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": {
            str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                     "single_word": False, "special": True}
            for t, i in ids.items()
        },
        "chat_template": CHAT_TEMPLATE,
    })
    _write_json(out_dir, "chat_template.json", {"chat_template": CHAT_TEMPLATE})
    _write_json(out_dir, "preprocessor_config.json", {
        "min_pixels": min_pixels,
        "max_pixels": max_pixels,
        "patch_size": 14,
        "temporal_patch_size": 2,
        "merge_size": 2,
        "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_std": [0.26862954, 0.26130258, 0.27577711],
        "image_processor_type": "Qwen2VLImageProcessor",
        "processor_class": PROCESSOR_CLASSES[family],
    })
    return out_dir


def _vision_config(family: str, size: TinySize) -> dict:
    """The published ``vision_config``: Qwen2-VL's names its width ``embed_dim`` and its output ``hidden_size``."""
    if family == "qwen2_vl":
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


def _write_json(folder: str, name: str, obj) -> None:
    with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
