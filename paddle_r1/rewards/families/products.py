"""Product attribute rewards (seed 002): length / width / height from several product images."""
from __future__ import annotations

import math
import numbers
import re
from typing import Optional

from ..registry import BadSolution, register
from ..parsing import answer_content, answer_text, extract_json, parse_number, parse_numbers

# Centimetres per unit; the longest spellings first so that "厘米" is not read as "米".
UNIT_CM = {"mm": 0.1, "cm": 1.0, "dm": 10.0, "m": 100.0, "inches": 2.54, "inch": 2.54,
           "毫米": 0.1, "厘米": 1.0, "公分": 1.0, "分米": 10.0, "英寸": 2.54, "米": 100.0}
UNIT_RE = re.compile(r"(?<![A-Za-z'])(mm|cm|dm|inches|inch|m)(?![A-Za-z])|(毫米|厘米|公分|分米|英寸|米)",
                     re.IGNORECASE)
# JSON keys read as a dimension (lower-cased key starting with one of these, or equal to l / w / h / d).
DIMENSION_KEY_PREFIXES = ("length", "width", "height", "depth", "长", "宽", "高", "深", "厚")
DIMENSION_KEYS = ("l", "w", "h", "d")
UNIT_KEYS = ("unit", "units", "单位")


def find_unit(text: str) -> Optional[str]:
    """The first length unit named in ``text`` (mm, cm, dm, m, inch, 毫米, 厘米, 公分, 分米, 米, 英寸), lower case."""
    match = UNIT_RE.search(text)
    return (match.group(1) or match.group(2)).lower() if match else None


def _dimension_value(value) -> Optional[float]:
    """A JSON value read as a length: a finite real (not a bool) or the first number of a string ("12cm")."""
    if isinstance(value, str):
        return parse_number(value)
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # an integer too large for a float
            return None
        return number if math.isfinite(number) else None
    return None


def _is_dimension_key(key: str) -> bool:
    key = key.strip().lower()
    return key in DIMENSION_KEYS or key.startswith(DIMENSION_KEY_PREFIXES)


def dimensions_from_json(value, depth: int = 0) -> tuple[list[float], Optional[str]]:
    """(lengths, unit) from a JSON object with length / width / height keys (English or Chinese, e.g.
    {"length": 12, "width": "8cm", "height": 15, "unit": "cm"} or {"长": "12厘米", ...}; one nested object
    such as {"size": {...}} is searched too) or a JSON list of lengths ([12, 8, 15])."""
    if isinstance(value, list):
        lengths = [_dimension_value(v) for v in value]
        strings = " ".join(v for v in value if isinstance(v, str))
        return ([v for v in lengths if v is not None], find_unit(strings))
    if not isinstance(value, dict):
        return [], None
    lengths, unit = [], None
    for key, item in value.items():
        key = str(key)
        if key.strip().lower() in UNIT_KEYS and isinstance(item, str):
            unit = unit or find_unit(item)
        elif _is_dimension_key(key):
            number = _dimension_value(item)
            if number is not None:
                lengths.append(number)
                unit = unit or find_unit(key) or (find_unit(item) if isinstance(item, str) else None)
    if not lengths and depth == 0:
        for item in value.values():
            if isinstance(item, dict):
                lengths, unit = dimensions_from_json(item, depth=1)
                if lengths:
                    break
    return lengths, unit


def read_dimensions(text: str) -> tuple[list[float], Optional[str]]:
    """(up to three lengths, unit or None) from JSON in ``text`` (see ``dimensions_from_json``), else the first
    three numbers of the text ("12 8 15", "12x8x15 cm", "长12厘米 宽8厘米 高15厘米")."""
    try:
        found = extract_json(text)
    except ValueError:  # integers longer than 4300 digits
        found = None
    lengths, unit = dimensions_from_json(found) if found is not None else ([], None)
    if not lengths:
        lengths, unit = parse_numbers(text, limit=3), find_unit(text)
    return lengths[:3], unit


def relative_error(pred: float, truth: float) -> float:
    """|p - t| / |t|; for t == 0: 0 if p == 0 else 1."""
    if truth == 0:
        return 0.0 if pred == 0 else 1.0
    return abs(pred - truth) / abs(truth)


def dimension_score(pred: list[float], truth: list[float]) -> float:
    """max(0, 1 - mean relative error) over the first n = min(len) entries of both lists sorted descending."""
    n = min(len(pred), len(truth))
    if n == 0:
        return 0.0
    pairs = zip(sorted(pred, reverse=True)[:n], sorted(truth, reverse=True)[:n])
    return max(0.0, 1.0 - sum(relative_error(p, t) for p, t in pairs) / n)


def truth_dimensions(solution) -> Optional[tuple[list[float], Optional[str]]]:
    """The solution's (lengths, unit): a text as the answer ("12 8 15", the seed's label; JSON; <answer> tags),
    a list of numbers, a dict, or one number. None without a solution; BadSolution when no length is found."""
    if solution is None:
        return None
    if isinstance(solution, str):
        lengths, unit = read_dimensions(answer_text(solution))
    elif isinstance(solution, (list, dict)):
        lengths, unit = dimensions_from_json(solution)
    else:
        number = _dimension_value(solution)
        lengths, unit = ([] if number is None else [number]), None
    if not lengths:
        raise BadSolution(f"solution {solution!r} holds no length / width / height")
    return lengths[:3], unit


@register("dimensions")
def dimensions_reward(completions, solution=None, **_) -> list[Optional[float]]:
    """Seed 002: R = max(0, 1 - (1/n) * sum_i |p_i - t_i| / t_i), p and t the predicted and true lengths each
    sorted descending, n the length of the shorter list (up to 3); for t_i = 0 the term is 0 if p_i = 0 else 1.
    Lengths are read from JSON ({"length": 12, "width": 8, "height": 15, "unit": "cm"}, Chinese keys 长 / 宽 / 高,
    values like "12cm") or from the first three numbers ("12 8 15"). When both sides name a unit (mm, cm, m,
    inch, 毫米, 厘米, 米, ...), the prediction is converted to the solution's. 0 when nothing is read."""
    solutions = solution if solution is not None else [None] * len(completions)
    scores: list[Optional[float]] = []
    for text, sol in zip(completions, solutions):
        truth = truth_dimensions(sol)
        answer = answer_content(text) if truth is not None and isinstance(text, str) else None
        if truth is None or answer is None:
            scores.append(None if truth is None else 0.0)
            continue
        (pred, pred_unit), (true_lengths, true_unit) = read_dimensions(answer), truth
        if pred_unit and true_unit and pred_unit != true_unit:
            factor = UNIT_CM[pred_unit] / UNIT_CM[true_unit]
            pred = [p * factor for p in pred]
        scores.append(dimension_score(pred, true_lengths))
    return scores
