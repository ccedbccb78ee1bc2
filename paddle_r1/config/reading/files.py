"""Config files as users write them: yaml (``1e-5`` read as a float) or json, a key given twice in one mapping an
error naming both places (both parsers would keep the last silently)."""
from __future__ import annotations

import json
import os
import re

import yaml

from ...errors import ConfigError


class DuplicateKey(ValueError):
    """A mapping that gives one key twice; ``first`` and ``second`` say where ("line 3")."""

    def __init__(self, key, first: str, second: str):
        super().__init__(f"key {key!r} is given twice, on {first} and {second}")


def _positions(first: tuple[int, int], second: tuple[int, int]) -> tuple[str, str]:
    """Two (line, column) places (1-based) as a message names them: by line, and by column when on one line."""
    if first[0] != second[0]:
        return f"line {first[0]}", f"line {second[0]}"
    return f"line {first[0]} column {first[1]}", f"column {second[1]}"


class _YamlLoader(yaml.SafeLoader):
    """YAML 1.1 reads ``1e-5`` (no dot) as a string; learning rates are written that way, so read it as a float.
    A key given twice in one mapping is a ``DuplicateKey`` (PyYAML would keep the last silently); a merge (``<<``)
    may still override what it merges."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=deep)
                place = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
                try:
                    first = seen.setdefault(key, place)
                except TypeError:  # an unhashable key: the base class names it
                    continue
                if first != place:
                    raise DuplicateKey(key, *_positions(first, place))
        return super().construct_mapping(node, deep)


EXPONENT_FLOAT = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)[eE][-+]?\d+$")  # 1e-5, 2E+3: floats here, strings in YAML 1.1
_YamlLoader.add_implicit_resolver("tag:yaml.org,2002:float", EXPONENT_FLOAT, list("-+0123456789."))


def load_yaml(text: str):
    return yaml.load(text, Loader=_YamlLoader)


# a JSON string (and the colon that makes it an object's key), or an object's brace
_JSON_KEY_OR_BRACE = re.compile(r'"(?:[^"\\]|\\.)*"(?:\s*:)?|[{}]')


def _duplicate_json_key_lines(text: str) -> tuple[str, tuple[int, int], tuple[int, int]]:
    """(key, its first place, its second) for the first key given twice in one object of valid JSON ``text``:
    ``json.loads`` tells that a key repeats but not where."""
    objects: list[dict] = []
    for match in _JSON_KEY_OR_BRACE.finditer(text):
        token = match.group()
        if token == "{":
            objects.append({})
        elif token == "}":
            objects.pop()
        elif token.endswith(":"):
            key = json.loads(token[:-1])
            line_start = text.rfind("\n", 0, match.start()) + 1
            place = (text.count("\n", 0, match.start()) + 1, match.start() - line_start + 1)
            first = objects[-1].setdefault(key, place)
            if first != place:
                return key, first, place
    raise AssertionError("json.loads found a repeated key that the scan did not")


def _load_json(text: str):
    """``json.loads``, with a key given twice in one object a ``DuplicateKey`` (json keeps the last silently)."""
    repeats = []

    def to_dict(pairs: list) -> dict:
        if len({key for key, _ in pairs}) < len(pairs):
            repeats.append(pairs)
        return dict(pairs)

    values = json.loads(text, object_pairs_hook=to_dict)
    if repeats:
        key, first, second = _duplicate_json_key_lines(text)
        raise DuplicateKey(key, *_positions(first, second))
    return values


# a top-level path key whose unquoted value is followed by " #" and no space: yaml reads the rest as a comment
_PATH_CUT_BY_COMMENT = re.compile(r"^(\w*(?:path|dir|root)):[ \t]+([^'\"\s#][^#\n]*?) #(\S[^\n]*)$", re.M)


def _warn_of_paths_cut_by_comments(text: str, path: str) -> None:
    """``data_path: 我的 数据 #1/rows.jsonl`` reads as "我的 数据": yaml starts a comment at " #". The load that
    follows fails naming the cut path alone; this line says why, before it."""
    for match in _PATH_CUT_BY_COMMENT.finditer(text):
        key, value, rest = match.groups()
        line = text.count("\n", 0, match.start()) + 1
        print(f"{path}:{line}: {key} reads {value!r}: yaml takes ' #{rest}' after it for a comment; quote the value "
              "if that belongs to it")


def read_config_file(path: str) -> dict:
    if not os.path.isfile(path):
        raise ConfigError(f"config file not found: {path}")
    with open(path, encoding="utf-8-sig") as f:  # a byte-order mark at the start dropped (json refuses one)
        text = f.read()
    try:
        values = _load_json(text) if path.endswith(".json") else load_yaml(text)
    except DuplicateKey as e:
        raise ConfigError(f"{path}: {e}") from None
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        raise ConfigError(f"{path}: cannot parse: {e}") from e
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys to values")
    if not path.endswith(".json"):
        _warn_of_paths_cut_by_comments(text, path)
    return values
