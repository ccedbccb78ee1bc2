"""The run's tools by name (config key ``tools``: built-in names or ``"package.module:function"``), and running one
call: whatever goes wrong (a call that cannot be read, an unknown tool, bad arguments, a tool that raises, a result
of the wrong kind) becomes the tool's text, an error message for the model, never an exception for the run."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

from PIL import Image

from ..data.video import Clip
from ..errors import ConfigError
from ..user_code import load_user_function
from .builtins import BUILTIN_TOOLS, ToolContext
from .calls import ToolCall


@dataclass
class ToolResult:
    text: str
    images: list = field(default_factory=list)  # PIL images, appended to the episode for the model to see
    videos: list = field(default_factory=list)  # clips (``video.Clip``: frames sampled and sized), likewise
    error: Optional[str] = None  # set when the call failed (``text`` then says so to the model)


def resolve_tool(name: str, folders: tuple = ()) -> Callable:
    """A built-in tool or a user's ``"package.module:function"`` (found as rewards are: ``user_code``); a
    ``KeyError`` naming it otherwise."""
    if name in BUILTIN_TOOLS:
        return BUILTIN_TOOLS[name]
    if ":" in name:
        return load_user_function(name, folders, what="tool")
    raise KeyError(f"unknown tool {name!r}; built-in: {', '.join(sorted(BUILTIN_TOOLS))}, or 'module.path:function'")


class Toolbox:
    def __init__(self, names: list[str], folders: tuple = ()):
        """A call names a tool by its entry in ``names``, or for a ``module:function`` also by the function's
        own name."""
        self.tools = {}
        for name in names:
            fn = resolve_tool(name, folders)
            self.tools[name] = fn
            self.tools.setdefault(name.rpartition(":")[2], fn)

    def run(self, call: ToolCall, context: ToolContext) -> ToolResult:
        if call.error is None and call.name not in self.tools:
            call.error = f"unknown tool {call.name!r}; the tools are {', '.join(sorted(self.tools))}"
        if call.error is None:
            try:
                return _as_result(self.tools[call.name](call.arguments, context))
            except Exception as e:  # the model's arguments or the tool's own bug: either way the model is told
                call.error = f"{call.name} failed: {e}" if str(e) else f"{call.name} failed: {type(e).__name__}"
        return ToolResult(f"Error: {call.error}", error=call.error)


def _as_result(value) -> ToolResult:
    """A tool's return value (text, an image, or (text, [images and clips])) as a ``ToolResult``."""
    if isinstance(value, str):
        return ToolResult(value)
    if isinstance(value, Image.Image):
        return ToolResult("", [value])
    if (isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str)
            and all(isinstance(item, (Image.Image, Clip)) for item in value[1])):
        return ToolResult(value[0], [item.convert("RGB") for item in value[1] if isinstance(item, Image.Image)],
                          [item for item in value[1] if isinstance(item, Clip)])
    raise TypeError(f"returned {type(value).__name__}; a tool returns text, an image or (text, [images and clips])")


def toolbox_for(tools: list[str], max_turns: int, folders: tuple = ()) -> Optional[Toolbox]:
    """The tools of a run that rolls out episodes (config keys ``tools``, ``max_turns`` > 1), else None; a name that
    is no tool is a ``ConfigError`` naming the key."""
    if max_turns == 1:
        return None
    try:
        return Toolbox(tools, folders)
    except KeyError as e:
        raise ConfigError(f"config key 'tools': {e.args[0]}", keys=("tools",)) from None
