"""What every tiny checkpoint is built from, whatever its family: its sizes, a seeded weight table, a byte-level BPE
tokenizer trained on the spot, and the files beside the weights (``tiny.py``: the Qwen-VL families;
``tiny_paddleocr_vl.py``: PaddleOCR-VL)."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np


QWEN_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


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


def build_tokenizer(vocab_size: int, special_tokens: list[str], corpus: list[str]):
    """Train a byte-level BPE with Qwen's pre-tokenizer and ``special_tokens`` first (ids 0, 1, ...) on ``corpus``
    (deterministic)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus * 4, trainer)
    return tok


class Weights(dict):
    """Seeded weights by published name, PyTorch orientation ([out, in])."""

    def __init__(self, rng: np.random.Generator):
        super().__init__()
        self.rng = rng

    def normal(self, name, shape):
        self[name] = (self.rng.standard_normal(shape) * 0.02).astype("float32")

    def linear(self, name, out_dim, in_dim, bias):
        self.normal(f"{name}.weight", (out_dim, in_dim))
        if bias:
            self.normal(f"{name}.bias", (out_dim,))

    def norm(self, name, dim, bias=False):
        self[f"{name}.weight"] = np.ones(dim, "float32")
        if bias:
            self[f"{name}.bias"] = np.zeros(dim, "float32")

    def vision_block_attention(self, prefix: str, width: int, norm_bias: bool) -> None:
        """A vision block's two norms and its attention (fused qkv and the output projection, both with bias)."""
        self.norm(f"{prefix}.norm1", width, bias=norm_bias)
        self.norm(f"{prefix}.norm2", width, bias=norm_bias)
        self.linear(f"{prefix}.attn.qkv", 3 * width, width, True)
        self.linear(f"{prefix}.attn.proj", width, width, True)

    def decoder(self, prefix: str, size: TinySize, vocab: int, qk_norm: bool, attention_bias: bool) -> None:
        """The Qwen2 decoder (q/k/v biases), Qwen3's (``qk_norm``: no biases, RMSNorm on each head's q and k) or
        ERNIE-4.5's (neither)."""
        h, i, head_dim = size.hidden_size, size.intermediate_size, size.hidden_size // size.num_attention_heads
        kv = size.num_key_value_heads * head_dim
        self.normal(f"{prefix}.embed_tokens.weight", (vocab, h))
        for layer in range(size.num_hidden_layers):
            p = f"{prefix}.layers.{layer}"
            self.linear(f"{p}.self_attn.q_proj", h, h, attention_bias)
            self.linear(f"{p}.self_attn.k_proj", kv, h, attention_bias)
            self.linear(f"{p}.self_attn.v_proj", kv, h, attention_bias)
            self.linear(f"{p}.self_attn.o_proj", h, h, False)
            if qk_norm:
                self.norm(f"{p}.self_attn.q_norm", head_dim)
                self.norm(f"{p}.self_attn.k_norm", head_dim)
            self.linear(f"{p}.mlp.gate_proj", i, h, False)
            self.linear(f"{p}.mlp.up_proj", i, h, False)
            self.linear(f"{p}.mlp.down_proj", h, i, False)
            self.norm(f"{p}.input_layernorm", h)
            self.norm(f"{p}.post_attention_layernorm", h)
        self.norm(f"{prefix}.norm", h)
        self.linear("lm_head", vocab, h, False)


def mrope_section(head_dim: int) -> list[int]:
    """Split head_dim/2 rotary frequencies over (time, height, width) as Qwen does (16, 24, 24 of 64)."""
    half = head_dim // 2
    t = half // 4
    h = (half - t) // 2
    return [t, h, half - t - h]


def decoder_sizes(size: TinySize, vocab: int) -> dict:
    """The text decoder's size fields of a published config.json."""
    return {"vocab_size": vocab, "hidden_size": size.hidden_size, "intermediate_size": size.intermediate_size,
            "num_hidden_layers": size.num_hidden_layers, "num_attention_heads": size.num_attention_heads,
            "num_key_value_heads": size.num_key_value_heads}


def write_tokenizer_files(out_dir: str, tok, special_tokens: list[str], chat_template: str,
                          settings: dict) -> dict[str, int]:
    """``tokenizer.json``, ``tokenizer_config.json`` (``settings``, the special tokens as added tokens, the chat
    template) and ``chat_template.json``; returns each special token's id."""
    ids = {t: tok.token_to_id(t) for t in special_tokens}
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    write_json(out_dir, "tokenizer_config.json", {
        **settings,
        "added_tokens_decoder": {
            str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                     "single_word": False, "special": True}
            for t, i in ids.items()
        },
        "chat_template": chat_template,
    })
    write_json(out_dir, "chat_template.json", {"chat_template": chat_template})
    return ids


def write_json(folder: str, name: str, obj) -> None:
    with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
