"""Each image the report shows, resized once into the report's folder.

A thumbnail is named by a hash of the image's path, size on disk and modification time, so re-rendering a
report (another ``--steps``) reuses the thumbnails already written and a changed image gets a new one."""
from __future__ import annotations

import hashlib
import os
from typing import Optional

from PIL import Image

from ..data.images import as_rgb

MAX_SIDE = 448  # pixels: the longer side of a thumbnail


def thumbnail(path: str, folder: str) -> Optional[tuple[str, tuple[int, int]]]:
    """(file name inside ``folder``, the original (w, h) after EXIF rotation), or None for an unreadable image."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    key = hashlib.sha1(f"{os.path.abspath(path)}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    name = key + ".jpg"
    target = os.path.join(folder, name)
    size_file = target + ".size"
    if os.path.isfile(target) and os.path.isfile(size_file):
        with open(size_file, encoding="utf-8") as f:
            width, height = (int(v) for v in f.read().split())
        return name, (width, height)
    try:
        with Image.open(path) as img:
            img = as_rgb(img)
    except (OSError, Image.DecompressionBombError):
        return None
    size = img.size
    img.thumbnail((MAX_SIDE, MAX_SIDE))
    os.makedirs(folder, exist_ok=True)
    img.save(target, quality=88)
    with open(size_file, "w", encoding="utf-8") as f:
        f.write(f"{size[0]} {size[1]}")
    return name, size
