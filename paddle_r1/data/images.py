"""Opening images: RGB, EXIF orientation applied, high-bit-depth and float images scaled to 8 bits, a clear error
naming the file.

Pillow refuses to open an image with more pixels than ``Image.MAX_IMAGE_PIXELS`` (its decompression-bomb
guard); config key ``max_image_pixels`` sets that limit for the process, and an image above it is a bad image
like an unreadable one.

Pillow's ``convert("RGB")`` clips one-channel 16-bit, 32-bit and float images to 0..255: a 16-bit scan comes out
almost white and a float image in 0..1 black. ``as_rgb`` first maps them to 8 bits by the range their values are
written in, keeping their contrast:

- 16-bit integers (modes ``I;16``, ``I;16L``, ``I;16B``, ``I;16N``): 0..65535, the type's own range, as a scanner
  or camera writes them (a dim scan stays dim).
- 32-bit integers (``I``): 0..255 when every value fits (8-bit data stored wide: what Pillow already shows right),
  else 0..65535 when every value fits (16-bit data), else the image's own min..max.
- floats (``F``): 0..1 when every finite value fits (the usual float image), else 0..255, else 0..65535, else the
  image's own min..max; NaN and infinities become 0.

A constant image whose value lies outside those ranges has no contrast to keep and becomes black (no division by a
zero range). Everything else (RGB, CMYK, palette, grey with alpha, the first frame of an animation) is Pillow's
``convert("RGB")`` as before.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from .samples import DataError

_SIXTEEN_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N")
_RANGES = {"I": (255, 65535), "F": (1.0, 255, 65535)}  # the ranges tried in turn; 16-bit: always 65535


def set_max_image_pixels(limit: Optional[int]) -> None:
    """Pillow's limit for this process (None: keep Pillow's default of about 89 million pixels)."""
    if limit is not None:
        Image.MAX_IMAGE_PIXELS = limit


def _value_range(values: np.ndarray, mode: str) -> tuple[float, float]:
    """(low, high) the values are written in: see the module's docstring."""
    if mode in _SIXTEEN_BIT_MODES:
        return 0.0, 65535.0
    finite = values[np.isfinite(values)]
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)
    for top in _RANGES[mode]:
        if low >= 0 and high <= top:
            return 0.0, float(top)
    return low, high


def _to_8_bit(img: Image.Image) -> Image.Image:
    """A one-channel high-bit-depth or float image as 8-bit grey ("L"), scaled by its value range."""
    values = np.asarray(img).astype(np.float64)
    low, high = _value_range(values, img.mode)
    scaled = (values - low) * (255.0 / (high - low)) if high > low else np.zeros_like(values)
    return Image.fromarray(np.nan_to_num(scaled, nan=0.0, posinf=0.0, neginf=0.0).round().clip(0, 255)
                           .astype(np.uint8))  # uint8: mode "L"


def as_rgb(img: Image.Image) -> Image.Image:
    """``img`` upright (EXIF orientation) and in RGB, high-bit-depth and float images scaled to 8 bits first."""
    img = ImageOps.exif_transpose(img)
    if img.mode in _SIXTEEN_BIT_MODES or img.mode in _RANGES:
        img = _to_8_bit(img)
    return img.convert("RGB")


def load_image(path: str) -> Image.Image:
    try:
        with Image.open(path) as img:
            return as_rgb(img)
    except FileNotFoundError as e:
        raise DataError(f"image not found: {path}") from e
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as e:
        raise DataError(f"cannot read image {path}: {e}") from e
