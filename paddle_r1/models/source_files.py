"""Files of the source model folder that a checkpoint carries over unchanged.

paddleformers' ``save_pretrained`` writes a ``generation_config.json`` rebuilt from the model config
(``"_from_model_config": true``): Qwen's ``eos_token_id`` [<|im_end|>, <|endoftext|>] becomes <|im_end|> alone, the
sampling defaults (``do_sample``, ``temperature``, ``top_p``, ``top_k``, ``repetition_penalty``) vanish, and
PaddleOCR-VL loses bos, eos and pad, so transformers' ``generate`` on a checkpoint never stops at ``</s>`` and vLLM,
which takes its default sampling from this file, serves the checkpoint differently from its source. Training changes
none of it, so the source's own file is copied over the rebuilt one, byte for byte.
"""
from __future__ import annotations

import os
import shutil

CARRIED_OVER = ("generation_config.json",)


def carry_over_source_files(source: str, folder: str) -> list[str]:
    """Copy each ``CARRIED_OVER`` file of the local model folder ``source`` into ``folder`` (replacing what
    ``save_pretrained`` wrote); the names copied. A hub id (no local folder) or a source without the file keeps
    ``save_pretrained``'s."""
    copied = []
    for name in CARRIED_OVER:
        path = os.path.join(source, name)
        if os.path.isfile(path):
            shutil.copyfile(path, os.path.join(folder, name))
            copied.append(name)
    return copied
