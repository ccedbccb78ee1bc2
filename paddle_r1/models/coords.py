"""The one place that converts boxes between a model's coordinate system and image pixels.

Solutions are always in original-image pixels. Models answer in their own system:

- ``abs_resized``: Qwen2.5-VL, absolute pixels of the *resized* input the processor built
  (sides multiples of 28, ``smart_resize``).
- ``rel_1000``: Qwen2-VL and Qwen3-VL, 0-1000 relative units (and PaddleOCR-VL, whose tasks answer without boxes).
- ``abs_original``: pixels of the original image (for users whose data and model already agree).

Each family's own is ``ModelFamily.coord_system`` (``families.py``).
"""
from __future__ import annotations

import math
import numbers
from typing import Optional

COORD_SYSTEMS = ("abs_resized", "rel_1000", "abs_original")


def _scales(coord_system: str, image_size, input_size) -> tuple[float, float]:
    """Factors (sx, sy) such that original_x = model_x * sx."""
    width, height = image_size
    if coord_system == "abs_original":
        return 1.0, 1.0
    if coord_system == "abs_resized":
        in_w, in_h = input_size
        return width / in_w, height / in_h
    if coord_system == "rel_1000":
        return width / 1000.0, height / 1000.0
    raise ValueError(f"unknown coord_system {coord_system!r}; expected one of {COORD_SYSTEMS}")


def box_to_original(box, coord_system: str, image_size, input_size=None) -> list[float]:
    """Map a model-space box [x1, y1, x2, y2] to original-image pixels."""
    sx, sy = _scales(coord_system, image_size, input_size)
    x1, y1, x2, y2 = box
    return [x1 * sx, y1 * sy, x2 * sx, y2 * sy]


def box_from_original(box, coord_system: str, image_size, input_size=None) -> list[float]:
    """Map an original-pixel box to the model's system (for prompts and SFT targets)."""
    sx, sy = _scales(coord_system, image_size, input_size)
    x1, y1, x2, y2 = box
    return [x1 / sx, y1 / sy, x2 / sx, y2 / sy]


# ---- what a box is: the one check, for data, rewards and SFT targets --------------------------------------

def is_number(value) -> bool:
    """A JSON number: a real number that is not a bool (strings such as "12" are not numbers)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def as_floats(values) -> Optional[list[float]]:
    """A list of JSON numbers as finite floats, or None (non-numbers, NaN, infinities, integers too large)."""
    if not isinstance(values, (list, tuple)) or not all(is_number(v) for v in values):
        return None
    try:
        floats = [float(v) for v in values]
    except OverflowError:
        return None
    return floats if all(math.isfinite(v) for v in floats) else None


def as_box(value) -> Optional[list[float]]:
    """A JSON value read as [x1, y1, x2, y2]: four finite numbers (not bools, not strings) with x1 <= x2 and
    y1 <= y2; else None."""
    box = as_floats(value)
    if box is not None and len(box) == 4 and box[0] <= box[2] and box[1] <= box[3]:
        return box
    return None
