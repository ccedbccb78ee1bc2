"""Reading answers out of model text. Every function returns None on text it cannot read."""
from __future__ import annotations

import json
import math
import re
from typing import Optional

ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
BOX_RE = re.compile(rf"\[\s*({NUMBER})\s*,\s*({NUMBER})\s*,\s*({NUMBER})\s*,\s*({NUMBER})\s*\]")


def answer_text(completion: str) -> str:
    """The content of the last ``<answer>...</answer>``, or the whole text when there is none."""
    found = ANSWER_RE.findall(completion)
    return found[-1] if found else completion


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


def extract_json(text: str, max_starts: int = 64):
    """The first JSON object or array that parses inside ``text`` (fenced ```json blocks included), or None.

    Tries each ``{`` / ``[`` as a start with ``json.JSONDecoder.raw_decode``, so prose around the JSON
    and trailing text are fine; at most ``max_starts`` starts, so adversarial text stays cheap.
    """
    decoder = json.JSONDecoder()
    starts = (i for i, char in enumerate(text) if char in "{[")
    for _, start in zip(range(max_starts), starts):
        try:
            return decoder.raw_decode(text, start)[0]
        except (json.JSONDecodeError, RecursionError):
            continue
    return None
