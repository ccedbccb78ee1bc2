"""Detection rewards via pycocotools: mAP, AP50, mask IoU.

Boxes: the answer is a JSON list of ``{"bbox_2d": [x1, y1, x2, y2], "label": str}`` (a single such object
reads as a list of one) in the model's coordinate system; the solution has the same shape (a list, or a JSON
string of one, ```json fences and <answer> tags allowed) in original pixels. The text ``None`` (any case) is the
empty list on either side, as in VLM-R1's od_* methods. An answer with any malformed entry scores 0.0.

Masks: a COCO RLE ``{"size": [h, w], "counts": ...}`` or polygons (a flat list [x1, y1, x2, y2, ...] of at
least three points, or a list of such lists). True polygons are in original pixels; predicted polygons are in
the model's coordinate system and are mapped point by point with ``coords.box_to_original``, like boxes. A
predicted RLE must already be at the original image size [h, w] and use list counts adding up to h * w:
pycocotools trusts RLEs (a compressed string that does not add up makes its IoU loop forever), and only list
counts can be checked without decoding. A predicted polygon vertex farther than one image side outside the
image makes the answer unreadable (it bounds the rasterising work).
"""
from __future__ import annotations

import contextlib
import io
import numbers
from functools import partial
from typing import Optional

from pycocotools import mask as mask_utils
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from ...models.coords import as_box, as_floats, box_to_original, is_number
from ..registry import BadSolution, register
from .boxes import box_iou, score_completions, solution_json, to_pixels
from ..parsing import answer_content, answer_json, answer_text, normalize_answer

Detections = list  # [(label, [x1, y1, x2, y2]), ...]


def _bad_solution(solution, expected: str):
    return BadSolution(f"solution {solution!r} is not {expected}")


# ---- boxes: COCO AP ------------------------------------------------------------------------------------------
def read_detections(value) -> Optional[Detections]:
    """[(label, box)] from a JSON list of {"bbox_2d": [x1, y1, x2, y2], "label": str or number}; None otherwise."""
    items = [value] if isinstance(value, dict) else value
    if not isinstance(items, list):
        return None
    detections = []
    for item in items:
        if not isinstance(item, dict):
            return None
        box, label = as_box(item.get("bbox_2d")), item.get("label")
        if box is None or not isinstance(label, (str, numbers.Real)) or isinstance(label, bool):
            return None
        detections.append((str(label), box))
    return detections


def says_none(text) -> bool:
    """VLM-R1's "no objects" answer and solution: the text None."""
    return isinstance(text, str) and normalize_answer(answer_text(text)) == "none"


def predicted_detections(completion: str, coord_system: str, image_sizes, input_sizes) -> Optional[Detections]:
    """The answer's labelled boxes in original pixels of the first image ([] for None), or None when unreadable."""
    if says_none(answer_content(completion)):
        return []
    detections = read_detections(answer_json(completion))
    if detections is None:
        return None
    mapped = [(label, to_pixels(box, coord_system, image_sizes, input_sizes)) for label, box in detections]
    return None if any(box is None for _, box in mapped) else mapped


def truth_detections(solution, image_sizes=None) -> Optional[Detections]:
    """The solution's labelled boxes ([] for None); None without a solution, BadSolution when malformed.
    ``image_sizes``: unused."""
    if solution is None:
        return None
    if says_none(solution):
        return []
    detections = read_detections(solution_json(solution))
    if detections is None:
        raise _bad_solution(solution, 'a JSON list of {"bbox_2d": [x1, y1, x2, y2], "label": ...}')
    return detections


def _coco_box(box) -> list[float]:
    x1, y1, x2, y2 = box
    return [x1, y1, x2 - x1, y2 - y1]


def coco_stats(pred: Detections, truth: Detections):
    """COCOeval's 12 summary numbers (iouType "bbox") for one image; labels become category ids, and the
    predictions get decreasing scores in answer order (the first box is the most confident). Quiet."""
    category = {label: i + 1 for i, label in enumerate(sorted({label for label, _ in pred + truth}))}
    annotations = [{"id": i + 1, "image_id": 1, "category_id": category[label], "bbox": _coco_box(box),
                    "area": (box[2] - box[0]) * (box[3] - box[1]), "iscrowd": 0}  # ids from 1: COCOeval skips id 0
                   for i, (label, box) in enumerate(truth)]
    results = [{"image_id": 1, "category_id": category[label], "bbox": _coco_box(box), "score": float(len(pred) - i)}
               for i, (label, box) in enumerate(pred)]
    with contextlib.redirect_stdout(io.StringIO()):
        coco_truth = COCO()
        coco_truth.dataset = {"images": [{"id": 1}], "annotations": annotations,
                              "categories": [{"id": i} for i in category.values()]}
        coco_truth.createIndex()
        evaluation = COCOeval(coco_truth, coco_truth.loadRes(results), "bbox")
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    return evaluation.stats


def average_precision(pred: Detections, truth: Detections, stat: int = 0) -> float:
    """COCO stat ``stat`` (0: AP@[.5:.95], 1: AP50); 1.0 when both are empty, 0.0 when either is, and -1 (no
    true box in any category) read as 0.0."""
    if not pred or not truth:
        return float(not pred and not truth)
    return max(float(coco_stats(pred, truth)[stat]), 0.0)


def _ap_rewards(stat: int, completions, solution, image_sizes, input_sizes, coord_system) -> list:
    return score_completions(truth_detections, predicted_detections, partial(average_precision, stat=stat),
                             completions, solution, image_sizes, input_sizes, coord_system)


@register("map")
def map_reward(completions, solution, image_sizes, input_sizes, coord_system, **_) -> list[float]:
    """R = COCO AP@[.5:.95] (pycocotools, bbox) of the answer's [{"bbox_2d", "label"}] against the solution's,
    answer order as confidence; 1 when both are empty, 0 when only one is or the answer is unreadable."""
    return _ap_rewards(0, completions, solution, image_sizes, input_sizes, coord_system)


@register("map50")
def map50_reward(completions, solution, image_sizes, input_sizes, coord_system, **_) -> list[float]:
    """R = COCO AP at IoU 0.5 (pycocotools, bbox), otherwise as ``map``."""
    return _ap_rewards(1, completions, solution, image_sizes, input_sizes, coord_system)


def length_factor(pred: Detections, truth: Detections) -> float:
    """1 when the answer has no more boxes than the solution, else n_true / n_pred."""
    return 1.0 if len(pred) <= len(truth) else len(truth) / len(pred)


@register("odLength")
def od_length_reward(completions, solution, image_sizes, input_sizes, coord_system, **_) -> list[float]:
    """VLM-R1's odLength: R = AP@[.5:.95] (as ``map``) * (1 if n_pred <= n_true else n_true / n_pred): extra boxes
    are paid for even when AP does not see them; 1 when both are empty (None / None)."""
    return score_completions(truth_detections, predicted_detections,
                             lambda pred, truth: average_precision(pred, truth) * length_factor(pred, truth),
                             completions, solution, image_sizes, input_sizes, coord_system)


def greedy_matches(pred: Detections, truth: Detections, iou_threshold: float) -> list[tuple[int, int, float]]:
    """VLM-R1's matching: repeatedly the unmatched (pred, true) pair of highest IoU (ties: lowest indices), until
    the best left is below ``iou_threshold``; (pred index, true index, IoU) per pair."""
    pairs = sorted(((-box_iou(p, t), i, j) for i, (_, p) in enumerate(pred) for j, (_, t) in enumerate(truth)))
    used_pred, used_truth, matches = set(), set(), []
    for negative_iou, i, j in pairs:
        if -negative_iou < iou_threshold:
            break
        if i not in used_pred and j not in used_truth:
            used_pred.add(i)
            used_truth.add(j)
            matches.append((i, j, -negative_iou))
    return matches


def weighted_detection_score(pred: Detections, truth: Detections, iou_threshold: float, alpha: float,
                             beta: float, gamma: float) -> float:
    """R = (alpha * position + beta * label + gamma * completeness) / (alpha + beta + gamma) over ``greedy_matches``:
    position = sum of matched IoUs whose labels agree (case-insensitive) / n_true, label = matched pairs whose
    labels agree / n_true, completeness = 1 - (unmatched true / n_true + unmatched pred / n_pred) / 2.
    n_true = 0: 1 if n_pred = 0 else 0; n_pred = 0: 0."""
    if not truth or not pred:
        return float(not truth and not pred)
    matches = greedy_matches(pred, truth, iou_threshold)
    agree = [iou for i, j, iou in matches if pred[i][0].lower() == truth[j][0].lower()]
    position, label = sum(agree) / len(truth), len(agree) / len(truth)
    completeness = 1.0 - ((len(truth) - len(matches)) / len(truth) + (len(pred) - len(matches)) / len(pred)) / 2.0
    return (alpha * position + beta * label + gamma * completeness) / (alpha + beta + gamma)


def check_weights(iou_threshold, alpha, beta, gamma) -> dict:
    """The weighted_sum settings as floats; ValueError naming the setting that is out of range."""
    for name, value in (("iou_threshold", iou_threshold), ("alpha", alpha), ("beta", beta), ("gamma", gamma)):
        if not (is_number(value) and 0.0 <= value and (value <= 1.0 or name != "iou_threshold")):
            raise ValueError(f"reward keyword {name}={value!r}: expected a number >= 0"
                             + (" and <= 1" if name == "iou_threshold" else ""))
    if alpha + beta + gamma <= 0:
        raise ValueError("reward keywords alpha, beta, gamma: their sum must be positive")
    return dict(iou_threshold=float(iou_threshold), alpha=float(alpha), beta=float(beta), gamma=float(gamma))


@register("weighted_sum")
def weighted_sum_reward(completions, solution, image_sizes, input_sizes, coord_system, iou_threshold=0.5,
                        alpha=0.7, beta=0.0, gamma=0.3, **_) -> list[float]:
    """VLM-R1's weighted_sum detection score: R = (alpha * position + beta * label + gamma * completeness) /
    (alpha + beta + gamma), see ``weighted_detection_score``; settings iou_threshold 0.5, alpha 0.7, beta 0.0,
    gamma 0.3 (VLM-R1's). IoU is the continuous one (VLM-R1 counted inclusive pixels); None / None scores 1."""
    score = partial(weighted_detection_score, **check_weights(iou_threshold, alpha, beta, gamma))
    return score_completions(truth_detections, predicted_detections, score, completions, solution, image_sizes,
                             input_sizes, coord_system)


# ---- masks --------------------------------------------------------------------------------------------------
def read_polygons(value) -> Optional[list[list[float]]]:
    """A flat polygon [x1, y1, x2, y2, ...] or a list of them (each at least 3 points, finite numbers) as lists
    of floats; [] is no polygon (an empty mask); None otherwise."""
    if isinstance(value, list) and value and not isinstance(value[0], list):
        value = [value]
    if not isinstance(value, list):
        return None
    polygons = [as_floats(polygon) for polygon in value]
    if any(p is None or len(p) < 6 or len(p) % 2 for p in polygons):
        return None
    return polygons


def _map_polygon(polygon: list[float], coord_system: str, image_size, input_size) -> list[float]:
    """A flat polygon mapped to original pixels, each point (x, y) as the box [x, y, x, y]."""
    points = (box_to_original([x, y, x, y], coord_system, image_size, input_size)[:2]
              for x, y in zip(polygon[::2], polygon[1::2]))
    return [v for point in points for v in point]


def _polygons_rle(polygons: list[list[float]], height: int, width: int) -> Optional[dict]:
    """The union of the polygons as one RLE; None when a vertex lies more than one image side outside."""
    inside = all(-width <= x <= 2 * width and -height <= y <= 2 * height
                 for p in polygons for x, y in zip(p[::2], p[1::2]))
    if not inside:
        return None
    if not polygons:
        return mask_utils.frPyObjects({"size": [height, width], "counts": [height * width]}, height, width)
    return mask_utils.merge(mask_utils.frPyObjects(polygons, height, width))


def _rle(value: dict, height: int, width: int, trusted: bool) -> Optional[dict]:
    """A COCO RLE of size [height, width]: list counts adding up to height * width, or (``trusted`` only) a
    compressed string; None otherwise."""
    size, counts = value.get("size"), value.get("counts")
    if not isinstance(size, (list, tuple)) or list(size) != [height, width]:
        return None
    if trusted and isinstance(counts, (str, bytes)):
        return {"size": [height, width], "counts": counts.encode() if isinstance(counts, str) else counts}
    if not (isinstance(counts, list) and all(isinstance(c, numbers.Integral) and not isinstance(c, bool)
                                             and c >= 0 for c in counts) and sum(counts) == height * width):
        return None
    return mask_utils.frPyObjects({"size": [height, width], "counts": counts}, height, width)


def _mask(value, height: int, width: int, trusted: bool, to_original=None) -> Optional[dict]:
    """A JSON mask (RLE dict or polygons) as an RLE of size [height, width], polygons first mapped by
    ``to_original``; None when unreadable."""
    if isinstance(value, dict):
        return _rle(value, height, width, trusted)
    polygons = read_polygons(value)
    if polygons is None:
        return None
    return _polygons_rle([to_original(p) for p in polygons] if to_original else polygons, height, width)


def predicted_mask(completion: str, coord_system: str, image_sizes, input_sizes) -> Optional[dict]:
    """The answer's mask as an RLE at the original size of the first image, or None when unreadable."""
    width, height = map(int, image_sizes[0])
    to_original = partial(_map_polygon, coord_system=coord_system, image_size=image_sizes[0],
                          input_size=input_sizes[0] if input_sizes else None)
    return _mask(answer_json(completion), height, width, trusted=False, to_original=to_original)


def truth_mask(solution, image_sizes) -> Optional[dict]:
    """The solution's mask (RLE or polygons in original pixels) as an RLE; None without a solution,
    BadSolution when malformed."""
    if solution is None:
        return None
    width, height = map(int, image_sizes[0])
    rle = _mask(solution_json(solution), height, width, trusted=True)
    if rle is None:
        raise _bad_solution(solution, f"a COCO RLE of size [{height}, {width}] or polygons inside the image")
    return rle


def mask_iou(pred: dict, truth: dict) -> float:
    """|pred & truth| / |pred | truth| by pycocotools; 1.0 when both masks are empty."""
    if not mask_utils.area(pred) and not mask_utils.area(truth):
        return 1.0
    return max(float(mask_utils.iou([pred], [truth], [0])[0][0]), 0.0)


@register("mask_iou")
def mask_iou_reward(completions, solution, image_sizes, input_sizes, coord_system, **_) -> list[float]:
    """R = |M_pred & M_gt| / |M_pred | M_gt| (pycocotools), masks as COCO RLE or polygons, predicted polygons
    mapped from the model's coordinates; 1 when both are empty, 0 when the answer is unreadable."""
    return score_completions(truth_mask, predicted_mask, mask_iou, completions, solution, image_sizes,
                             input_sizes, coord_system)
