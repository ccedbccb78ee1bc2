"""GUI agent action reward (seed 004): one phone action, {"action_type": ..., "action_parameter": {...}}.

Seed 004's action space: ``click`` / ``long_click`` take a box "x1,y1,x2,y2" to press inside; ``swipe`` takes
"x1,y1,x2,y2", from (x1, y1) to (x2, y2); ``type`` the text to enter; ``open_app`` the app's name;
``task_completed`` a summary, ``inquiry`` a question, ``wait`` / ``back`` / ``task_impossible`` nothing:
``"action_parameter": {"<action_type>": "<value>"}``. Solutions are in original-image pixels of the current
screenshot (the last image of the sample: seed 004 gives the previous and the current screen); predicted points
are mapped from the model's coordinate system with ``paddle_r1.models.coords``.
"""
from __future__ import annotations

import math
import numbers
from typing import Optional

from ...models.coords import box_to_original
from ..registry import BadSolution, register
from ..parsing import answer_json, answer_text, extract_json, normalize_answer, parse_numbers

POINT_TYPES = ("click", "long_click")
SWIPE_TYPES = ("swipe",)
TEXT_TYPES = ("type", "open_app")


def read_action(value) -> Optional[tuple[str, object]]:
    """(action_type lower-cased, its parameter) from a dict {"action_type": ..., "action_parameter": ...}; the
    parameter is ``action_parameter[action_type]`` (or the only value of a one-entry dict, or the parameter
    itself when it is not a dict); None when there is no string action_type."""
    if not isinstance(value, dict) or not isinstance(value.get("action_type"), str):
        return None
    kind = value["action_type"].strip().lower()
    parameter = value.get("action_parameter")
    if isinstance(parameter, dict):
        if kind in parameter:
            parameter = parameter[kind]
        else:
            parameter = next(iter(parameter.values())) if len(parameter) == 1 else None
    return kind, parameter


def coordinates(parameter) -> list[float]:
    """The finite numbers of a parameter: "37,378,227,633", "[37, 378]" or a JSON list of numbers."""
    if isinstance(parameter, str):
        return parse_numbers(parameter, limit=4)
    if isinstance(parameter, (list, tuple)):
        values = []
        for v in parameter[:4]:
            if not isinstance(v, numbers.Real) or isinstance(v, bool):
                return []
            try:
                values.append(float(v))
            except OverflowError:
                return []
        return values if all(math.isfinite(v) for v in values) else []
    return []


def as_four(values: list[float]) -> Optional[list[float]]:
    """A point (x, y) as [x, y, x, y]; four numbers as they are; else None."""
    if len(values) == 2:
        return values * 2
    return values if len(values) == 4 else None


def point_to_box_distance(x: float, y: float, box) -> float:
    """Euclidean distance from (x, y) to the box [x1, y1, x2, y2] (corners in any order); 0 inside or on it."""
    x1, x2 = sorted((box[0], box[2]))
    y1, y2 = sorted((box[1], box[3]))
    return math.hypot(max(x1 - x, 0.0, x - x2), max(y1 - y, 0.0, y - y2))


def click_score(pred: list[float], truth: list[float], diagonal: float, distance_scale: float) -> float:
    """1 when the predicted point (a box's centre) is inside the true box, else exp(-d / (distance_scale * D)),
    d its distance to the box and D the image diagonal, in original pixels."""
    x, y = (pred[0] + pred[2]) / 2, (pred[1] + pred[3]) / 2
    return math.exp(-point_to_box_distance(x, y, truth) / (distance_scale * diagonal))


def swipe_score(pred: list[float], truth: list[float], diagonal: float, tolerance: float) -> float:
    """1 when the start and the end point each lie within tolerance * D of the true ones (D the image
    diagonal), else 0."""
    start = math.hypot(pred[0] - truth[0], pred[1] - truth[1])
    end = math.hypot(pred[2] - truth[2], pred[3] - truth[3])
    return float(max(start, end) <= tolerance * diagonal)


def action_score(pred, truth, coord_system: str, image_size, input_size, distance_scale: float,
                 swipe_tolerance: float) -> float:
    """The score of one predicted action (from ``read_action``) against the true one (from ``truth_action``);
    see ``gui_action``."""
    if pred is None or pred[0] != truth[0]:
        return 0.0
    kind = truth[0]
    if kind in TEXT_TYPES:
        return float(normalize_answer(str(pred[1])) == normalize_answer(str(truth[1])))
    if kind not in POINT_TYPES + SWIPE_TYPES:
        return 1.0
    values = coordinates(pred[1])
    if len(values) != 4 and (kind in SWIPE_TYPES or len(values) != 2):
        return 0.0
    predicted = box_to_original(as_four(values), coord_system, image_size, input_size)
    if not all(math.isfinite(v) for v in predicted):
        return 0.0
    diagonal = math.hypot(*image_size)
    if kind in SWIPE_TYPES:
        return swipe_score(predicted, truth[1], diagonal, swipe_tolerance)
    return click_score(predicted, truth[1], diagonal, distance_scale)


def truth_action(solution) -> Optional[tuple[str, object]]:
    """The solution's action: a dict or a JSON text (maybe in <answer> tags); for click / long_click / swipe the
    parameter is returned as four numbers (a click point "x,y" as [x, y, x, y]). None without a solution;
    BadSolution when it holds no action, or no coordinates where its type needs them."""
    if solution is None:
        return None
    value = solution
    if isinstance(solution, str):
        try:
            value = extract_json(answer_text(solution))
        except ValueError:
            value = None
    action = read_action(value)
    if action is not None and action[0] in POINT_TYPES + SWIPE_TYPES:
        values = coordinates(action[1])
        box = as_four(values) if action[0] in POINT_TYPES or len(values) == 4 else None
        action = None if box is None else (action[0], box)
    if action is None:
        raise BadSolution(f"solution {solution!r} is not an action {{\"action_type\": ..., \"action_parameter\": ...}}"
                         " with the coordinates its type needs")
    return action


def _positive(name: str, value) -> float:
    number = float(value)
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"reward keyword {name}={value!r}: expected a positive number")
    return number


@register("gui_action")
def gui_action_reward(completions, solution, image_sizes, input_sizes, coord_system, distance_scale=0.05,
                      swipe_tolerance=0.1, **_) -> list[Optional[float]]:
    """Seed 004's action, read from the answer's JSON {"action_type", "action_parameter"}. R = 0 when the
    action_type differs from the solution's (or none can be read); otherwise
    click / long_click: R = exp(-d / (distance_scale * D)), d the distance in original pixels from the predicted
    point ("x,y", or a box's centre) to the true box, D the diagonal of the current (last) image: 1 inside
    the box, 0.37 at distance_scale * D (default 0.05) outside it;
    swipe: R = 1 if both predicted endpoints of "x1,y1,x2,y2" lie within swipe_tolerance * D (default 0.1) of the
    true start and end points, else 0;
    type / open_app: R = 1 if the texts are equal after normalization (case, whitespace, outer punctuation);
    wait, back, task_completed, task_impossible, inquiry (and any other type): R = 1 for the matching type."""
    distance_scale = _positive("distance_scale", distance_scale)
    swipe_tolerance = _positive("swipe_tolerance", swipe_tolerance)
    scores: list[Optional[float]] = []
    for text, sol, sizes, in_sizes, system in zip(completions, solution, image_sizes, input_sizes, coord_system):
        truth = truth_action(sol)
        if truth is None:
            scores.append(None)
            continue
        pred = read_action(answer_json(text)) if isinstance(text, str) else None
        input_size = in_sizes[-1] if in_sizes else None
        scores.append(action_score(pred, truth, system, sizes[-1], input_size, distance_scale, swipe_tolerance))
    return scores
