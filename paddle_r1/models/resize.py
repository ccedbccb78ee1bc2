"""A processor's resize of an image (``smart_resize`` with its folder's limits), known without loading the processor.

The rewards, the report and the synthetic zoom task need an image's input size (what the model sees, the space
``abs_resized`` boxes are in) from a model folder's ``preprocessor_config.json`` alone.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Optional

from .families import FAMILIES


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
            family = FAMILIES.get(json.load(f).get("model_type"))
        coord_system = family.coord_system if family else None
    return Resizer(factor=int(pre.get("patch_size", 14)) * int(pre.get("merge_size", 2)),
                   min_pixels=int(pre.get("min_pixels") or size.get("shortest_edge") or 56 * 56),
                   max_pixels=int(pre.get("max_pixels") or size.get("longest_edge") or 28 * 28 * 1280),
                   coord_system=coord_system)


def video_processor_size(model_dir: str) -> dict:
    """The folder's video processor's ``size`` (``shortest_edge``, ``longest_edge``: Qwen3-VL's pixels of a whole
    clip), from ``video_preprocessor_config.json``; without one, paddleformers builds the video processor from
    ``preprocessor_config.json``, and so does this."""
    for name in ("video_preprocessor_config.json", "preprocessor_config.json"):
        path = os.path.join(model_dir, name)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                pre = json.load(f)
            size = pre.get("size") or {}
            return {"shortest_edge": int(size.get("shortest_edge") or pre["min_pixels"]),
                    "longest_edge": int(size.get("longest_edge") or pre["max_pixels"])}
    raise FileNotFoundError(f"{model_dir} has no video_preprocessor_config.json or preprocessor_config.json")
