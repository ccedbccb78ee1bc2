"""Rewards on the tool calls of multi-turn episodes (config keys ``tools``, ``max_turns``)."""
from __future__ import annotations

from typing import Optional

from ..registry import register


@register("tool_format")
def tool_format(completions: list[str], tool_calls: Optional[list] = None, **_) -> list[Optional[float]]:
    """R = 1 if every tool call the episode ran was well formed: it parsed as a ``<tool_call>`` JSON object, named
    one of the run's tools and had arguments the tool accepted (``error`` None in the ``tool_calls`` column); else
    0. An episode without calls (and every completion of a single-turn run) gets None: there is no call to judge,
    and scoring it 1 or 0 would push the policy toward or away from calling tools, which is the task rewards' say.
    Calls written in the final turn, when ``max_turns`` left no turn to answer them, are not run and not judged."""
    if tool_calls is None:
        return [None] * len(completions)
    return [None if not calls else float(all(call["error"] is None for call in calls)) for calls in tool_calls]
