"""Rewards on the tool calls of multi-turn episodes (config keys ``tools``, ``max_turns``)."""
from __future__ import annotations

from typing import Optional

from ...models.coords import as_box
from ...tools.builtins import ToolError, call_region
from ..registry import BadSolution, register


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


@register("crop_covers_target")
def crop_covers_target(completions: list[str], tool_calls: Optional[list] = None, target_box: Optional[list] = None,
                       image_sizes: Optional[list] = None, input_sizes: Optional[list] = None,
                       coord_system: Optional[list] = None, max_area_ratio: float = 16.0, **_
                       ) -> list[Optional[float]]:
    """R = 1 if a call the episode ran (``error`` None in the ``tool_calls`` column) names a ``bbox_2d`` whose
    region B, as the crop tool cut it (``tools.builtins.call_region``: the box in the rollout's coordinate system
    converted to original pixels of the image it names by ``models.coords.box_to_original``, the whole pixels
    covering it, clipped to that image), covers the sample's
    ``target_box`` T (original pixels of image 0): B.x1 <= T.x1, B.y1 <= T.y1, T.x2 <= B.x2, T.y2 <= B.y2, with
    area(B) <= ``max_area_ratio`` * area(T); else 0 (an episode without calls too: this rewards cropping the
    target). The area bound keeps a crop of the whole image from scoring (the default 16: a crop at most four
    times the target's side; the zoom task's 112-pixel cell around its 30-pixel square is 13.9). None for a
    sample without ``target_box`` and in single-turn runs. A shaping reward for the synthetic zoom task
    (``synthetic/zoom.py``), beside the answer's reward."""
    if not (isinstance(max_area_ratio, (int, float)) and max_area_ratio > 0):
        raise ValueError(f"reward keyword max_area_ratio={max_area_ratio!r}: expected a positive number")
    if tool_calls is None:
        return [None] * len(completions)
    scores = []
    for i, calls in enumerate(tool_calls):
        if target_box is None or target_box[i] is None:
            scores.append(None)
            continue
        target = as_box(target_box[i])
        if target is None:
            raise BadSolution(f"target_box {target_box[i]!r} is not a box [x1, y1, x2, y2] with x1 <= x2, y1 <= y2")
        covering = (_crop_in_pixels(call, image_sizes[i], input_sizes[i], coord_system[i]) for call in calls
                    if call["error"] is None)
        limit = max_area_ratio * (target[2] - target[0]) * (target[3] - target[1])
        scores.append(float(any(box is not None and box[0] <= target[0] and box[1] <= target[1]
                                and target[2] <= box[2] and target[3] <= box[3]
                                and (box[2] - box[0]) * (box[3] - box[1]) <= limit for box in covering)))
    return scores


def _crop_in_pixels(call: dict, image_sizes, input_sizes, coord_system: str) -> Optional[tuple]:
    """The region a call's ``bbox_2d`` cut, in original pixels of the image it names (``tools.builtins.call_region``,
    as the tool cut it); None when its arguments make no crop."""
    arguments = call["arguments"] if isinstance(call["arguments"], dict) else {}
    try:
        return call_region(arguments, image_sizes, input_sizes, coord_system)[1]
    except ToolError:
        return None
