"""Synthetic tasks drawn with PIL: coloured shapes on a plain background, seeded (same arguments, same files).

- ``rec``: "Locate the red square in the image." -> its box in original pixels (two shapes, one target).
- ``counting``: "How many shapes are there?" -> an integer (1 to 4 shapes by default, each in its own grid cell).
- ``ocr_lines``, ``ocr_tables``: rendered text lines and small tables for PaddleOCR-VL (``ocr.py``).
- ``zoom``: name the fine pattern of a small framed square on a large canvas, with a scripted crop episode for
  SFT (``zoom.py``; multi-turn tool use).
- ``temporal``: clips in which a red circle appears for a while -> its span in seconds (``clips.py``;
  temporal grounding).
- ``video_count``: clips in which a red circle flashes 1 to 3 times -> the count (``clips.py``; Video-R1's
  numerical questions).

The demo, the tests and ``benchmarks/learning.py`` share them. ``make_synthetic_splits`` writes a training set
and a held-out set from different seeds into separate folders, for measuring what training generalises to.
"""
from __future__ import annotations

import os

import numpy as np
from PIL import Image, ImageDraw

from ..data.records import write_jsonl
from .clips import make_synthetic_temporal, make_synthetic_video_count
from .ocr import make_synthetic_ocr_lines, make_synthetic_ocr_tables
from .zoom import make_synthetic_zoom

BUILTIN_DATASETS = ("synthetic_rec", "synthetic_zoom")  # the config key dataset_name's values
COLORS = {"red": (220, 30, 30), "green": (30, 170, 60), "blue": (40, 60, 220), "yellow": (230, 210, 40)}
SHAPES = ("square", "circle")
BACKGROUND = (245, 245, 245)
COUNTING_QUESTION = "How many shapes are there?"
HELDOUT_SEED_OFFSET = 10_000  # held-out images come from seed + this: never the training seed for seeds below it


def _draw(draw: ImageDraw.ImageDraw, shape: str, box, color) -> None:
    if shape == "square":
        draw.rectangle(box, fill=color)
    else:
        draw.ellipse(box, fill=color)


def _place(rng, width, height, taken):
    """A box of side 20-45% of the shorter side that does not overlap ``taken`` (best effort)."""
    for _ in range(50):
        side = int(rng.integers(int(0.2 * min(width, height)), int(0.45 * min(width, height))))
        x1, y1 = int(rng.integers(0, width - side)), int(rng.integers(0, height - side))
        box = [x1, y1, x1 + side, y1 + side]
        if all(box[2] <= t[0] or t[2] <= box[0] or box[3] <= t[1] or t[3] <= box[1] for t in taken):
            return box
    return box


def make_synthetic_rec(out_dir: str, num_samples: int = 32, seed: int = 0,
                       sizes=((112, 112), (140, 112), (112, 84))) -> str:
    """Write ``num_samples`` images and ``rec.jsonl`` ({image, problem, solution}); return the jsonl path."""
    rng = np.random.default_rng(seed)
    image_dir = os.path.join(out_dir, "images")
    os.makedirs(image_dir, exist_ok=True)
    color_names = list(COLORS)
    lines = []
    for i in range(num_samples):
        width, height = sizes[i % len(sizes)]
        img = Image.new("RGB", (width, height), BACKGROUND)
        draw = ImageDraw.Draw(img)
        target_color = color_names[int(rng.integers(len(color_names)))]
        target_shape = SHAPES[int(rng.integers(len(SHAPES)))]
        target_box = _place(rng, width, height, [])
        distractor_color = color_names[(color_names.index(target_color) + 1 + int(rng.integers(3))) % 4]
        distractor_box = _place(rng, width, height, [target_box])
        _draw(draw, SHAPES[int(rng.integers(len(SHAPES)))], distractor_box, COLORS[distractor_color])
        _draw(draw, target_shape, target_box, COLORS[target_color])
        name = f"shape_{i:05d}.png"
        img.save(os.path.join(image_dir, name))
        lines.append({
            "image": f"images/{name}",  # relative to this jsonl's folder
            "problem": f"Locate the {target_color} {target_shape} in the image.",
            "solution": target_box,
            "normal_caption": f"a {target_color} {target_shape}",
        })
    return write_jsonl(out_dir, "rec.jsonl", lines)


def make_synthetic_counting(out_dir: str, num_samples: int = 32, seed: int = 0, counts=(1, 2, 3, 4),
                            sizes=((112, 112),), cell: int = 28) -> str:
    """Write ``num_samples`` images of ``counts[k]`` shapes (k uniform; colours, kinds and sides random) and
    ``counting.jsonl`` ({image, problem, solution: int, reward_method: counting}, read as the ``r1v`` format);
    return the jsonl path.

    Each shape sits inside its own cell of a ``cell``-pixel grid, so shapes never overlap or touch. With the
    default 28 pixels a cell is what one Qwen-VL vision token sees (14-pixel patches merged 2x2) at the tiny
    models' resolution, which keeps the task learnable for a model trained from scratch on CPU.
    """
    rng = np.random.default_rng(seed)
    image_dir = os.path.join(out_dir, "images")
    os.makedirs(image_dir, exist_ok=True)
    color_names = list(COLORS)
    lines = []
    for i in range(num_samples):
        width, height = sizes[i % len(sizes)]
        columns, rows = width // cell, height // cell
        count = int(counts[int(rng.integers(len(counts)))])
        if count > columns * rows:
            raise ValueError(f"{count} shapes do not fit a {width}x{height} image in {cell}-pixel cells")
        img = Image.new("RGB", (width, height), BACKGROUND)
        draw = ImageDraw.Draw(img)
        for index in rng.permutation(columns * rows)[:count]:
            side = int(rng.integers(cell // 2, cell - 3))
            x1 = int(index % columns) * cell + int(rng.integers(1, cell - side - 1))
            y1 = int(index // columns) * cell + int(rng.integers(1, cell - side - 1))
            color = COLORS[color_names[int(rng.integers(len(color_names)))]]
            _draw(draw, SHAPES[int(rng.integers(len(SHAPES)))], [x1, y1, x1 + side, y1 + side], color)
        name = f"count_{i:05d}.png"
        img.save(os.path.join(image_dir, name))
        lines.append({"image": f"images/{name}", "problem": COUNTING_QUESTION, "solution": count,
                      "reward_method": "counting"})
    return write_jsonl(out_dir, "counting.jsonl", lines)


SYNTHETIC_TASKS = {"rec": make_synthetic_rec, "counting": make_synthetic_counting,
                   "ocr_lines": make_synthetic_ocr_lines, "ocr_tables": make_synthetic_ocr_tables,
                   "zoom": make_synthetic_zoom, "temporal": make_synthetic_temporal,
                   "video_count": make_synthetic_video_count}


def make_synthetic_splits(out_dir: str, task: str, num_train: int, num_heldout: int, seed: int = 0,
                          **task_options) -> dict[str, str]:
    """``out_dir/train/`` from ``seed`` and ``out_dir/heldout/`` from ``seed + HELDOUT_SEED_OFFSET``, each a
    jsonl with its own images; returns {"train": path, "heldout": path}."""
    if task not in SYNTHETIC_TASKS:
        raise ValueError(f"unknown synthetic task {task!r} (known: {', '.join(SYNTHETIC_TASKS)})")
    make = SYNTHETIC_TASKS[task]
    return {
        "train": make(os.path.join(out_dir, "train"), num_samples=num_train, seed=seed, **task_options),
        "heldout": make(os.path.join(out_dir, "heldout"), num_samples=num_heldout, seed=seed + HELDOUT_SEED_OFFSET,
                        **task_options),
    }
