"""Datasets, adapted to one sample schema:
``{"images": [path, ...], "problem": str, "solution": any, "reward_method": str | None, ...extra}``."""
from .samples import DataError, load_rec_file, validate_sample  # noqa: F401
