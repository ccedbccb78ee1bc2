"""A synthetic task where cropping helps: name the fine pattern of a small framed square on a large canvas.

Each canvas (448 x 448 by default) holds a few plain coloured shapes and one small square with a red frame whose
inside is black-and-white horizontal stripes, vertical stripes, a checkerboard, or plain mid-grey, all 2-pixel
detail at the same mean brightness. At the tiny models' input resolution (``max_pixels`` 112 x 112: a quarter of
each side) the processor's resize averages the detail away, so the four look alike and only the red frame remains
to find; a crop around the square, seen at its own resolution, shows the pattern. ``tests/test_synthetic_zoom.py``
measures both through the processor.

The answer is the pattern's name, scored by ``all_match`` (the ``<answer>`` content equal to the solution after
normalising case and spaces). Each sample also carries a scripted ideal ``episode`` for SFT warm starts: a crop
call around the square in the model's coordinate system, the result the built-in ``crop`` tool gives for that call
(its text, and its image written here: the GRPO rollout's tool makes the same), then the answer.
"""
from __future__ import annotations

import os
from typing import Optional

import numpy as np
from PIL import Image, ImageDraw

from ..models.coords import box_from_original
from ..models.resize import Resizer
from ..tools.builtins import ToolContext, crop
from ..data.episodes import tool_call_text
from ..data.records import write_jsonl

PATTERNS = ("horizontal", "vertical", "checkered", "plain")
ZOOM_QUESTION = ("Crop around the small square with the red frame, then name its pattern: horizontal, vertical, "
                 "checkered or plain.")
FRAME_COLOR = (220, 30, 30)
DISTRACTOR_COLORS = ((30, 170, 60), (40, 60, 220), (230, 210, 40))
BACKGROUND = (245, 245, 245)
TINY_RESIZER = Resizer(factor=28, min_pixels=56 * 56, max_pixels=112 * 112, coord_system="abs_resized")
DEFAULT_ANSWER_TEXT = "<think> </think><answer>{Answer}</answer>"  # SFT's default answer_template


def pattern_pixels(pattern: str, side: int, stripe: int = 2) -> np.ndarray:
    """A ``side`` x ``side`` grey image (uint8) of ``pattern``: black and white bands ``stripe`` pixels wide, or
    plain mid-grey (their mean)."""
    y, x = np.mgrid[0:side, 0:side] // stripe
    bands = {"horizontal": y % 2, "vertical": x % 2, "checkered": (x + y) % 2}
    if pattern == "plain":
        return np.full((side, side), 128, dtype=np.uint8)
    if pattern not in bands:
        raise ValueError(f"unknown pattern {pattern!r} (known: {', '.join(PATTERNS)})")
    return (bands[pattern] * 255).astype(np.uint8)


def _free_box(rng, width: int, height: int, side: int, taken: list) -> list[int]:
    """A square of ``side`` pixels that does not overlap ``taken`` (best effort after 100 tries)."""
    for _ in range(100):
        x1, y1 = int(rng.integers(0, width - side)), int(rng.integers(0, height - side))
        box = [x1, y1, x1 + side, y1 + side]
        if all(box[2] <= t[0] or t[2] <= box[0] or box[3] <= t[1] or t[3] <= box[1] for t in taken):
            return box
    return box


def crop_box_around(box, side: int, width: int, height: int) -> list[int]:
    """A ``side``-pixel square centred on ``box``, moved inside the canvas."""
    cx, cy = (box[0] + box[2]) // 2, (box[1] + box[3]) // 2
    x1 = min(max(cx - side // 2, 0), width - side)
    y1 = min(max(cy - side // 2, 0), height - side)
    return [x1, y1, x1 + side, y1 + side]


def _check_cells(cells: int, size: tuple, framed: int, crop_side: Optional[int]) -> None:
    width, height = size
    if crop_side is not None:
        raise ValueError("make_synthetic_zoom: crop_side and cells exclude each other (with cells the scripted crop "
                         "is the target's cell)")
    if not isinstance(cells, int) or cells < 1 or width % cells or height % cells:
        raise ValueError(f"make_synthetic_zoom: cells={cells!r} must be a positive whole number dividing the canvas "
                         f"size {width} x {height}")
    if min(width, height) // cells < framed:
        raise ValueError(f"make_synthetic_zoom: cells={cells} makes cells of {width // cells} x {height // cells} "
                         f"pixels, smaller than the {framed}-pixel framed square")


def _place_target(rng, size: tuple, framed: int, crop_side: int, cells: Optional[int]) -> tuple[list, list]:
    """The framed square's box and the region the scripted call crops, in original pixels. Without ``cells``: the
    square anywhere, the crop a ``crop_side``-pixel square around it. With ``cells``: the square centred in a
    random cell of a ``cells`` x ``cells`` grid over the canvas, the crop that cell."""
    width, height = size
    if cells is None:
        target = _free_box(rng, width, height, framed, [])
        return target, crop_box_around(target, crop_side, width, height)
    cell_width, cell_height = width // cells, height // cells
    column, row = int(rng.integers(cells)), int(rng.integers(cells))
    x1 = column * cell_width + (cell_width - framed) // 2
    y1 = row * cell_height + (cell_height - framed) // 2
    cell = [column * cell_width, row * cell_height, (column + 1) * cell_width, (row + 1) * cell_height]
    return [x1, y1, x1 + framed, y1 + framed], cell


def _cell_question(cell: list, size: tuple, cells: int) -> str:
    """The question naming the framed square's cell, rows and columns counted from 1 at the top left."""
    row, column = cell[1] // (size[1] // cells) + 1, cell[0] // (size[0] // cells) + 1
    return ZOOM_QUESTION.replace("the small square", f"the small square in row {row}, column {column}")


def make_synthetic_zoom(out_dir: str, num_samples: int = 32, seed: int = 0, size: tuple = (448, 448),
                        patch: int = 24, frame: int = 3, crop_side: Optional[int] = None, distractors: int = 3,
                        coord_system: Optional[str] = None, resizer: Resizer = TINY_RESIZER,
                        answer_template: str = DEFAULT_ANSWER_TEXT, cells: Optional[int] = None,
                        cell_hint: bool = False) -> str:
    """Write ``num_samples`` canvases (``images/``), the crops of their ideal episodes (``crops/``) and
    ``zoom.jsonl``; return its path.

    A row: ``{"images", "problem", "solution": pattern name, "reward_method": "all_match", "target_box": the
    framed square in original pixels, "episode": [crop call, crop result, answer]}``. The crop call's box is a
    ``crop_side``-pixel (default 56) square around the framed square, in ``coord_system`` (default: the resizer's
    family's) over the input size ``resizer`` gives the canvas, rounded to whole units; the answer is
    ``answer_template`` with ``{Answer}`` = the pattern.

    ``cells`` (instead of ``crop_side``): the canvas is a ``cells`` x ``cells`` grid, the framed square lies centred
    in one cell (distractors anywhere, not over it) and the call crops exactly that cell, one of ``cells ** 2``
    boxes. With ``cells=4`` on the 448-pixel canvas a cell is 112 pixels, 28 at the tiny models' 112 x 112 input: one
    merged 2 x 2 patch vision token of the tiny Qwen2.5-VL, so where to crop is which token shows the red frame, not
    a box to regress to the pixel. Centred, as the default crop is centred on the square: placed anywhere in its
    cell, the tiny model's SFT read the pattern in the cell's crop at chance (benchmarks/tool_learning.py, in
    docs/reference.md).

    ``cell_hint`` (with ``cells``): the question names the square's cell ("the small square in row 3, column 1"), so
    where to crop is read from the words, not found in the image. The tiny model from scratch does not learn to find
    the square's token: after SFT it crops the same cell whatever the canvas (benchmarks/tool_learning.py).
    """
    if cell_hint and cells is None:
        raise ValueError("make_synthetic_zoom: cell_hint names the square's cell and needs cells")
    if cells is not None:
        _check_cells(cells, size, patch + 2 * frame, crop_side)
    crop_side = 56 if crop_side is None else crop_side
    coord_system = coord_system or resizer.coord_system or "abs_resized"
    width, height = size
    input_size = resizer.input_size(size)
    rng = np.random.default_rng(seed)
    for folder in ("images", "crops"):
        os.makedirs(os.path.join(out_dir, folder), exist_ok=True)
    framed = patch + 2 * frame
    rows = []
    for i in range(num_samples):
        canvas = Image.new("RGB", size, BACKGROUND)
        draw = ImageDraw.Draw(canvas)
        target, cut = _place_target(rng, size, framed, crop_side, cells)
        taken = [target]
        for _ in range(distractors):
            box = _free_box(rng, width, height, int(rng.integers(framed, 3 * framed)), taken)
            taken.append(box)
            draw.rectangle(box, fill=DISTRACTOR_COLORS[int(rng.integers(len(DISTRACTOR_COLORS)))])
        pattern = PATTERNS[int(rng.integers(len(PATTERNS)))]
        draw.rectangle([target[0], target[1], target[2] - 1, target[3] - 1], fill=FRAME_COLOR)
        canvas.paste(Image.fromarray(pattern_pixels(pattern, patch)).convert("RGB"),
                     (target[0] + frame, target[1] + frame))
        # the call names a box in the model's units; the tool crops what that box maps back to
        call_box = [int(round(v)) for v in box_from_original(cut, coord_system, size, input_size)]
        name = f"zoom_{i:05d}.png"
        canvas.save(os.path.join(out_dir, "images", name))
        arguments = {"bbox_2d": call_box}
        result_text, (cropped,) = crop(arguments, ToolContext([canvas], [size], [input_size], coord_system))
        cropped.save(os.path.join(out_dir, "crops", name))
        rows.append({
            "images": [f"images/{name}"],  # relative to this jsonl's folder
            "problem": _cell_question(cut, size, cells) if cell_hint else ZOOM_QUESTION,
            "solution": pattern,
            "reward_method": "all_match",
            "target_box": target,
            "episode": [
                {"role": "assistant", "text": tool_call_text("crop", arguments)},
                {"role": "tool", "name": "crop", "arguments": arguments,
                 "text": result_text, "images": [f"crops/{name}"]},
                {"role": "assistant", "text": answer_template.replace("{Answer}", pattern)},
            ],
        })
    return write_jsonl(out_dir, "zoom.jsonl", rows)
