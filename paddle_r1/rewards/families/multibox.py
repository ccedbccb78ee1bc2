"""Multi-box grounding rewards (seed 000, ``abs_box``): boxes grouped by label, matched per label.

The answer is an object label -> list of boxes, e.g. ``{"0": [[456, 337, 725, 557]], "1": [],
"2": [[849, 407, 961, 482], [965, 480, 1099, 550]]}``, in the model's coordinate system; the solution has the
same shape (a dict, or a string of one) in original pixels. JSON and Python literals read alike (EasyDistill's
answers are ``{0: [], 2: [[619, 410, 700, 470]]}``: integer keys, read safely by ``ast.literal_eval``), and
integer and string labels are the same label (0 and "0"). Every label counts: predicted and true labels
are united, and each is matched on its own (EasyDistill scored only label "0").

An answer that is not such an object scores 0.0: a list of boxes (no labels), a label whose value is not a
list, a box that is not four finite numbers with x1 <= x2, y1 <= y2 -- the whole answer, not only the bad
entry, as ``multi_box_format`` reports. A list is not guessed to be the one label of a one-label solution.
"""
from __future__ import annotations

from functools import partial
from typing import Callable, Optional

import numpy as np

from ..registry import BadSolution, register
from ...models.coords import as_box, is_number
from .boxes import box_iou, check_alpha, plane_score, point_score, score_completions, solution_json, to_pixels
from ..parsing import answer_json

Groups = dict  # label (str) -> list of [x1, y1, x2, y2]


def read_groups(value) -> Optional[Groups]:
    """``{label: [box, ...]}`` (labels as strings: 0 and "0" are one label) from an object whose values are lists
    of boxes; None for anything else."""
    if not isinstance(value, dict):
        return None
    groups = {}
    for label, items in value.items():
        boxes = [as_box(item) for item in items] if isinstance(items, list) else [None]
        if any(box is None for box in boxes):
            return None
        groups[str(label)] = boxes
    return groups


def predicted_groups(completion: str, coord_system: str, image_sizes, input_sizes) -> Optional[Groups]:
    """The answer's labelled boxes in original pixels of the first image, or None when unreadable."""
    groups = read_groups(answer_json(completion, literals=True))
    if groups is None:
        return None
    mapped = {label: [to_pixels(box, coord_system, image_sizes, input_sizes) for box in boxes]
              for label, boxes in groups.items()}
    return None if any(box is None for boxes in mapped.values() for box in boxes) else mapped


def truth_groups(solution, image_sizes=None) -> Optional[Groups]:
    """The solution's labelled boxes (a dict, or a JSON string of one); None when the sample has no solution,
    BadSolution when it is not label -> list of boxes (bad data, not model text). ``image_sizes``: unused."""
    if solution is None:
        return None
    groups = read_groups(solution_json(solution, literals=True))
    if groups is None:
        raise BadSolution(f"solution {solution!r} is not an object (JSON or Python literal) label -> list of "
                          "[x1, y1, x2, y2]")
    return groups


def matched_score(pred: Groups, truth: Groups, pair_score: Callable, min_score: float = 0.0) -> float:
    """R = 2 * sum(pair_score over matched pairs) / (number of true boxes + number of predicted boxes), 1.0 when
    both are empty. For each label of either side, predicted and true boxes of that label are matched by the
    Hungarian algorithm on cost 1 - pair_score (each reward matches on its own score); matched pairs scoring below
    ``min_score`` count 0."""
    from scipy.optimize import linear_sum_assignment  # here: importing scipy.optimize takes half a second

    count = sum(map(len, pred.values())) + sum(map(len, truth.values()))
    if count == 0:
        return 1.0
    total = 0.0
    for label in set(pred) | set(truth):
        boxes_p, boxes_t = pred.get(label, []), truth.get(label, [])
        if not boxes_p or not boxes_t:
            continue
        scores = np.array([[pair_score(p, t) for t in boxes_t] for p in boxes_p])
        rows, cols = linear_sum_assignment(1.0 - scores)
        total += sum(scores[r, c] for r, c in zip(rows, cols) if scores[r, c] >= min_score)
    return 2.0 * total / count


def multi_box_scores(pair_score: Callable, completions, solution, image_sizes, input_sizes, coord_system,
                     min_score: float = 0.0) -> list[Optional[float]]:
    """``matched_score`` per completion; 0.0 for an unreadable answer, None when the sample has no solution."""
    score = partial(matched_score, pair_score=pair_score, min_score=min_score)
    return score_completions(truth_groups, predicted_groups, score, completions, solution, image_sizes,
                             input_sizes, coord_system)


def check_min_iou(min_iou) -> float:
    if not (is_number(min_iou) and 0.0 <= min_iou <= 1.0):
        raise ValueError(f"reward keyword min_iou={min_iou!r}: expected a number in [0, 1]")
    return float(min_iou)


@register("multi_box_format")
def multi_box_format_reward(completions, **_) -> list[float]:
    """R = 1 if the answer is an object label -> list of boxes [x1, y1, x2, y2] (finite numbers, x1 <= x2,
    y1 <= y2), JSON or a Python literal, e.g. {"0": [[1, 2, 3, 4]], "1": []} or {0: [[1, 2, 3, 4]], 1: []}, else 0."""
    return [0.0 if read_groups(answer_json(text, literals=True)) is None else 1.0 for text in completions]


@register("multi_iou")
def multi_iou_reward(completions, solution, image_sizes, input_sizes, coord_system, min_iou=0.5,
                     **_) -> list[float]:
    """R = 2 * sum(IoU of matched pairs with IoU >= min_iou) / (n_true + n_pred), matching per label (Hungarian
    on 1 - IoU); 1 when both are empty. Setting ``min_iou`` (default 0.5, in [0, 1]): a matched pair below it
    counts 0 (a detection that misses its box earns nothing)."""
    return multi_box_scores(box_iou, completions, solution, image_sizes, input_sizes, coord_system,
                            check_min_iou(min_iou))


@register("multi_gaussian_point")
def multi_gaussian_point_reward(completions, solution, image_sizes, input_sizes, coord_system, alpha=0.5,
                                **_) -> list[float]:
    """R = 2 * sum(gaussian point reward of matched pairs) / (n_true + n_pred), matching per label (Hungarian on
    1 - pair reward, no IoU gate: a box shifted off its target keeps its Gaussian credit, as in ``gaussian_point``);
    pair reward exp(-1/2 (dx^2 / sigma_x^2 + dy^2 / sigma_y^2)), sigma = alpha * the true box's side."""
    pair = partial(point_score, alpha=check_alpha(alpha))
    return multi_box_scores(pair, completions, solution, image_sizes, input_sizes, coord_system)


@register("multi_gaussian_plane")
def multi_gaussian_plane_reward(completions, solution, image_sizes, input_sizes, coord_system, alpha=0.5,
                                **_) -> list[float]:
    """R = 2 * sum(gaussian plane reward of matched pairs) / (n_true + n_pred), matching per label (Hungarian on
    1 - pair reward, no IoU gate, as in ``multi_gaussian_point``); pair reward exp(-D_B), D_B the Bhattacharyya
    distance of the two boxes' Gaussians."""
    pair = partial(plane_score, alpha=check_alpha(alpha))
    return multi_box_scores(pair, completions, solution, image_sizes, input_sizes, coord_system)
