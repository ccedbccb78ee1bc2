"""The sample schema every dataset format is adapted to:

    {"images": [path, ...], "videos": [path | [frame path, ...], ...], "problem": str, "solution": any,
     "reward_method": str | None, ...}

``videos`` (clips, folders of frames, GIF/WebP animations, lists of frame files: ``video.py``) is optional: a sample
without the key has none (image-only samples stay as they were). ``video_sampling`` (optional, one dict per clip) holds
each clip's own sampling keys (``video.part_options``), read over the job's. ``system_prompt`` (optional text) is the
sample's own system turn (a verl prompt's), in place of the config's. ``answer_instruction`` (optional text) follows
the templated problem in the prompt: Video-R1's rows carry the answer form of their problem type in it."""
from __future__ import annotations


SOURCE_KEY = "_source"  # every loaded sample's origin, "file:line" (or "file[index]"), for messages about it


class DataError(ValueError):
    """Bad data; the message names the file (and line) at fault."""


def validate_sample(sample: dict, where: str) -> dict:
    """Check the schema's required fields; ``where`` (file:line) is named in the error."""
    images, videos = sample.get("images"), sample.get("videos", [])
    if not isinstance(images, list) or not all(isinstance(p, str) for p in images):
        raise DataError(f"{where}: 'images' must be a list of paths, got {images!r}")
    if not isinstance(videos, list) or not all(isinstance(p, str) or _frame_list(p) for p in videos):
        raise DataError(f"{where}: 'videos' must be a list of paths (or of lists of frame paths), got {videos!r}")
    options = sample.get("video_sampling", [{}] * len(videos))
    if not isinstance(options, list) or len(options) != len(videos) or not all(isinstance(o, dict) for o in options):
        raise DataError(f"{where}: 'video_sampling' must be one dict per video, got {options!r}")
    if not isinstance(sample.get("system_prompt", ""), str):
        raise DataError(f"{where}: 'system_prompt' must be text, got {sample['system_prompt']!r}")
    if not isinstance(sample.get("problem"), str) or not sample["problem"].strip():
        raise DataError(f"{where}: empty or missing 'problem'")
    if "solution" not in sample:
        raise DataError(f"{where}: missing 'solution'")
    if not isinstance(sample.get("answer_instruction", ""), str):
        raise DataError(f"{where}: 'answer_instruction' must be text, got {sample['answer_instruction']!r}")
    sample.setdefault("reward_method", None)
    return sample


def _frame_list(value) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(p, str) for p in value)
