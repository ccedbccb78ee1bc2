"""What to draw over a prompt's images: the true and the predicted boxes, points and swipes, in original pixels.

The solution says what kind of answer the task wants (a box, labelled boxes, a GUI action); each completion is then
read and converted by the very helpers its reward uses (``paddle_r1.rewards``: ``predicted_box_in_pixels``,
``predicted_groups``, ``read_action`` + ``paddle_r1.models.coords``), so a box is drawn where the reward saw it.
A solution of none of these kinds (a count, a math answer, a caption) draws nothing: its answer is shown as text.
A multi-turn completion's tool calls that name a ``bbox_2d`` (crop, zoom) are drawn dashed where they cut the image.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from ..models.coords import box_to_original
from ..rewards import BadSolution
from ..rewards.families.boxes import predicted_box_in_pixels, truth_box
from ..rewards.families.gui import (POINT_TYPES, SWIPE_TYPES, as_four, coordinates, read_action, truth_action)
from ..rewards.families.multibox import predicted_groups, truth_groups
from ..rewards.parsing import answer_json
from ..tools.builtins import ToolError, call_region


@dataclass
class Shape:
    kind: str  # "box" | "point" | "swipe" | "tool_box" (a tool call's box argument)
    coords: list  # [x1, y1, x2, y2] original pixels (a point: x, y, x, y; a swipe: start, end)
    image: int  # index of the prompt's image it is drawn on
    label: str = ""


def _boxes(boxes, image: int, label: str = "") -> list[Shape]:
    return [Shape("box", list(b), image, label) for b in boxes]


def _action_shapes(action, image: int) -> list[Shape]:
    kind, value = action
    if kind in SWIPE_TYPES:
        return [Shape("swipe", list(value), image, kind)]
    if kind in POINT_TYPES:
        x1, y1, x2, y2 = value
        return [Shape("point" if (x1, y1) == (x2, y2) else "box", list(value), image, kind)]
    return []


def solution_kind(solution) -> Optional[str]:
    """"box", "groups" or "action": what the solution is, by the readers the rewards use; None for anything else."""
    for kind, read in (("box", truth_box), ("groups", truth_groups), ("action", truth_action)):
        try:
            if read(solution) is not None:
                return kind
        except (BadSolution, TypeError, ValueError, AttributeError):
            continue
    return None


def truth_shapes(kind: Optional[str], solution, images: int) -> list[Shape]:
    if kind == "box":
        return _boxes([truth_box(solution)], 0)
    if kind == "groups":
        return [s for label, boxes in truth_groups(solution).items() for s in _boxes(boxes, 0, label)]
    if kind == "action":
        return _action_shapes(truth_action(solution), images - 1)  # the current screen is the last image
    return []


def predicted_shapes(kind: Optional[str], text: str, facts: dict) -> list[Shape]:
    """The completion's answer as shapes in original pixels; none when it cannot be read or the facts needed to
    convert it are unknown."""
    system, sizes, inputs = facts["coord_system"], facts["image_sizes"], facts["input_sizes"]
    if kind is None or system is None or not sizes or (system == "abs_resized" and not inputs):
        return []
    if kind == "box":
        box = predicted_box_in_pixels(text, system, sizes, inputs)
        return [] if box is None else _boxes([box], 0)
    if kind == "groups":
        groups = predicted_groups(text, system, sizes, inputs) or {}
        return [s for label, boxes in groups.items() for s in _boxes(boxes, 0, label)]
    action = read_action(answer_json(text)) if isinstance(text, str) else None
    if action is None or action[0] not in POINT_TYPES + SWIPE_TYPES:
        return []
    values = as_four(coordinates(action[1]))
    if values is None:
        return []
    mapped = box_to_original(values, system, sizes[-1], inputs[-1] if inputs else None)
    return _action_shapes((action[0], mapped), len(sizes) - 1) if all(map(math.isfinite, mapped)) else []


def tool_box_shapes(turns: list[dict], facts: dict) -> list[Shape]:
    """Each tool call's ``bbox_2d`` (in the model's coordinates, like an answer's box) as the region the tool cut,
    in original pixels of the prompt image it names (``tools.builtins.call_region``); calls that cut nothing are
    left out."""
    system, sizes, inputs = facts["coord_system"], facts["image_sizes"], facts["input_sizes"]
    if system is None or (system == "abs_resized" and not inputs):
        return []
    shapes = []
    for k, turn in enumerate(turns):
        arguments = turn.get("arguments") if turn["role"] == "tool" else None
        if not isinstance(arguments, dict):
            continue
        try:
            image, region = call_region(arguments, sizes, inputs, system)
        except ToolError:
            continue
        shapes.append(Shape("tool_box", list(region), image, f"{turn['name']} (turn {k})"))
    return shapes


def eval_prediction_shapes(prediction) -> list[Shape]:
    """Eval results store REC predictions already in original pixels."""
    if isinstance(prediction, list) and len(prediction) == 4 and all(isinstance(v, (int, float)) for v in prediction):
        return _boxes([prediction], 0)
    return []
