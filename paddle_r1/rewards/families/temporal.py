"""Temporal grounding rewards (Temporal-R1 on Charades-STA): when in a clip does an event happen.

The answer is a span of seconds, read from the ``<answer>`` content (the whole text without tags) in either form
Temporal-R1's models write: JSON ``{"start_time": 12.5, "end_time": 20.1}`` or text "12.5 to 20.1 seconds" (also
"12.5 and 20.1"); the first one found counts. The solution is ``[start, end]`` seconds (the ``temporal_grounding``
format's), the ``duration`` column the clip's length in seconds.
"""
from __future__ import annotations

import math
import re
from typing import Optional

from ...models.coords import as_floats, is_number
from ..parsing import NUMBER, answer_content, extract_json
from ..registry import BadSolution, register

# a unit may follow the first number; "to"/"and" joins the two. Linear time: the first number starts where no digit
# or point precedes it (else every digit of a run starts a match that fails at its end: quadratic on "1" * 100k),
# and no two whitespace runs meet with only optional tokens between them
SPAN_RE = re.compile(rf"(?<![\d.])({NUMBER})(?:\s*(?:seconds?|secs?|s)\b)?\s*(?:to|and)\s*({NUMBER})", re.IGNORECASE)


def parse_span(completion: str) -> Optional[tuple[float, float]]:
    """The predicted (start, end) as written (reversed, negative or huge spans included: the reward judges them);
    None when no span can be read, or a time is not a finite number."""
    text = answer_content(completion)
    if text is None:
        return None
    found = extract_json(text) if "{" in text else None
    if isinstance(found, dict) and is_number(found.get("start_time")) and is_number(found.get("end_time")):
        span = as_floats([found["start_time"], found["end_time"]])
        return None if span is None else (span[0], span[1])
    match = SPAN_RE.search(text)
    if match is None:
        return None
    span = as_floats([float(match.group(1)), float(match.group(2))])
    return None if span is None else (span[0], span[1])


def temporal_iou(pred: tuple[float, float], truth: tuple[float, float], duration: Optional[float]) -> float:
    """IoU of two spans after dividing their times by ``duration`` (Temporal-R1's normalisation; IoU is unchanged by
    a common scale, so the same in seconds). A reversed span (start > end) is empty and scores 0; nothing is clipped
    to the clip, so the part of a span outside [0, duration] counts in the union and a span covering the whole clip
    (or more) scores |truth| / |pred|: never more than its true overlap earns."""
    scale = duration if duration and math.isfinite(duration) and duration > 0 else 1.0
    (s, e), (gs, ge) = [(a / scale, b / scale) for a, b in (pred, truth)]
    if not s <= e:  # reversed (NaN never gets here: parse_span refuses it)
        return 0.0
    inter = max(0.0, min(e, ge) - max(s, gs))
    union = (e - s) + (ge - gs) - inter
    return inter / union if union > 0 else 0.0


def truth_span(solution) -> tuple[float, float]:
    span = as_floats(solution) if isinstance(solution, (list, tuple)) and len(solution) == 2 else None
    if span is None or not span[0] < span[1]:
        raise BadSolution(f"temporal_iou needs a solution [start, end] seconds with start < end, got {solution!r}")
    return span[0], span[1]


@register("temporal_iou")
def temporal_iou_reward(completions, solution, duration=None, **_) -> list[Optional[float]]:
    """R = |P ∩ T| / |P ∪ T| with P = [s_p, e_p] / D and T = [s_t, e_t] / D, D the clip's ``duration`` (Temporal-R1's
    tIoU); 0 when no span can be read, the span is reversed or a time is NaN or infinite. A span partly or wholly
    outside the clip is scored as written (see ``temporal_iou``). A sample without a solution scores None."""
    durations = duration if duration is not None else [None] * len(completions)
    scores = []
    for text, truth, length in zip(completions, solution, durations):
        if truth is None:
            scores.append(None)
            continue
        span = parse_span(text)
        scores.append(0.0 if span is None else temporal_iou(span, truth_span(truth), length))
    return scores
