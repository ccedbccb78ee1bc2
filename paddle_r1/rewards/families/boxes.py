"""Single-box rewards. Predictions are mapped from the model's coordinate system to original-image pixels
(``paddle_r1.models.coords``) before they are compared with the solution, which is in original pixels.

The Gaussian rewards follow GUI-G2 (arXiv 2507.15846): a box [x1, y1, x2, y2] is read as the Gaussian with
mean its centre and standard deviations sigma_x = alpha * max(x2 - x1, 1), sigma_y = alpha * max(y2 - y1, 1)
(original pixels). The one-pixel floor is the documented behaviour for degenerate boxes: a zero-width or
zero-height box (a point or a line) counts as one pixel wide, so its Gaussian is narrow but never singular.
"""
from __future__ import annotations

import math
import numbers
from functools import partial
from typing import Callable, Optional

from ...models.coords import as_box, box_to_original
from ..registry import BadSolution, register
from ..parsing import answer_content, answer_text, extract_json, parse_box

MIN_SIDE = 1.0  # pixels: a narrower box is read as this wide when it defines a Gaussian


def box_iou(a, b) -> float:
    """Intersection over union of two [x1, y1, x2, y2] boxes; 0 when the union is empty."""
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def to_pixels(box, coord_system: str, image_sizes, input_sizes) -> Optional[list[float]]:
    """A model-space box in original pixels of the sample's first image; None when the mapping overflows."""
    input_size = input_sizes[0] if input_sizes else None
    mapped = box_to_original(box, coord_system, image_sizes[0], input_size)
    return mapped if all(math.isfinite(v) for v in mapped) else None


def answer_box(completion: str) -> Optional[list[float]]:
    """The first box [x1, y1, x2, y2] in the answer (model units), or None."""
    text = answer_content(completion)
    return None if text is None else parse_box(text)


def predicted_box_in_pixels(completion: str, coord_system: str, image_sizes, input_sizes):
    """The answer's box in original pixels of the sample's first image, or None."""
    box = answer_box(completion)
    return None if box is None else to_pixels(box, coord_system, image_sizes, input_sizes)


def solution_json(solution, literals: bool = False):
    """A structured solution as it is, or a string one parsed as JSON (``<answer>`` tags, ```json fences and
    text around it allowed; ``literals``: Python literals too, see ``extract_json``)."""
    return extract_json(answer_text(solution), literals=literals) if isinstance(solution, str) else solution


def truth_box(solution, image_sizes=None) -> Optional[list[float]]:
    """The solution's box (original pixels): a list [x1, y1, x2, y2] or a text holding one ("<answer>[...]"),
    None when the sample has no solution (reward not applicable); BadSolution on anything else (bad data).
    ``image_sizes`` is unused: it is there for ``score_completions``, whose truth readers all take it."""
    if solution is None:
        return None
    box = parse_box(answer_text(solution)) if isinstance(solution, str) else as_box(solution)
    if box is None:
        raise BadSolution(f"solution {solution!r} is not a box [x1, y1, x2, y2] with x1 <= x2, y1 <= y2")
    return box


def check_alpha(alpha) -> float:
    if not (isinstance(alpha, numbers.Real) and math.isfinite(alpha) and alpha > 0):
        raise ValueError(f"reward keyword alpha={alpha!r}: expected a positive number")
    return float(alpha)


def _gaussian(box, alpha: float) -> tuple[float, float, float, float]:
    """(mean_x, mean_y, sigma_x, sigma_y) of a box, sides below MIN_SIDE raised to it."""
    x1, y1, x2, y2 = box
    return (x1 / 2 + x2 / 2, y1 / 2 + y2 / 2,
            alpha * max(x2 - x1, MIN_SIDE), alpha * max(y2 - y1, MIN_SIDE))


def point_score(pred, gt, alpha: float = 0.5) -> float:
    """R = exp(-1/2 ((cx_p - cx_gt)^2 / sigma_x^2 + (cy_p - cy_gt)^2 / sigma_y^2)), (cx_p, cy_p) the predicted
    box's centre, sigma_x = alpha * width, sigma_y = alpha * height of the true box."""
    px, py, _, _ = _gaussian(pred, alpha)
    gx, gy, sx, sy = _gaussian(gt, alpha)
    zx, zy = (px - gx) / sx, (py - gy) / sy
    return math.exp(-0.5 * (zx * zx + zy * zy))


def _bhattacharyya_1d(mean_p: float, sigma_p: float, mean_gt: float, sigma_gt: float) -> float:
    """One axis of the Bhattacharyya distance of two Gaussians: d^2 / (8 s^2) + 1/2 ln(s^2 / (sigma_p sigma_gt)),
    s^2 = (sigma_p^2 + sigma_gt^2) / 2, written as z^2 / 8 + 1/2 ln((r + 1/r) / 2), z = d / s, r = sigma_p / sigma_gt,
    so that huge boxes overflow to an infinite distance (a score of 0), never to NaN."""
    z = (mean_p - mean_gt) / (math.hypot(sigma_p, sigma_gt) / math.sqrt(2.0))
    ratio = sigma_p / sigma_gt
    return z * z / 8.0 + 0.5 * math.log((ratio + 1.0 / ratio) / 2.0)


def plane_score(pred, gt, alpha: float = 0.5) -> float:
    """R = exp(-D_B), the Bhattacharyya coefficient of the boxes' Gaussians:
    D_B = 1/8 (mu_p - mu_gt)^T Sigma^-1 (mu_p - mu_gt) + 1/2 ln(det Sigma / sqrt(det Sigma_p det Sigma_gt)),
    Sigma = (Sigma_p + Sigma_gt) / 2; the covariances are diagonal, so D_B is the sum of its two axes."""
    px, py, psx, psy = _gaussian(pred, alpha)
    gx, gy, gsx, gsy = _gaussian(gt, alpha)
    return math.exp(-(_bhattacharyya_1d(px, psx, gx, gsx) + _bhattacharyya_1d(py, psy, gy, gsy)))


def score_completions(read_truth: Callable, read_pred: Callable, score: Callable, completions, solution,
                      image_sizes, input_sizes, coord_system) -> list[Optional[float]]:
    """``score(pred, truth)`` per completion, with ``truth = read_truth(solution, image_sizes)`` (None: the sample
    has no solution, the score is None) and ``pred = read_pred(text, coord_system, image_sizes, input_sizes)``
    in original pixels (None: unreadable, the score is 0.0)."""
    scores = []
    for text, sol, sizes, in_sizes, system in zip(completions, solution, image_sizes, input_sizes, coord_system):
        truth = read_truth(sol, sizes)
        if truth is None:
            scores.append(None)
            continue
        pred = read_pred(text, system, sizes, in_sizes)
        scores.append(0.0 if pred is None else score(pred, truth))
    return scores


single_box_scores = partial(score_completions, truth_box, predicted_box_in_pixels)  # (score, completions, ...)


@register("box_format")
def box_format_reward(completions, **_) -> list[float]:
    """R = 1 if a box [x1, y1, x2, y2] of finite numbers (ints or floats) with x1 <= x2 and y1 <= y2 can be read
    from the answer (``<answer>`` content, or the whole text without tags), else 0."""
    return [0.0 if answer_box(text) is None else 1.0 for text in completions]


@register("iou")
def iou_reward(completions, solution, image_sizes, input_sizes, coord_system, **_) -> list[float]:
    """R = IoU(pred, gt), pred mapped to original pixels; 0 when no box [x1, y1, x2, y2] can be read."""
    return single_box_scores(box_iou, completions, solution, image_sizes, input_sizes, coord_system)


@register("iou_accuracy")
def iou_accuracy_reward(completions, solution, image_sizes, input_sizes, coord_system, threshold=0.5,
                        **_) -> list[float]:
    """R = 1 if IoU(pred, gt) > threshold (default 0.5) else 0, IoU as in ``iou``."""
    scores = iou_reward(completions, solution, image_sizes, input_sizes, coord_system)
    return [None if s is None else float(s > threshold) for s in scores]


@register("gaussian_point")
def gaussian_point_reward(completions, solution, image_sizes, input_sizes, coord_system, alpha=0.5,
                          **_) -> list[float]:
    """GUI-G2 point reward R = exp(-1/2 ((cx_p - cx_gt)^2 / sigma_x^2 + (cy_p - cy_gt)^2 / sigma_y^2)),
    sigma = alpha * the true box's width / height (one-pixel floor), (cx_p, cy_p) the predicted box's centre
    in original pixels; 0 when no box can be read."""
    pair = partial(point_score, alpha=check_alpha(alpha))
    return single_box_scores(pair, completions, solution, image_sizes, input_sizes, coord_system)


@register("gaussian_plane")
def gaussian_plane_reward(completions, solution, image_sizes, input_sizes, coord_system, alpha=0.5,
                          **_) -> list[float]:
    """GUI-G2 coverage reward R = exp(-D_B), D_B the Bhattacharyya distance between the Gaussians of the predicted
    and true boxes (see ``plane_score``; sigma = alpha * side, one-pixel floor); 0 when no box can be read."""
    pair = partial(plane_score, alpha=check_alpha(alpha))
    return single_box_scores(pair, completions, solution, image_sizes, input_sizes, coord_system)
