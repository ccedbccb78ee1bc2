"""Reading raw records, each with the place it came from ("file:line"), from json, jsonl, csv, xlsx, parquet and
arrow files, folders saved by the ``datasets`` library and folders as ``huggingface-cli download --local-dir`` leaves
them (README.md plus ``data/train-00000-of-00002.parquet``, ...). A line that cannot be parsed, or holds bytes that are
not UTF-8, becomes a ``BadRecord``: the loader decides whether to skip and count it or to stop. Files are decoded with
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
TABLE_EXTENSIONS = (".parquet", ".arrow")  # read by the ``datasets`` library
SPREADSHEET_EXTENSIONS = (".xlsx", ".xlsm")  # read by pandas with openpyxl


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
        yield from _read_folder(path)
    elif path.endswith(".csv"):
        yield from _read_csv(path)
    elif path.endswith(SPREADSHEET_EXTENSIONS):
        yield from _read_xlsx(path)
    elif path.endswith(TABLE_EXTENSIONS):
        yield from _read_table_file(path)
    else:
        yield from _read_json(path)


def _open_text(path: str, **options):
    """A data file as text: UTF-8, a byte-order mark at its start dropped (Windows editors and Excel's "CSV UTF-8"
    write one; ``json`` refuses it and ``csv`` would fold it into the first column's name), and bytes that are not
    UTF-8 kept as surrogates, for the line that holds them to be named (``NOT_UTF8``)."""
    return open(path, encoding="utf-8-sig", errors="surrogateescape", **options)


def holds_json_rows(path: str) -> bool:
    """Whether the json file at ``path`` holds rows as ``_read_json`` reads them (an array, or one object a line)
    rather than one object (a config)."""
    with _open_text(path) as f:
        text = f.read().lstrip()
    if text.startswith("["):
        return True
    try:
        _, end = json.JSONDecoder().raw_decode(text)  # the first value alone: a second one makes it json lines
    except json.JSONDecodeError:
        return False
    return bool(text[end:].strip())


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


def _read_folder(path: str):
    if is_saved_dataset(path):
        yield from _read_saved_dataset(path)
        return
    for data_file in hub_data_files(path):
        yield from _read_table_file(data_file)


def hub_data_files(folder: str) -> list[str]:
    """The train split's parquet / arrow files of a downloaded hub dataset folder (else its first split), found by
    the file-name rules ``datasets.load_dataset`` itself applies, so that a folder loads here as it does there."""
    from datasets.data_files import DataFilesDict, EmptyDatasetError, get_data_patterns
    from datasets.exceptions import DataFilesNotFoundError

    try:
        splits = DataFilesDict.from_patterns(get_data_patterns(folder), base_path=folder)
    except (EmptyDatasetError, DataFilesNotFoundError, FileNotFoundError):
        splits = {}
    split = "train" if "train" in splits else next(iter(splits), None)
    files = [f for f in splits[split] if f.endswith(TABLE_EXTENSIONS)] if split else []
    if not files:
        raise FileNotFoundError(f"{folder} is a folder with no parquet or arrow data files (a hub download has "
                                "data/train-*.parquet) and is not one saved by datasets.save_to_disk")
    return sorted(files)


def _read_table_file(path: str):
    """One parquet or arrow file, row by row as "file[index]"."""
    from datasets import Dataset, load_dataset

    if path.endswith(".parquet"):
        data = load_dataset("parquet", data_files=path, split="train")
    else:
        data = Dataset.from_file(path)
    yield from _dataset_rows(path, data)


def _read_saved_dataset(path: str):
    from datasets import DatasetDict, load_from_disk

    data = load_from_disk(path)
    if isinstance(data, DatasetDict):
        split = "train" if "train" in data else next(iter(data))
        data = data[split]
    yield from _dataset_rows(path, data)


def _dataset_rows(path: str, data):
    """Rows with their image columns left as stored bytes: each image is written to the cache as it is (no decode
    and re-encode), and a corrupt one becomes a bad sample at the image check instead of stopping the read."""
    from datasets import Image as ImageFeature

    for name, feature in data.features.items():
        if isinstance(feature, ImageFeature):
            data = data.cast_column(name, ImageFeature(decode=False))
    for i, row in enumerate(data):
        yield Record(f"{path}[{i}]", dict(row))


def _read_xlsx(path: str):
    """Every sheet of a workbook, each row read like a csv row (cells as text, empty cells as "") and named
    "file:sheet:row" with the row number Excel shows; a row with no value at all is skipped like a blank csv line."""
    import pandas

    sheets = pandas.read_excel(path, sheet_name=None, dtype=str, keep_default_na=False)
    for sheet, frame in sheets.items():
        for offset, row in enumerate(frame.to_dict("records")):
            if any(str(v).strip() for v in row.values()):
                yield _checked(f"{path}:{sheet}:{offset + 2}", row)  # row 1 holds the header


def _checked(where: str, value):
    if not isinstance(value, dict):
        return BadRecord(where, f"expected a json object, got {type(value).__name__}")
    if _UNDECODABLE.search(json.dumps(value, ensure_ascii=False, default=str)):
        return BadRecord(where, NOT_UTF8)
    return Record(where, value)


def write_jsonl(out_dir: str, name: str, rows: list[dict]) -> str:
    """``rows`` as ``out_dir/name``, one JSON object a line (UTF-8, characters as they are); returns the path."""
    path = os.path.join(out_dir, name)
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path
