"""Opening images: RGB, EXIF orientation applied, a clear error naming the file."""
from __future__ import annotations

from PIL import Image, ImageOps, UnidentifiedImageError

from .samples import DataError


def load_image(path: str) -> Image.Image:
    try:
        with Image.open(path) as img:
            return ImageOps.exif_transpose(img).convert("RGB")
    except FileNotFoundError as e:
        raise DataError(f"image not found: {path}") from e
    except (UnidentifiedImageError, OSError) as e:
        raise DataError(f"cannot read image {path}: {e}") from e
