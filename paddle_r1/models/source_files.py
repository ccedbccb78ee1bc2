"""The files of a checkpoint's model folder that come from the source model, not from paddleformers' save.

Training changes the weights and nothing else a model folder holds, and what paddleformers writes in place of the
rest is not what the source's users load:

- ``generation_config.json`` is rebuilt from the model config (``"_from_model_config": true``): Qwen's
  ``eos_token_id`` [<|im_end|>, <|endoftext|>] becomes <|im_end|> alone, the sampling defaults (``do_sample``,
  ``temperature``, ``top_p``, ``top_k``, ``repetition_penalty``) vanish, and PaddleOCR-VL loses bos, eos and pad, so
  transformers' ``generate`` on a checkpoint never stops at ``</s>`` and vLLM, which takes its default sampling from
  this file, serves the checkpoint differently from its source.
- The processor's files are re-serialised in paddleformers' spelling: PaddleOCR-VL's image processor writes
  ``size = {"min_pixels", "max_pixels"}``, which transformers 5.3 refuses (``size must contain 'shortest_edge' and
  'longest_edge' keys``); the tokenizer config gains paddleformers' own keys and loses the chat template to a
  ``chat_template.jinja`` the source did not have.
- ``config.json`` gains Paddle-only keys (``paddleformers_version``, ``fuse_rms_norm``, ERNIE's training keys), a
  second copy of the rope settings as ``rope_parameters`` and ``rope_theta`` inside ``rope_scaling``, which
  transformers 4.51 warns about at every load.

So a checkpoint takes each of these files from its source model folder, byte for byte, except for the
values the run did change: the weights' dtype in config.json (``torch_dtype`` or ``dtype``, as the source spells
it) and, when the run set ``min_pixels`` / ``max_pixels``, the image processor's limits (every spelling the source
file uses: top-level ``min_pixels`` / ``max_pixels``, ``size.shortest_edge`` / ``size.longest_edge``, or
``size.min_pixels`` / ``size.max_pixels``; transformers 5's ``processor_config.json`` nests them under
``image_processor``).

A hub id's files are taken the same way from the hub's repository, as paddleformers' ``from_pretrained`` reads it:
from the download cache of the hub the environment variable ``DOWNLOAD_SOURCE`` names (Hugging Face by default:
huggingface_hub's cache, ``HF_HUB_CACHE``, by default ``~/.cache/huggingface/hub/models--<org>--<name>/snapshots/
<commit>/``), each file downloaded into it that is not there yet (paddleformers 1.2.0 does not fetch
``generation_config.json`` when it loads the weights). ``hub_file`` says how.
"""
from __future__ import annotations

import functools
import json
import os
import shutil
from typing import Optional

CONFIG = "config.json"
# The files carried over when the source holds them: the generation defaults, then everything a processor is
# loaded from, in the names transformers 4.x and 5.x (and sentencepiece / BPE tokenizers) use.
CARRIED_OVER = (
    "generation_config.json",
    "preprocessor_config.json",  # the image processor (transformers 4.x, and 5.x for most models)
    "processor_config.json",  # the processor's own settings (transformers 5.x nests the image processor here)
    "video_preprocessor_config.json",
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "vocab.json", "merges.txt", "tokenizer.model",  # BPE vocabulary and merges; sentencepiece (ERNIE's published)
    "chat_template.json", "chat_template.jinja",
)
# the files that hold the image processor's pixel limits, and where in them
PIXEL_FILES = {"preprocessor_config.json": (), "processor_config.json": ("image_processor",)}
# each limit's spellings: the top-level key, and its name inside ``size`` in the two spellings transformers and
# paddleformers use
PIXEL_KEYS = {"min_pixels": ("shortest_edge", "min_pixels"), "max_pixels": ("longest_edge", "max_pixels")}


def write_source_files(source: str, folder: str, dtype: str, min_pixels: Optional[int] = None,
                       max_pixels: Optional[int] = None) -> list[str]:
    """Complete the model folder ``folder`` (the weights already in it) from the model ``source`` (a folder or a hub
    id, ``source_files``): its ``config.json`` with the weights' ``dtype``, its ``CARRIED_OVER`` files, the pixel
    limits the run overrode recorded. Returns the names taken from the source."""
    files = source_files(source)
    for name, path in files.items():
        if name == CONFIG:
            write_edited(path, os.path.join(folder, name), lambda config: with_dtype(config, dtype))
        elif name in PIXEL_FILES:
            write_edited(path, os.path.join(folder, name), _with_pixel_limits(PIXEL_FILES[name], min_pixels,
                                                                              max_pixels))
        else:
            shutil.copyfile(path, os.path.join(folder, name))
    return list(files)


def source_files(source: str) -> dict[str, str]:
    """{name: local path} of config.json and the ``CARRIED_OVER`` files the model ``source`` has: those in the
    folder ``source``, or those of the hub repository ``source`` (``hub_file``; found once per process, and the
    trainer asks at its start, so that a save never waits on the hub). A ``FileNotFoundError`` when a hub id's
    config.json cannot be had."""
    if os.path.isdir(source):
        paths = {name: os.path.join(source, name) for name in (CONFIG,) + CARRIED_OVER}
        return {name: path for name, path in paths.items() if os.path.isfile(path)}
    return dict(_hub_files(source))


@functools.lru_cache(maxsize=None)
def _hub_files(hub_id: str) -> dict[str, str]:
    paths = {name: hub_file(hub_id, name) for name in (CONFIG,) + CARRIED_OVER}
    if paths[CONFIG] is None:
        raise FileNotFoundError(f"model {hub_id}: the hub repository has no {CONFIG}")
    return {name: path for name, path in paths.items() if path is not None}


def hub_file(hub_id: str, name: str) -> Optional[str]:
    """The local path of the file ``name`` of the hub repository ``hub_id``, or None when it has none, found as
    paddleformers' ``from_pretrained`` finds its files (``paddleformers.utils.download.resolve_file_path``): in the
    download cache of the hub ``DOWNLOAD_SOURCE`` names (default ``huggingface``), else downloaded into it. For the
    Hugging Face hub, a file the cache records as missing (``.no_exist/``), or any file not in the cache when
    ``HF_HUB_OFFLINE`` is set, is None without asking the hub. A hub that cannot be reached for a file the cache does
    not hold is a ``FileNotFoundError`` naming the file."""
    from huggingface_hub import constants, try_to_load_from_cache
    from paddleformers.utils.download import resolve_file_path

    hub = os.environ.get("DOWNLOAD_SOURCE", "huggingface")  # paddleformers' own default and variable
    if hub == "huggingface":
        cached = try_to_load_from_cache(hub_id, name)  # a path, None (not known), or the "known missing" marker
        if isinstance(cached, str):
            return cached
        if cached is not None or constants.HF_HUB_OFFLINE:
            return None
    try:
        return resolve_file_path(hub_id, name, download_hub=hub, force_return=True)
    except OSError as e:
        raise FileNotFoundError(f"model {hub_id}: {name} could not be fetched from the {hub} hub ({e})") from None


def write_edited(path: str, destination: str, edit) -> None:
    """The JSON file ``path`` copied to ``destination`` as it is, or, when ``edit`` changes its contents, the edited
    JSON in the file's key order."""
    with open(path, "rb") as f:
        raw = f.read()
    content = json.loads(raw)
    edited = edit(json.loads(raw))
    with open(destination, "wb") as f:
        f.write(raw if edited == content else (json.dumps(edited, indent=2, ensure_ascii=False) + "\n").encode())


DTYPE_KEYS = ("torch_dtype", "dtype")  # transformers' spellings of a config's dtype: 4.51's, and 4.57's and 5's


def with_dtype(config: dict, dtype: str, key: Optional[str] = None) -> dict:
    """config.json's contents saying that the weights are ``dtype``: at the top level, and in each sub-config that
    names a dtype (transformers 5 writes ``text_config.dtype``). ``key``: the spelling to write, in place of either
    one there; None: the spelling(s) already there, ``torch_dtype`` at the top level when it has none (every release
    reads it)."""
    config = _respelt(config, dtype, key, add=True)
    return {name: _respelt(value, dtype, key, add=False) if isinstance(value, dict) else value
            for name, value in config.items()}


def _respelt(settings: dict, dtype: str, key: Optional[str], add: bool) -> dict:
    """``settings`` with its dtype entries (those not null) set to ``dtype``, under ``key`` when given (where the first
    of them stood: the file keeps its order); with none, ``add`` adds one."""
    spelt = [name for name, value in settings.items() if name in DTYPE_KEYS and value is not None]
    if not spelt and not add:
        return settings
    if key is None:
        return {**settings, **{name: dtype for name in spelt or ["torch_dtype"]}}
    first = spelt[0] if spelt else None
    settings = {(key if name == first else name): (dtype if name == first else value)
                for name, value in settings.items() if name == first or name not in spelt}
    return {**settings, key: dtype}


def _with_pixel_limits(path: tuple, min_pixels: Optional[int], max_pixels: Optional[int]):
    """An image processor file with the run's limits in every spelling the source file uses (top-level
    ``min_pixels`` when it uses none), reached through the keys ``path``."""
    limits = {key: value for key, value in (("min_pixels", min_pixels), ("max_pixels", max_pixels))
              if value is not None}

    def edit(content: dict) -> dict:
        settings = content
        for key in path:
            settings = settings.get(key)
            if not isinstance(settings, dict):
                return content
        size = settings.get("size") if isinstance(settings.get("size"), dict) else {}
        for key, value in limits.items():
            spelt = [name for name in PIXEL_KEYS[key] if name in size]
            for name in spelt:
                size[name] = value
            if key in settings or not spelt:
                settings[key] = value
        return content
    return edit
