"""Datasets, adapted to one sample schema:
``{"images": [path, ...], "problem": str, "solution": any, "reward_method": str | None, ...extra}``."""
from .loader import DataReport, load_samples  # noqa: F401
from .samples import DataError, validate_sample  # noqa: F401
