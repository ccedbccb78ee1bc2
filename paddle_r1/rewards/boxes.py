"""Box rewards. Predictions are mapped from the model's coordinate system to original-image pixels
(``paddle_r1.models.coords``) before they are compared with the solution."""
from __future__ import annotations

from ..models.coords import box_to_original
from . import register
from .parsing import answer_text, parse_box


def box_iou(a, b) -> float:
    """Intersection over union of two [x1, y1, x2, y2] boxes; 0 when the union is empty."""
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def predicted_box_in_pixels(completion: str, coord_system: str, image_sizes, input_sizes):
    """The answer's box in original pixels of the sample's first image, or None."""
    box = parse_box(answer_text(completion))
    if box is None:
        return None
    input_size = input_sizes[0] if input_sizes else None
    return box_to_original(box, coord_system, image_sizes[0], input_size)


@register("iou")
def iou_reward(completions, solution, image_sizes, input_sizes, coord_system, **_) -> list[float]:
    """R = IoU(pred, gt), pred mapped to original pixels; 0 when no box [x1, y1, x2, y2] can be read."""
    scores = []
    for text, gt, sizes, in_sizes, system in zip(completions, solution, image_sizes, input_sizes, coord_system):
        pred = predicted_box_in_pixels(text, system, sizes, in_sizes)
        scores.append(0.0 if pred is None else box_iou(pred, gt))
    return scores
