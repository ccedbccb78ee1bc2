"""What the rewards knew about a prompt's images, recovered for rows that do not carry it.

The rewards convert a predicted box with the prompt's ``image_sizes`` (originals), ``input_sizes`` (the
processor's ``smart_resize`` of each) and ``coord_system``. Trainer rows that hold these are used as they are;
otherwise the original size is read from the image file, the input size is recomputed with the processor's own
``smart_resize`` and the limits of the run's ``preprocessor_config.json``, and the coordinate system is the model
family's default (``config.json``'s ``model_type``), all taken from the run's newest checkpoint (or ``--model``).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Optional

from ..models.coords import FAMILY_COORD_SYSTEM

MISSING_FACTS_NOTE = (
    "completions.jsonl rows carry no image_sizes / input_sizes / coord_system; boxes were converted with sizes "
    "recomputed here ({source}). The trainer should add to each row what the rewards saw: "
    '"image_sizes": [[w, h], ...], "input_sizes": [[w, h], ...], "coord_system": "...".')


@dataclass
class Resizer:
    """The processor's resize, from a model folder's preprocessor_config.json."""

    factor: int
    min_pixels: int
    max_pixels: int
    coord_system: Optional[str]  # the family's default, from config.json's model_type

    def input_size(self, size) -> tuple[int, int]:
        # the very function the processor paddleformers loads (its fast image processor) resizes with
        from paddleformers.transformers.qwen2_vl.image_processor_fast import smart_resize

        width, height = size
        h, w = smart_resize(height, width, factor=self.factor, min_pixels=self.min_pixels, max_pixels=self.max_pixels)
        return w, h


def resizer_for(model_dir: str) -> Resizer:
    with open(os.path.join(model_dir, "preprocessor_config.json"), encoding="utf-8") as f:
        pre = json.load(f)
    size = pre.get("size") or {}
    coord_system = None
    config_file = os.path.join(model_dir, "config.json")
    if os.path.isfile(config_file):
        with open(config_file, encoding="utf-8") as f:
            coord_system = FAMILY_COORD_SYSTEM.get(json.load(f).get("model_type"))
    return Resizer(factor=int(pre.get("patch_size", 14)) * int(pre.get("merge_size", 2)),
                   min_pixels=int(pre.get("min_pixels") or size.get("shortest_edge") or 56 * 56),
                   max_pixels=int(pre.get("max_pixels") or size.get("longest_edge") or 28 * 28 * 1280),
                   coord_system=coord_system)


def find_model_dir(run_dir: str) -> Optional[str]:
    """The run's newest complete checkpoint (a model folder), else None."""
    from ..trainer.checkpoint import list_checkpoints

    found = [c for c in list_checkpoints(run_dir) if os.path.isfile(os.path.join(c, "preprocessor_config.json"))]
    return found[-1] if found else None


def prompt_facts(facts: dict, image_sizes: list, resizer: Optional[Resizer], coord_system: Optional[str]) -> dict:
    """``image_sizes`` / ``input_sizes`` / ``coord_system`` for one prompt: the row's own where it has them, else
    recomputed (``image_sizes``: the opened images' sizes); a value that cannot be known is None."""
    sizes = facts.get("image_sizes") or image_sizes
    inputs = facts.get("input_sizes")
    if inputs is None and resizer is not None:
        inputs = [resizer.input_size(s) for s in sizes]
    system = facts.get("coord_system") or coord_system or (resizer.coord_system if resizer else None)
    return {"image_sizes": [tuple(s) for s in sizes], "input_sizes": inputs, "coord_system": system}
