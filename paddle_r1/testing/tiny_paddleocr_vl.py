"""A tiny, seeded PaddleOCR-VL checkpoint in the published layout (``PaddlePaddle/PaddleOCR-VL``), for tests and the
demo: ``tiny.make_tiny_model(..., family=families.PADDLEOCR_VL.model_type)``.

The published folder: a flat ``config.json`` (the ERNIE-4.5 text fields at the top, ``vision_config`` nested;
``rope_theta`` + ``rope_scaling`` with M-RoPE sections), ``model.safetensors`` with the names
``visual.vision_model...`` (a SigLIP-style NaViT encoder: 14-pixel patches, a learned position table interpolated to
each image, LayerNorm blocks with 2D rotary attention), ``mlp_AR...`` (the 2 x 2 patch merger) and ``model...`` /
``lm_head.weight`` (ERNIE-4.5: no biases, RMSNorm, grouped-query attention), the ERNIE tokenizer's special tokens, the
published chat template (``User: ... \\nAssistant: ``) and the image processor (``temporal_patch_size`` 1, mean and
std 0.5, bicubic resizing). The unused ``packing_position_embedding`` table of the published weights is left out, as
transformers writes it.
"""
from __future__ import annotations

import os

import numpy as np

from ..models.families import ModelFamily
from .parts import TinySize, Weights, build_tokenizer, decoder_sizes, mrope_section, write_json, write_tokenizer_files

# ERNIE-4.5's: <unk> (padding), <s>, </s> take ids 0, 1, 2 as in the published vocabulary
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<|begin_of_sentence|>", "<|end_of_sentence|>", "<|IMAGE_START|>",
                  "<|IMAGE_END|>", "<|IMAGE_PLACEHOLDER|>", "<|video_pad|>"]
PATCH = 14
POSITION_GRID = 8  # the learned position table is POSITION_GRID^2 rows (published: image_size 384, 27 x 27)

# PaddlePaddle/PaddleOCR-VL's chat_template.jinja: the images, then the text of a user turn; "Assistant: " to answer.
# The image markup is written out here: the published template reads it from a variable ``image_token`` when one is
# defined, and transformers and paddleformers define every special token of the tokenizer as one, so a tokenizer that
# names ``<|IMAGE_PLACEHOLDER|>`` its image_token (transformers' processor needs that) would drop the start and end
# tokens the model was trained with.
CHAT_TEMPLATE = (
    "{%- if not add_generation_prompt is defined -%}{%- set add_generation_prompt = true -%}{%- endif -%}"
    "{%- if not cls_token is defined -%}{%- set cls_token = \"<|begin_of_sentence|>\" -%}{%- endif -%}"
    "{%- if not eos_token is defined -%}{%- set eos_token = \"</s>\" -%}{%- endif -%}"
    "{{- cls_token -}}"
    "{%- for message in messages -%}"
    "{%- if message[\"role\"] == \"user\" -%}{{- \"User: \" -}}"
    "{%- for content in message[\"content\"] -%}{%- if content[\"type\"] == \"image\" -%}"
    "{{ \"<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>\" }}"
    "{%- endif -%}{%- endfor -%}"
    "{%- for content in message[\"content\"] -%}{%- if content[\"type\"] == \"text\" -%}{{ content[\"text\"] }}"
    "{%- endif -%}{%- endfor -%}{{ \"\\n\" -}}"
    "{%- elif message[\"role\"] == \"assistant\" -%}{{- \"Assistant: \" -}}"
    "{%- for content in message[\"content\"] -%}{%- if content[\"type\"] == \"text\" -%}{{ content[\"text\"] }}"
    "{%- endif -%}{%- endfor -%}{{ eos_token -}}"
    "{%- elif message[\"role\"] == \"system\" -%}"
    "{%- for content in message[\"content\"] -%}{%- if content[\"type\"] == \"text\" -%}"
    "{{ content[\"text\"] + \"\\n\" }}"
    "{%- endif -%}{%- endfor -%}"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- \"Assistant: \" -}}{%- endif -%}"
)

# the task prompts PaddleOCR-VL is trained with, and text of the kind the synthetic OCR set renders
CORPUS = [
    "User: ", "Assistant: ", "OCR:", "Table Recognition:", "Formula Recognition:", "Chart Recognition:",
    "<fcel>", "<ecel>", "<lcel>", "<ucel>", "<xcel>", "<nl>", "<table>", "</table>", "<tr>", "</tr>", "<td>", "</td>",
    "the of and to in is for on with as by at from invoice total date amount number name address page table",
    "0123456789 ABCDEFGHIJKLMNOPQRSTUVWXYZ abcdefghijklmnopqrstuvwxyz .,:;-/()%$#",
]


def make_tiny_paddleocr_vl(family: ModelFamily, out_dir: str, seed: int, size: TinySize, max_pixels: int,
                           min_pixels: int) -> str:
    """``family``'s tiny checkpoint (``ModelFamily.tiny_builder``): its names come from the entry."""
    from safetensors.numpy import save_file

    os.makedirs(out_dir, exist_ok=True)
    tok = build_tokenizer(size.vocab_size, SPECIAL_TOKENS, CORPUS)
    vocab = tok.get_vocab_size()
    ids = write_tokenizer_files(out_dir, tok, SPECIAL_TOKENS, CHAT_TEMPLATE, {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "processor_class": family.processor_class,
        "model_max_length": 131072,
        "bos_token": "<s>", "eos_token": "</s>", "pad_token": "<unk>", "unk_token": "<unk>",
        "cls_token": "<|begin_of_sentence|>", "sep_token": "<|end_of_sentence|>",
        "extra_special_tokens": {"image_token": "<|IMAGE_PLACEHOLDER|>"},  # transformers' processor reads it
        "clean_up_tokenization_spaces": False,
    })
    save_file(_weights(size, vocab, np.random.default_rng(seed)), os.path.join(out_dir, "model.safetensors"),
              metadata={"format": "pt"})
    write_json(out_dir, "config.json", _config(family, size, vocab, ids))
    write_json(out_dir, "generation_config.json", {
        "bos_token_id": ids["<s>"], "eos_token_id": ids["</s>"], "pad_token_id": ids["<unk>"], "do_sample": False})
    write_json(out_dir, "preprocessor_config.json", {
        "min_pixels": min_pixels,
        "max_pixels": max_pixels,
        "patch_size": PATCH,
        "temporal_patch_size": 1,
        "merge_size": 2,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "resample": 3,
        "rescale_factor": 1 / 255,
        "do_convert_rgb": True,
        "image_processor_type": "PaddleOCRVLImageProcessor",
        "processor_class": family.processor_class,
    })
    return out_dir


def _weights(size: TinySize, vocab: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The published names, PyTorch orientation ([out, in])."""
    w = Weights(rng)
    vh, vi, merged = size.vision_hidden_size, size.vision_intermediate_size, 4 * size.vision_hidden_size
    vision = "visual.vision_model"
    w.normal(f"{vision}.embeddings.patch_embedding.weight", (vh, 3, PATCH, PATCH))
    w.normal(f"{vision}.embeddings.patch_embedding.bias", (vh,))
    w.normal(f"{vision}.embeddings.position_embedding.weight", (POSITION_GRID * POSITION_GRID, vh))
    for layer in range(size.vision_depth):
        p = f"{vision}.encoder.layers.{layer}"
        w.norm(f"{p}.layer_norm1", vh, bias=True)
        w.norm(f"{p}.layer_norm2", vh, bias=True)
        for projection in ("q_proj", "k_proj", "v_proj", "out_proj"):
            w.linear(f"{p}.self_attn.{projection}", vh, vh, True)
        w.linear(f"{p}.mlp.fc1", vi, vh, True)
        w.linear(f"{p}.mlp.fc2", vh, vi, True)
    w.norm(f"{vision}.post_layernorm", vh, bias=True)
    w.norm("mlp_AR.pre_norm", vh, bias=True)
    w.linear("mlp_AR.linear_1", merged, merged, True)
    w.linear("mlp_AR.linear_2", size.hidden_size, merged, True)
    w.decoder("model", size, vocab, qk_norm=False, attention_bias=False)
    return dict(w)


def _config(family: ModelFamily, size: TinySize, vocab: int, ids: dict[str, int]) -> dict:
    head_dim = size.hidden_size // size.num_attention_heads
    return {
        "architectures": [family.model_class.name],
        "model_type": family.model_type,
        **decoder_sizes(size, vocab),
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000,
        "rope_scaling": {"mrope_section": mrope_section(head_dim), "rope_type": "default", "type": "default"},
        "use_bias": False,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "use_cache": False,
        "pad_token_id": ids["<unk>"], "bos_token_id": ids["<s>"], "eos_token_id": ids["</s>"],
        "image_token_id": ids["<|IMAGE_PLACEHOLDER|>"], "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|IMAGE_START|>"], "vision_end_token_id": ids["<|IMAGE_END|>"],
        "vision_config": {
            "model_type": family.model_type,
            "hidden_size": size.vision_hidden_size,
            "intermediate_size": size.vision_intermediate_size,
            "num_hidden_layers": size.vision_depth,
            "num_attention_heads": size.vision_num_heads,
            "num_channels": 3,
            "image_size": POSITION_GRID * PATCH,
            "patch_size": PATCH,
            "hidden_act": "gelu_pytorch_tanh",
            "layer_norm_eps": 1e-6,
            "spatial_merge_size": 2,
            "temporal_patch_size": 1,
            "tokens_per_second": 2,
        },
    }
