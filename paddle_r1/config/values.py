"""A config's values against its keys' declarations: each value as its type asks (``typed_value``: an int for a
float key is a float, one string for a list key a one-item list), each number in its range (``Bounds``). An error
names the key and the value."""
from __future__ import annotations

import math
import typing
from dataclasses import dataclass
from typing import Any, Union

from ..errors import ConfigError

_TYPE_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string", list: "a list",
               dict: "a mapping"}


def split_optional(annotation) -> tuple[Any, bool]:
    """``Optional[X]`` -> (X, True); any other annotation -> (itself, False)."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is Union and type(None) in args:
        return next(a for a in args if a is not type(None)), True
    return annotation, False


def alternatives(annotation) -> tuple:
    """The types a value of a ``Union[X, Y]`` key (not Optional) may take, in order; any other: (itself,)."""
    return typing.get_args(annotation) if typing.get_origin(annotation) is Union else (annotation,)


def type_words(annotation) -> str:
    """How an error names a type to a user who writes yaml: 'a number (float)', 'an integer (int) or null',
    'true or false (bool) or a string (str)'."""
    inner, optional = split_optional(annotation)
    if len(alternatives(inner)) > 1:
        words = " or ".join(type_words(member) for member in alternatives(inner))
        return f"{words} or null" if optional else words
    origin = typing.get_origin(inner) or inner
    words = f"{_TYPE_WORDS[origin]} ({getattr(inner, '__name__', inner)})"
    return f"{words} or null" if optional else words


def one_or_many(value):
    """One string where a list is expected is a list of that one string, not of its letters."""
    return [value] if isinstance(value, str) else value


def typed_value(value, annotation, where: str, key: str):
    """``value`` as a key declared ``annotation`` holds it (an int for a float key becomes a float, one string for a
    list key a one-element list), or a ConfigError naming ``where`` (the key, or an item of it), the value and the
    type: a wrong type caught here is a message before anything loads instead of a TypeError in the middle of a run.
    """
    inner, optional = split_optional(annotation)
    if value is None and optional:
        return None
    if len(alternatives(inner)) > 1:  # the first type that takes the value (true/false or a word: bool, then str)
        for member in alternatives(inner):
            try:
                return typed_value(value, member, where, key)
            except ConfigError:
                pass
        raise ConfigError(f"config key {where!r} expects {type_words(annotation)}, got {value!r}", keys=(key,))
    origin, args = typing.get_origin(inner) or inner, typing.get_args(inner)
    if origin is list and isinstance(one_or_many(value), list):
        items = one_or_many(value)
        return [typed_value(item, args[0], f"{where}[{i}]", key) for i, item in enumerate(items)] if args else items
    if origin is dict and isinstance(value, dict):  # a bare ``dict`` (a reward's settings) holds any values
        return {name: typed_value(item, args[1], f"{where}.{name}", key) for name, item in value.items()} \
            if args else value
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    if origin is float and numeric:
        return float(value)
    if origin is int and numeric and isinstance(value, int):
        return value
    if origin in (bool, str) and isinstance(value, origin):
        return value
    raise ConfigError(f"config key {where!r} expects {type_words(annotation)}, got {value!r}", keys=(key,))


def apply_types(config) -> None:
    """Every key of ``config`` checked (and normalised) against its declared type."""
    for key, annotation in typing.get_type_hints(type(config)).items():
        setattr(config, key, typed_value(getattr(config, key), annotation, key, key))



@dataclass(frozen=True)
class Bounds:
    """The values a numeric key may take: finite, and between ``low`` and ``high`` (each end included unless
    ``*_open``); ``why`` is added to the error when the bound is not obvious."""

    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False
    why: str = ""

    def admits(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def __str__(self) -> str:
        def number(x: float) -> str:
            return str(int(x)) if float(x).is_integer() else f"{x:g}"

        if math.isinf(self.low) and math.isinf(self.high):
            return "finite"
        if math.isinf(self.high):
            return f"{'>' if self.low_open else '>='} {number(self.low)}"
        return f"in {'(' if self.low_open else '['}{number(self.low)}, {number(self.high)}" \
               f"{')' if self.high_open else ']'}"


def at_least(low: float, why: str = "") -> Bounds:
    return Bounds(low=low, why=why)


def above(low: float, why: str = "") -> Bounds:
    return Bounds(low=low, low_open=True, why=why)


def option_type(kind: type, bounds: Bounds):
    """An argparse ``type`` for a command's own numeric option (not a config key): ``kind`` (int or float) within
    ``bounds``, else argparse's one-line error naming the option ("argument --batch_size: must be >= 1, got 0")."""
    import argparse

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expects {_TYPE_WORDS[kind]}, got {text!r}") from None
        if not bounds.admits(value):
            raise argparse.ArgumentTypeError(f"must be {bounds}, got {text}")
        return value
    parse.kind, parse.bounds = kind, bounds  # what the option takes, for its tests
    return parse


def check_bounds(config, table: dict) -> None:
    """Every numeric key of ``config`` that is set against its ``Bounds`` in ``table`` (after the types are
    checked); a list key's items each."""
    for key, bounds in table.items():
        value = getattr(config, key, None)
        items = [(f"{key}[{i}]", v) for i, v in enumerate(value)] if isinstance(value, list) else [(key, value)]
        for where, item in items:
            if item is not None and not bounds.admits(item):
                finite = "" if math.isfinite(item) or str(bounds) == "finite" else "finite and "
                why = f" ({bounds.why})" if bounds.why else ""
                raise ConfigError(f"config key {where!r}: must be {finite}{bounds}, got {item}{why}", keys=(key,))
