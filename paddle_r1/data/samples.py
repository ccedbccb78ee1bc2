"""The sample schema every dataset format is adapted to:

    {"images": [path, ...], "videos": [path, ...], "problem": str, "solution": any, "reward_method": str | None, ...}

``videos`` (clips, folders of frames, GIF/WebP animations: ``video.py``) is optional: a sample without the key has
none (image-only samples stay as they were). ``answer_instruction`` (optional text) follows the templated problem in
the prompt: Video-R1's rows carry the answer form of their problem type in it."""
from __future__ import annotations


SOURCE_KEY = "_source"  # every loaded sample's origin, "file:line" (or "file[index]"), for messages about it


class DataError(ValueError):
    """Bad data; the message names the file (and line) at fault."""


def validate_sample(sample: dict, where: str) -> dict:
    """Check the schema's required fields; ``where`` (file:line) is named in the error."""
    for name in ("images", "videos"):
        paths = sample.get(name, [] if name == "videos" else None)
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            raise DataError(f"{where}: {name!r} must be a list of paths, got {paths!r}")
    if not isinstance(sample.get("problem"), str) or not sample["problem"].strip():
        raise DataError(f"{where}: empty or missing 'problem'")
    if "solution" not in sample:
        raise DataError(f"{where}: missing 'solution'")
    if not isinstance(sample.get("answer_instruction", ""), str):
        raise DataError(f"{where}: 'answer_instruction' must be text, got {sample['answer_instruction']!r}")
    sample.setdefault("reward_method", None)
    return sample
