"""Reading answers out of model text. Every function returns None on text it cannot read."""
from __future__ import annotations

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
