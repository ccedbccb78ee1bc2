"""A synthetic REC set: coloured shapes drawn with PIL, "Locate the red square ..." with its box.

Used by the demo and the tests; seeded, so the same arguments give the same files.
"""
from __future__ import annotations

import json
import os

import numpy as np
from PIL import Image, ImageDraw

COLORS = {"red": (220, 30, 30), "green": (30, 170, 60), "blue": (40, 60, 220), "yellow": (230, 210, 40)}
SHAPES = ("square", "circle")
BACKGROUND = (245, 245, 245)


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
    path = os.path.join(out_dir, "rec.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
    return path
