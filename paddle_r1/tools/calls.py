"""Tool calls as a completion writes them, in the Qwen-VL tool-call format:
``<tool_call>{"name": "crop", "arguments": {"bbox_2d": [10, 20, 200, 240]}}</tool_call>``.

Reading never raises: a call that cannot be read is a ``ToolCall`` with its ``error`` set, which the toolbox answers
with that error as the tool's text."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Optional

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_CALL_RE = re.compile(re.escape(OPEN) + r"(.*?)" + re.escape(CLOSE), re.DOTALL)


@dataclass
class ToolCall:
    name: Optional[str]
    arguments: dict = field(default_factory=dict)
    error: Optional[str] = None  # why the call cannot be run as written (then name / arguments may be empty)


def _reject_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def parse_tool_calls(text: str) -> list[ToolCall]:
    """Every ``<tool_call>...</tool_call>`` of ``text`` in order; an opening tag never closed is one more call,
    with an error. A call's body must be a JSON object with a string ``name`` and an object ``arguments`` (absent:
    no arguments)."""
    calls = [_read_call(body) for body in _CALL_RE.findall(text)]
    if OPEN in _CALL_RE.sub("", text):
        calls.append(ToolCall(None, error=f"{OPEN} is never closed by {CLOSE}"))
    return calls


def _read_call(body: str) -> ToolCall:
    try:
        value = json.loads(body.strip(), parse_constant=_reject_constant)
    except (ValueError, RecursionError) as e:
        return ToolCall(None, error=f"the tool call is not JSON ({e})")
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return ToolCall(None, error='the tool call must be a JSON object {"name": ..., "arguments": {...}}')
    arguments = value.get("arguments", {})
    if not isinstance(arguments, dict):
        return ToolCall(value["name"], error="the tool call's arguments must be a JSON object")
    return ToolCall(value["name"], arguments)
