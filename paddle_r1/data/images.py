"""Opening images: RGB, EXIF orientation applied, a clear error naming the file.

Pillow refuses to open an image with more pixels than ``Image.MAX_IMAGE_PIXELS`` (its decompression-bomb
guard); config key ``max_image_pixels`` sets that limit for the process, and an image above it is a bad image
like an unreadable one."""
from __future__ import annotations

from typing import Optional

from PIL import Image, ImageOps, UnidentifiedImageError

from .samples import DataError


def set_max_image_pixels(limit: Optional[int]) -> None:
    """Pillow's limit for this process (None: keep Pillow's default of about 89 million pixels)."""
    if limit is not None:
        Image.MAX_IMAGE_PIXELS = limit


def load_image(path: str) -> Image.Image:
    try:
        with Image.open(path) as img:
            return ImageOps.exif_transpose(img).convert("RGB")
    except FileNotFoundError as e:
        raise DataError(f"image not found: {path}") from e
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as e:
        raise DataError(f"cannot read image {path}: {e}") from e
