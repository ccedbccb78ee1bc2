"""``--key value`` overrides as argparse users write them: ``--key v1 v2``, ``--key=value`` (the value kept byte for
byte: only the key's dashes become underscores), a bare ``--flag`` for a true/false key; each value read as its key's
type asks."""
from __future__ import annotations

import typing
from typing import Any

import yaml

from ...errors import ConfigError
from .files import DuplicateKey, load_yaml
from ..values import alternatives, split_optional


def _split_overrides(args: list[str]) -> dict[str, list[str]]:
    """``--key v1 v2``, ``--key=v`` and a bare ``--flag`` -> {key: [texts]} (a flag has none)."""
    texts: dict[str, list[str]] = {}
    key = None
    for arg in args:
        if arg.startswith("--"):
            key, eq, text = arg[2:].partition("=")
            key = key.replace("-", "_")  # --output-dir is --output_dir; the value keeps its dashes
            texts[key] = [text] if eq else []
            key = None if eq else key  # --key=value takes exactly that value
        elif key is None:
            raise ConfigError(f"command line: expected --key value, got {arg!r}")
        else:
            texts[key].append(arg)
    return texts


YAML_NULLS = ("null", "Null", "NULL", "~", "")


def _read_text(key: str, text: str, annotation) -> Any:
    """A command-line value: the text as typed for a string key, else read as yaml (numbers, true/false, lists)."""
    if split_optional(annotation)[0] is str:
        return text
    try:
        return load_yaml(text)
    except (yaml.YAMLError, DuplicateKey) as e:
        raise ConfigError(f"command line: --{key}: cannot read {text!r} ({e})", keys=(key,)) from None


def _read_texts(key: str, texts: list[str], annotation) -> Any:
    """The value of ``--key texts...`` as TRL's HfArgumentParser takes it: no text is true for a key that may be
    true/false (a flag) or a key ``cls`` lacks (a peer's flag, see ``SOURCE_KEYS``), and an error for any other; yaml's
    null unsets a key that may be null (``--data_path null``); a list key takes every text as one item, or one yaml list
    ``"[a, b]"`` (a text in brackets; ``"[qk]_proj"`` is an item); any other key one value."""
    inner, optional = split_optional(annotation)
    if not texts:
        if annotation is not None and bool not in alternatives(inner):
            raise ConfigError(f"command line: --{key} needs a value (only a true/false key may be given alone)",
                              keys=(key,))
        return True
    if optional and len(texts) == 1 and texts[0] in YAML_NULLS:
        return None
    one_yaml_list = len(texts) == 1 and texts[0].strip().startswith("[") and texts[0].strip().endswith("]")
    if typing.get_origin(inner) is list and not one_yaml_list:
        return [_read_text(key, text, typing.get_args(inner)[0]) for text in texts]
    values = [_read_text(key, text, annotation) for text in texts]
    return values[0] if len(values) == 1 else values


def parse_overrides(args: list[str], cls=None) -> dict[str, Any]:
    """``["--learning_rate", "1e-5", "--reward_funcs", "iou", "format", "--beta=0"]`` ->
    ``{"learning_rate": 1e-05, "reward_funcs": ["iou", "format"], "beta": 0}``. With ``cls``, each key is read as
    its declared type asks (see ``_read_texts``); without it, or for a key ``cls`` lacks, every text is yaml."""
    types = typing.get_type_hints(cls) if cls else {}
    return {key: _read_texts(key, texts, types.get(key)) for key, texts in _split_overrides(args).items()}
