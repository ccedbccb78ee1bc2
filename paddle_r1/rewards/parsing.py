"""Reading answers out of model text. Every function returns None on text it cannot read."""
from __future__ import annotations

import ast
import json
import math
import re
from typing import Optional

NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"  # no nested quantifiers: linear time
BOX_RE = re.compile(rf"\[\s*({NUMBER})\s*,\s*({NUMBER})\s*,\s*({NUMBER})\s*,\s*({NUMBER})\s*\]")


def tagged(text: str, tag: str, last: bool = True) -> Optional[str]:
    """The content of the last (or first) ``<tag>...</tag>`` pair, pairs read left to right with each ``<tag>``
    closed by the next ``</tag>`` (as ``re.findall(r"<tag>(.*?)</tag>", text, re.DOTALL)`` reads them); None when
    there is none. ``str.find`` in one pass: the lazy regex rescans the rest of the text from every unclosed
    opening tag, quadratic on "<answer>" * 10_000."""
    opening, closing = f"<{tag}>", f"</{tag}>"
    found, position = None, 0
    while True:
        start = text.find(opening, position)
        end = text.find(closing, start + len(opening)) if start >= 0 else -1
        if end < 0:
            return found
        found, position = text[start + len(opening):end], end + len(closing)
        if not last:
            return found


def answer_text(completion: str) -> str:
    """The content of the last ``<answer>...</answer>``, or the whole text when there is none."""
    found = tagged(completion, "answer")
    return completion if found is None else found


def parse_box(text: str) -> Optional[list[float]]:
    """The first [x1, y1, x2, y2] of finite numbers (ints or floats) with x1 <= x2 and y1 <= y2."""
    for match in BOX_RE.finditer(text):
        box = [float(v) for v in match.groups()]
        if all(math.isfinite(v) for v in box) and box[0] <= box[2] and box[1] <= box[3]:
            return box
    return None


def parse_number(text: str) -> Optional[float]:
    """The first finite number in ``text`` ("12", "-3.5", "1e3"), or None."""
    for match in re.finditer(NUMBER, text):
        try:
            value = float(match.group(0))
        except ValueError:
            continue
        if math.isfinite(value):
            return value
    return None


MAX_LITERAL_CHARS = 20_000  # a Python literal longer than this is not read (ast parsing cost and memory)
BRACKET_RE = re.compile(r"[\[\]{}]")


def bracket_ends(text: str) -> dict[int, int]:
    """For each ``{`` / ``[`` of ``text`` that a bracket closes, the index after that closing bracket: one pass with
    a stack, quotes not considered (a span that is not a literal simply fails to parse)."""
    ends, stack = {}, []
    for match in BRACKET_RE.finditer(text):
        if match.group() in "[{":
            stack.append(match.start())
        elif stack:
            ends[stack.pop()] = match.end()
    return ends


def read_literal(text: str, start: int, ends: dict[int, int]):
    """The Python literal (``ast.literal_eval``: numbers, strings, lists, tuples, dicts, sets; nothing is run) that
    spans from ``start`` to its closing bracket, at most MAX_LITERAL_CHARS long; None when it is not one."""
    end = ends.get(start)
    if end is None or end - start > MAX_LITERAL_CHARS:
        return None
    try:
        return ast.literal_eval(text[start:end])
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):  # ValueError: ints over 4300 digits
        return None


def extract_json(text: str, max_starts: int = 64, literals: bool = False):
    """The first JSON object or array that parses inside ``text`` (fenced ```json blocks included), or None.

    Tries each ``{`` / ``[`` as a start with ``json.JSONDecoder.raw_decode``, so prose around the JSON
    and trailing text are fine; at most ``max_starts`` starts, so adversarial text stays cheap. ``literals``: a
    start where JSON fails is also read as a Python literal (``{0: [[1, 2, 3, 4]]}``, single quotes, tuples), as
    EasyDistill writes them, by ``read_literal``.
    """
    decoder = json.JSONDecoder()
    starts = (i for i, char in enumerate(text) if char in "{[")
    ends = None
    for _, start in zip(range(max_starts), starts):
        try:
            return decoder.raw_decode(text, start)[0]
        except (ValueError, RecursionError):  # JSONDecodeError, and ints over Python's 4300-digit limit
            pass
        if literals:
            ends = bracket_ends(text) if ends is None else ends
            value = read_literal(text, start, ends)
            if isinstance(value, (dict, list)):
                return value
    return None


def normalize_answer(text: str) -> str:
    """``text`` compared loosely: lower case, runs of whitespace as one space, and surrounding spaces,
    quotes and sentence punctuation (``.,;:!?"'`` and backquotes) removed. "  The Cat. " -> "the cat"."""
    return " ".join(str(text).lower().split()).strip(" .,;:!?\"'`")


def exact_match(answer: str, references: list[str]) -> float:
    """1.0 if the normalized answer equals a normalized reference, else 0.0."""
    target = normalize_answer(answer)
    return float(any(target == normalize_answer(ref) for ref in references))


def reference_texts(solution) -> list[str]:
    """A sample's reference answers as stripped strings: a string (its ``<answer>`` content when tagged) or a
    list / tuple of them; numbers and other values via ``str``; None and blank entries dropped."""
    items = solution if isinstance(solution, (list, tuple)) else [solution]
    texts = (answer_text(item if isinstance(item, str) else str(item)).strip() for item in items if item is not None)
    return [text for text in texts if text]


def answer_content(completion: str) -> Optional[str]:
    """``answer_text(completion)``, or None when that text still holds an ``<answer>`` / ``</answer>`` tag
    (nested or unbalanced tags: "<answer><answer>[1,2,3,4]</answer></answer>" is malformed, not a box), or when
    ``completion`` is not a string."""
    if not isinstance(completion, str):
        return None
    text = answer_text(completion)
    return None if "<answer>" in text or "</answer>" in text else text


def answer_json(completion: str, literals: bool = False):
    """The first JSON object or array in the answer (``answer_content`` + ``extract_json``; ``literals``: Python
    literals too), or None.

    Never raises: ``json`` raises ValueError (not JSONDecodeError) on integers longer than 4300 digits."""
    text = answer_content(completion)
    if text is None:
        return None
    try:
        return extract_json(text, literals=literals)
    except ValueError:
        return None


def parse_numbers(text: str, limit: int = 64) -> list[float]:
    """The finite numbers in ``text`` in order ("12x8x15cm" -> [12.0, 8.0, 15.0]), at most ``limit``;
    overflowing ones ("1e400") are skipped."""
    values = []
    for match in re.finditer(NUMBER, text):
        value = float(match.group(0))
        if math.isfinite(value):
            values.append(value)
            if len(values) >= limit:
                break
    return values
