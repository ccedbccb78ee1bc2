"""The sample schema and the REC json/jsonl reader (PaddleMIX / VLM-R1 ``rec_jsons_processed``)."""
from __future__ import annotations

import json
import os
from typing import Optional


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


def _read_records(path: str) -> list[tuple[str, dict]]:
    """(file:line, record) pairs from a json list or a jsonl file."""
    if not os.path.isfile(path):
        raise DataError(f"dataset file not found: {path}")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if text.lstrip().startswith("["):
        try:
            records = json.loads(text)
        except json.JSONDecodeError as e:
            raise DataError(f"{path}:{e.lineno}: malformed json: {e.msg}") from e
        return [(f"{path}[{i}]", r) for i, r in enumerate(records)]
    pairs = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            pairs.append((f"{path}:{lineno}", json.loads(line)))
        except json.JSONDecodeError as e:
            raise DataError(f"{path}:{lineno}: malformed json line: {e.msg}") from e
    return pairs


def load_rec_file(path: str, image_root: Optional[str] = None) -> list[dict]:
    """REC records ``{image, problem, solution: [x1, y1, x2, y2], ...}`` as samples; extra keys travel along."""
    samples = []
    for where, record in _read_records(path):
        if not isinstance(record, dict):
            raise DataError(f"{where}: expected an object, got {type(record).__name__}")
        record = dict(record)
        image = record.pop("image", None)
        if image is not None:
            images = image if isinstance(image, list) else [image]
            record["images"] = [os.path.join(image_root, p) if image_root else p for p in images]
        sample = validate_sample(record, where)
        box = sample["solution"]
        if not (isinstance(box, list) and len(box) == 4 and all(isinstance(v, (int, float)) for v in box)):
            raise DataError(f"{where}: REC 'solution' must be [x1, y1, x2, y2], got {box!r}")
        samples.append(sample)
    if not samples:
        raise DataError(f"{path}: the dataset is empty")
    return samples
