"""A model's config.json in either spelling, as the one paddleformers reads, or a ConfigError naming the key.

The published Qwen-VL checkpoints (and transformers 4.x) spell the text decoder's rope settings ``rope_theta`` +
``rope_scaling`` (``{"type": "mrope", "mrope_section": [...]}``) and Qwen3-VL repeats ``tie_word_embeddings`` in
``text_config``. transformers 5.x writes one dict, ``text_config.rope_parameters`` (theta, type and M-RoPE sections
together), nests Qwen2/2.5-VL's text fields in ``text_config`` too, and keeps ``tie_word_embeddings`` at the top
only, where its models read it (and PaddleOCR-VL's text fields in ``text_config``, published flat).
paddleformers 1.2.0 reads only the published spelling: given the new one, its
Qwen3-VL text config replaces the rope settings with its defaults (theta 1e6, sections [24, 20, 20]) and its
sub-configs take the tie flag's default (False), so the model loads without a word and computes other logits, or a
tied model fails for want of ``lm_head.weight``. ``published_spelling`` rewrites the new spelling into the old one
and refuses rope settings the models here cannot compute (another rope type, per-layer settings, sections that do
not cover the head, two spellings that disagree) instead of letting a default stand in for them.
"""
from __future__ import annotations

import copy
from typing import Any

from ..errors import ConfigError
from .families import family_of

# the rope types paddleformers' Qwen-VL rotary embeddings compute (M-RoPE over the default inverse frequencies)
COMPUTED_ROPE_TYPES = ("default", "mrope")


def published_spelling(config: dict, source: str) -> dict:
    """``config`` (config.json's contents, of a supported family) with its text rope settings as ``rope_theta`` +
    ``rope_scaling``, the top-level ``tie_word_embeddings`` also in ``text_config``, and the text fields at the top
    where the family's paddleformers config reads them only there (``ModelFamily.flat_text_config``); ``source``
    names the file in errors."""
    config = copy.deepcopy(config)
    nested = isinstance(config.get("text_config"), dict)
    text = config["text_config"] if nested else config
    where = f"{source}: {'text_config.' if nested else ''}"
    theta, scaling = _rope_settings(text, where)
    text.pop("rope_parameters", None)
    text.update(rope_theta=theta, rope_scaling=scaling)
    if nested and "tie_word_embeddings" in config:
        # transformers 5 reads the top-level flag; paddleformers' sub-configs would take their default (False)
        text["tie_word_embeddings"] = config["tie_word_embeddings"]
    if nested and family_of(config).flat_text_config:
        config = _flattened(config)
    return config


def _flattened(config: dict) -> dict:
    """The text fields at the top level, as published; on a key both levels hold (``dtype``, the tie flag) the top
    level's value stays, the one transformers 5 reads."""
    outer = {key: value for key, value in config.items() if key != "text_config"}
    text = {key: value for key, value in config["text_config"].items() if key != "model_type"}
    return {**text, **outer}


def _rope_settings(text: dict, where: str) -> tuple[float, dict]:
    """(theta, rope_scaling without theta) from either spelling, checked."""
    parameters, scaling = text.get("rope_parameters"), text.get("rope_scaling")
    for key, value in (("rope_parameters", parameters), ("rope_scaling", scaling)):
        if value is not None and not isinstance(value, dict):
            raise ConfigError(f"{where}{key} must be a mapping, got {value!r}")
    if parameters and all(isinstance(v, dict) for v in parameters.values()):
        raise ConfigError(f"{where}rope_parameters holds settings per layer type ({', '.join(parameters)}); "
                          "the Qwen-VL decoders here take one rope setting for all layers")
    parameters, scaling = parameters or {}, scaling or {}
    for key in parameters.keys() & scaling.keys():
        if parameters[key] != scaling[key]:
            raise ConfigError(f"{where}rope_parameters.{key} ({parameters[key]!r}) and rope_scaling.{key} "
                              f"({scaling[key]!r}) disagree: which one the checkpoint was trained with is unknown")
    merged = {**scaling, **parameters}
    theta = _one_theta(merged.pop("rope_theta", None), text.get("rope_theta"), where)
    rope_type = merged.get("rope_type", merged.get("type", "default"))
    if rope_type not in COMPUTED_ROPE_TYPES:
        raise ConfigError(f"{where}rope type {rope_type!r} is not computed by the Qwen-VL models here (only "
                          f"{' / '.join(COMPUTED_ROPE_TYPES)} M-RoPE); loading it would silently use the default rope")
    _check_sections(merged.get("mrope_section"), text, where)
    return theta, merged


def _one_theta(in_parameters: Any, flat: Any, where: str) -> float:
    if in_parameters is not None and flat is not None and float(in_parameters) != float(flat):
        raise ConfigError(f"{where}rope_theta ({flat!r}) and rope_parameters.rope_theta ({in_parameters!r}) disagree")
    theta = in_parameters if in_parameters is not None else flat
    if theta is None:
        raise ConfigError(f"{where}no rope theta: neither rope_theta (the published spelling) nor "
                          "rope_parameters.rope_theta (transformers 5's) is given, and a default would change the "
                          "model's outputs")
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 0:
        raise ConfigError(f"{where}rope theta must be a positive number, got {theta!r}")
    return float(theta)


def _check_sections(sections: Any, text: dict, where: str) -> None:
    """M-RoPE's temporal / height / width sections must split the head's rotary half: head_dim / 2 frequencies."""
    try:
        head_dim = text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]
    except (KeyError, TypeError, ZeroDivisionError):
        head_dim = None  # the model config reports the missing size itself
    if not (isinstance(sections, list) and len(sections) == 3
            and all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sections)):
        raise ConfigError(f"{where}M-RoPE needs mrope_section (in rope_parameters or rope_scaling): three positive "
                          f"integers, got {sections!r}")
    if head_dim is not None and sum(sections) != head_dim // 2:
        raise ConfigError(f"{where}mrope_section {sections} adds up to {sum(sections)}, not head_dim / 2 = "
                          f"{head_dim // 2}")
