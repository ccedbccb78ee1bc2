"""REC pictures: the predicted box in red, the true box in green, drawn on the original image."""
from __future__ import annotations

import os

from PIL import ImageDraw

from ..data.images import load_image


def draw_rec_results(results: list[dict], out_dir: str, count: int) -> list[str]:
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for i, row in enumerate(results[:count]):
        img = load_image(row["image"])
        draw = ImageDraw.Draw(img)
        width = max(2, min(img.size) // 150)
        draw.rectangle(row["ground_truth"], outline=(0, 200, 0), width=width)
        if row["prediction"]:
            draw.rectangle(row["prediction"], outline=(230, 0, 0), width=width)
        verdict = "correct" if row["correct"] else "wrong"
        path = os.path.join(out_dir, f"{i:04d}_{verdict}.png")
        img.save(path)
        written.append(path)
    return written
