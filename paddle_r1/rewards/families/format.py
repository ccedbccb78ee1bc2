"""Rewards on the shape of the answer, not its content."""
from __future__ import annotations

import json
import re

from ..registry import register
from ..parsing import tagged

# the contents may not hold their own tags: "<answer>[1]</answer>8]</answer>" is not well formed
THINK_ANSWER_RE = re.compile(r"\s*<think>(?:(?!</?think>).)*</think>\s*<answer>(?:(?!</?answer>).)*</answer>\s*",
                             re.DOTALL)


@register("format")
def format_reward(completions: list[str], **_) -> list[float]:
    """R = 1 if the completion is ``<think>...</think>`` then ``<answer>...</answer>`` (whitespace around and
    between allowed, newlines inside allowed), else 0."""
    return [1.0 if THINK_ANSWER_RE.fullmatch(text) else 0.0 for text in completions]


# The fields seed 004's GUI-agent format reward asks of the <think> JSON.
GUI_THINK_FIELDS = ("task_interpretation", "current_page_audit", "path_alignment_check", "action_validation")


def _reject_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def strict_json(content: str):
    """(True, value) when the whole of ``content`` (stripped; a surrounding ```json fence allowed) is one JSON
    value (NaN / Infinity refused), else (False, None)."""
    text = content.strip()
    if len(text) >= 6 and text.startswith("```") and text.endswith("```"):  # string ops: no regex backtracking
        text = text[3:-3]
        text = text[4:] if text[:4].lower() == "json" else text
    try:
        return True, json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError; so are over-long integers
        return False, None


def field_list(required_fields) -> list[str]:
    """``required_fields`` as a list of names: a list / tuple, or one comma-separated string; None -> []."""
    if required_fields is None:
        return []
    if isinstance(required_fields, str):
        return [name.strip() for name in required_fields.split(",") if name.strip()]
    return [str(name) for name in required_fields]


@register("json_format")
def json_format_reward(completions: list[str], required_fields=GUI_THINK_FIELDS, **_) -> list[float]:
    """R = 0.5 * (checks passed) / 2.5, in [0, 1] (seed 004's GUI format reward, scaled): ``<think>...</think>``
    present; ``<answer>...</answer>`` present; the (first) think content is JSON; the (last) answer content is
    JSON; the think JSON is an object holding every name in ``required_fields`` (default seed 004's four:
    task_interpretation, current_page_audit, path_alignment_check, action_validation; an empty list asks only
    for an object). "JSON" means the whole stripped content, a surrounding ```json fence allowed."""
    fields = field_list(required_fields)
    scores = []
    for text in completions:
        think, answer = tagged(text, "think", last=False), tagged(text, "answer")
        think_ok, think_json = strict_json(think) if think is not None else (False, None)
        answer_ok, _ = strict_json(answer) if answer is not None else (False, None)
        has_fields = think_ok and isinstance(think_json, dict) and all(name in think_json for name in fields)
        passed = (think is not None) + (answer is not None) + think_ok + answer_ok + has_fields
        scores.append(0.5 * passed / 2.5)
    return scores
