"""The files of a checkpoint's model folder that come from the source model folder, not from paddleformers' save.

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

So a checkpoint of a local source folder takes each of these files from the source, byte for byte, except for the
values the run did change: the weights' dtype in config.json (``torch_dtype`` or ``dtype``, as the source spells
it) and, when the run set ``min_pixels`` / ``max_pixels``, the image processor's limits (every spelling the source
file uses: top-level ``min_pixels`` / ``max_pixels``, ``size.shortest_edge`` / ``size.longest_edge``, or
``size.min_pixels`` / ``size.max_pixels``; transformers 5's ``processor_config.json`` nests them under
``image_processor``). A hub id (no local folder to copy from) keeps paddleformers' files.
"""
from __future__ import annotations

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


def write_source_files(source: str, folder: str, processor, dtype: str, min_pixels: Optional[int] = None,
                       max_pixels: Optional[int] = None) -> list[str]:
    """Complete the model folder ``folder`` (the weights and paddleformers' config already in it) from the model
    folder ``source``: its ``config.json`` with the weights' ``dtype``, its ``CARRIED_OVER`` files, the pixel limits
    the run overrode recorded. Returns the names taken from the source. A hub id has no folder to copy from: the
    processor is saved by paddleformers (``processor.save_pretrained``) and paddleformers' config stays."""
    if not os.path.isdir(source):
        processor.save_pretrained(folder)
        return []
    _write_edited(source, folder, CONFIG, _with_dtype(dtype))
    copied = [CONFIG]
    for name in CARRIED_OVER:
        if not os.path.isfile(os.path.join(source, name)):
            continue
        if name in PIXEL_FILES:
            _write_edited(source, folder, name, _with_pixel_limits(PIXEL_FILES[name], min_pixels, max_pixels))
        else:
            shutil.copyfile(os.path.join(source, name), os.path.join(folder, name))
        copied.append(name)
    return copied


def _write_edited(source: str, folder: str, name: str, edit) -> None:
    """``folder/name``: the source's file as it is, or, when ``edit`` changes its JSON, the edited JSON in the
    source's key order."""
    with open(os.path.join(source, name), "rb") as f:
        raw = f.read()
    content = json.loads(raw)
    edited = edit(json.loads(raw))
    with open(os.path.join(folder, name), "wb") as f:
        f.write(raw if edited == content else (json.dumps(edited, indent=2, ensure_ascii=False) + "\n").encode())


def _with_dtype(dtype: str):
    """config.json with ``dtype`` in the spelling(s) the source uses at its top level (``torch_dtype``:
    transformers 4.x and the published files; ``dtype``: 5.x); ``torch_dtype`` when it has neither, which both
    read."""
    def edit(config: dict) -> dict:
        keys = [key for key in ("torch_dtype", "dtype") if key in config] or ["torch_dtype"]
        for key in keys:
            config[key] = dtype
        return config
    return edit


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
