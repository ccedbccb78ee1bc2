"""Multi-turn episodes: the model's turns and the results of the tools it called, as one chat conversation.

An episode is a list of turns, each ``{"role": "assistant", "text": ...}`` (what the model wrote, tool calls
included) or ``{"role": "tool", "name": ..., "arguments": {...}, "text": ..., "images": [path, ...], "videos":
[span, ...]}`` (what a tool returned). A clip a tool returned is a span of one of the sample's clips, ``{"video":
index (default 0), "start": seconds, "end": seconds, "count": frames (optional)}``: the arguments of the built-in
``frames`` tool, which reads it as the rollout's call does (``tools/builtins.py``), so SFT shows the model the frames,
and the times, GRPO's rollout will. A tool's result reaches the model as a message of the chat template's own tool
role holding its images, its clips, then its text (``tool_result_message``; each model family's template writes it
in its own format,
Qwen2.5-VL's as a ``tool`` turn), or as a user message where the template has no tool role (PaddleOCR-VL's:
``tool_role``). The GRPO rollout (a tool's live result, ``generation.episodes``) and SFT (a scripted episode's stored
one) both build it here, so the model sees a result the same way in both.

A sample may carry a scripted ``episode`` (``read_episode`` checks it when the data is loaded, image paths
resolved as the sample's own); SFT then teaches the whole conversation, its loss on the assistant turns only.
"""
from __future__ import annotations

import json
import math
from typing import Callable

from .formats import SampleError

TOOL_CALL = "<tool_call>{call}</tool_call>"
_PROBE = "\u2063tool-result\u2063"


def tool_call_text(name: str, arguments: dict) -> str:
    """A tool call as the model writes it: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``."""
    return TOOL_CALL.format(call=json.dumps({"name": name, "arguments": arguments}))


def assistant_message(text: str) -> dict:
    return {"role": "assistant", "content": [{"type": "text", "text": text}]}


def tool_role(processor) -> str:
    """The role a tool's result takes with ``processor``'s chat template: "tool" where the template writes a tool
    message, "user" where it writes nothing for one (PaddleOCR-VL's)."""
    conversation = [{"role": "user", "content": [{"type": "text", "text": "?"}]}, assistant_message("?"),
                    tool_result_message(_PROBE, 0, "tool")]
    return "tool" if _PROBE in processor.apply_chat_template(conversation, tokenize=False) else "user"


def tool_result_message(text: str, n_images: int, role: str, n_videos: int = 0) -> dict:
    """The chat message a tool's result is (``role``: ``tool_role``'s): its ``n_images`` images, its ``n_videos``
    clips, then its text."""
    return {"role": role, "content": [{"type": "image"} for _ in range(n_images)]
            + [{"type": "video"} for _ in range(n_videos)] + [{"type": "text", "text": text}]}


def episode_messages(prompt_messages: list[dict], episode: list[dict], role: str) -> list[dict]:
    """The prompt's messages, then each turn of ``episode`` as a message (assistant turns as they are, tool turns
    through ``tool_result_message`` with ``role``)."""
    messages = list(prompt_messages)
    for turn in episode:
        if turn["role"] == "assistant":
            messages.append(assistant_message(turn["text"]))
        else:
            messages.append(tool_result_message(turn["text"], len(turn.get("images") or []), role,
                                                len(turn.get("videos") or [])))
    return messages


def episode_images(episode: list[dict]) -> list[str]:
    """The tool turns' image paths, in the order the conversation shows them."""
    return [path for turn in episode if turn["role"] == "tool" for path in turn.get("images") or []]


def episode_spans(episode: list[dict]) -> list[dict]:
    """The tool turns' clips (spans of the sample's clips), in the order the conversation shows them."""
    return [span for turn in episode if turn["role"] == "tool" for span in turn.get("videos") or []]


def read_episode(value, image_path: Callable[[str], str], clips: int = 0) -> list[dict]:
    """A sample's ``episode`` checked (SampleError naming the turn and field) with each tool image's path made
    by ``image_path`` (relative paths resolve as the sample's images do) and each tool clip a span of one of the
    sample's ``clips`` clips. Assistant and tool turns alternate, starting and ending with an assistant turn."""
    if not isinstance(value, list) or not value:
        raise SampleError(f"'episode' must be a non-empty list of turns, got {value!r:.80}")
    turns = []
    for i, turn in enumerate(value):
        where = f"episode[{i}]"
        role = turn.get("role") if isinstance(turn, dict) else None
        expected = "assistant" if i % 2 == 0 else "tool"
        if role != expected:
            raise SampleError(f"{where}: expected an {expected} turn (turns alternate, starting with the "
                              f"assistant), got {turn!r:.80}")
        if not isinstance(turn.get("text"), str) or (role == "assistant" and not turn["text"].strip()):
            raise SampleError(f"{where}: 'text' must be a{' non-empty' if role == 'assistant' else ''} string")
        if role == "assistant":
            turns.append({"role": role, "text": turn["text"]})
            continue
        if not isinstance(turn.get("name"), str) or not turn["name"]:
            raise SampleError(f"{where}: a tool turn needs its tool's 'name'")
        if not isinstance(turn.get("arguments", {}), dict):
            raise SampleError(f"{where}: 'arguments' must be an object, got {turn['arguments']!r:.80}")
        images = turn.get("images", [])
        if not isinstance(images, list) or not all(isinstance(p, str) and p.strip() for p in images):
            raise SampleError(f"{where}: 'images' must be a list of paths, got {images!r:.80}")
        spans = turn.get("videos", [])
        if not isinstance(spans, list):
            raise SampleError(f"{where}: 'videos' must be a list of spans of the sample's clips, got {spans!r:.80}")
        for k, span in enumerate(spans):
            _check_span(span, clips, f"{where}: videos[{k}]")
        turns.append({**turn, "arguments": turn.get("arguments", {}), "images": [image_path(p) for p in images],
                      "videos": spans})
    if turns[-1]["role"] != "assistant":
        raise SampleError(f"episode[{len(turns) - 1}]: an episode ends with the assistant's answer, not a tool turn")
    return turns


def _check_span(span, clips: int, where: str) -> None:
    """A tool clip's span: its clip one of the sample's, its times numbers (the ``frames`` tool checks them
    against the clip's length when it reads it), its count whole."""
    if not isinstance(span, dict):
        raise SampleError(f"{where}: expected a span {{'video', 'start', 'end', 'count'}} of the sample's clips, "
                          f"got {span!r:.80}")
    index = span.get("video", 0)
    if not (_whole(index) and 0 <= index < clips):
        raise SampleError(f"{where}: 'video' must be the index of one of the sample's {clips} clip(s), got {index!r}")
    for key in ("start", "end"):
        value = span.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise SampleError(f"{where}: {key!r} must be a number of seconds, got {value!r}")
    if "count" in span and not _whole(span["count"]):
        raise SampleError(f"{where}: 'count' must be a whole number of frames, got {span['count']!r}")


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
