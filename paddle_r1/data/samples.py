"""The sample schema every dataset format is adapted to."""
from __future__ import annotations


SOURCE_KEY = "_source"  # every loaded sample's origin, "file:line" (or "file[index]"), for messages about it


class DataError(ValueError):
    """Bad data; the message names the file (and line) at fault."""


def validate_sample(sample: dict, where: str) -> dict:
    """Check the schema's required fields; ``where`` (file:line) is named in the error."""
    images = sample.get("images")
    if not isinstance(images, list) or not all(isinstance(p, str) for p in images):
        raise DataError(f"{where}: 'images' must be a list of paths, got {images!r}")
    if not isinstance(sample.get("problem"), str) or not sample["problem"].strip():
        raise DataError(f"{where}: empty or missing 'problem'")
    if "solution" not in sample:
        raise DataError(f"{where}: missing 'solution'")
    sample.setdefault("reward_method", None)
    return sample
