"""Rewards on the shape of the answer, not its content."""
from __future__ import annotations

import re

from . import register

THINK_ANSWER_RE = re.compile(r"\s*<think>.*?</think>\s*<answer>.*?</answer>\s*", re.DOTALL)


@register("format")
def format_reward(completions: list[str], **_) -> list[float]:
    """R = 1 if the completion is ``<think>...</think>`` then ``<answer>...</answer>`` (whitespace around and
    between allowed, newlines inside allowed), else 0."""
    return [1.0 if THINK_ANSWER_RE.fullmatch(text) else 0.0 for text in completions]
