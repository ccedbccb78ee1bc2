"""Reading raw records, each with the place it came from ("file:line"), from json, jsonl, csv and
folders saved by the ``datasets`` library. A line that cannot be parsed, or holds bytes that are not UTF-8,
becomes a ``BadRecord``: the loader decides whether to skip and count it or to stop. Files are decoded with
``surrogateescape`` so that one bad byte costs its own line, not the whole file."""
from __future__ import annotations

import csv
import json
import os
import re
from dataclasses import dataclass
from typing import Iterator, Union


_UNDECODABLE = re.compile("[\udc80-\udcff]")  # where surrogateescape kept a byte that is not UTF-8
NOT_UTF8 = "not valid UTF-8 text"


@dataclass
class Record:
    where: str  # "file:line" or "file[index]"
    value: dict


@dataclass
class BadRecord:
    where: str
    reason: str


def is_saved_dataset(path: str) -> bool:
    """A folder written by ``datasets``' ``save_to_disk`` (a Dataset or a DatasetDict)."""
    return os.path.isdir(path) and any(
        os.path.isfile(os.path.join(path, name)) for name in ("dataset_info.json", "state.json", "dataset_dict.json"))


def read_records(path: str) -> Iterator[Union[Record, BadRecord]]:
    if not os.path.exists(path):
        raise FileNotFoundError(f"dataset not found: {path}")
    if os.path.isdir(path):
        if not is_saved_dataset(path):
            raise FileNotFoundError(f"{path} is a folder but not one saved by datasets.save_to_disk")
        yield from _read_saved_dataset(path)
    elif path.endswith(".csv"):
        yield from _read_csv(path)
    else:
        yield from _read_json(path)


def _open_text(path: str, **options):
    return open(path, encoding="utf-8", errors="surrogateescape", **options)


def _read_json(path: str):
    with _open_text(path) as f:
        text = f.read()
    if text.lstrip().startswith("["):
        try:
            records = json.loads(text)
        except json.JSONDecodeError as e:
            # a broken json array loses the whole file: say where, and stop reading it
            yield BadRecord(f"{path}:{e.lineno}", f"malformed json: {e.msg}")
            return
        for i, value in enumerate(records):
            yield _checked(f"{path}[{i}]", value)
        return
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if _UNDECODABLE.search(line):
            yield BadRecord(f"{path}:{lineno}", NOT_UTF8)
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as e:
            yield BadRecord(f"{path}:{lineno}", f"malformed json line: {e.msg}")
            continue
        yield _checked(f"{path}:{lineno}", value)


def _read_csv(path: str):
    with _open_text(path, newline="") as f:
        reader = csv.DictReader(f)
        for row in reader:
            value = {k: v for k, v in row.items() if k is not None}
            yield _checked(f"{path}:{reader.line_num}", value)  # the row's last line (a quoted cell may span lines)


def _read_saved_dataset(path: str):
    from datasets import DatasetDict, load_from_disk

    data = load_from_disk(path)
    if isinstance(data, DatasetDict):
        split = "train" if "train" in data else next(iter(data))
        data = data[split]
    for i, row in enumerate(data):
        yield Record(f"{path}[{i}]", dict(row))


def _checked(where: str, value):
    if not isinstance(value, dict):
        return BadRecord(where, f"expected a json object, got {type(value).__name__}")
    if _UNDECODABLE.search(json.dumps(value, ensure_ascii=False, default=str)):
        return BadRecord(where, NOT_UTF8)
    return Record(where, value)
