"""Synthetic OCR samples drawn with PIL, written as ERNIEKit / PaddleFormers VL-SFT jsonl (PaddleOCR-VL's fine-tuning
format: ``formats.adapt_vl_sft``), seeded (same arguments, same files).

- ``ocr_lines``: a line of text in black on white; the prompt is PaddleOCR-VL's "OCR:", the solution the text.
- ``ocr_tables``: a small ruled table of short cells; the prompt "Table Recognition:", the solution the table in OTSL
  (``<fcel>`` before each cell, ``<nl>`` after each row), as PaddleOCR-VL writes tables.

The text is drawn in DejaVu Sans Mono, the copy matplotlib (a dependency) ships: no system font is needed. Pass
``font`` (a .ttf / .ttc path) for other scripts, e.g. a CJK font from Debian's fonts-wqy-microhei or fonts-noto-cjk
with a CJK ``alphabet``.
"""
from __future__ import annotations

import os
from typing import Optional

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from ..data.records import write_jsonl

DIGITS = "0123456789"
OCR_PROMPT, TABLE_PROMPT = "OCR:", "Table Recognition:"
INK, PAPER = (20, 20, 20), (250, 250, 250)


def default_font() -> str:
    import matplotlib

    return os.path.join(matplotlib.get_data_path(), "fonts", "ttf", "DejaVuSansMono.ttf")


def vl_sft_record(image: str, prompt: str, answer: str) -> dict:
    """One ERNIEKit / PaddleFormers VL-SFT row: the image before the prompt (``mask``: not trained), the answer
    (``no_mask``: trained)."""
    return {"image_info": [{"matched_text_index": 0, "image_url": image}],
            "text_info": [{"text": prompt, "tag": "mask"}, {"text": answer, "tag": "no_mask"}]}


def _random_text(rng: np.random.Generator, alphabet: str, length: tuple[int, int]) -> str:
    return "".join(alphabet[int(i)] for i in rng.integers(len(alphabet), size=int(rng.integers(length[0],
                                                                                                 length[1] + 1))))


def make_synthetic_ocr_lines(out_dir: str, num_samples: int = 32, seed: int = 0, alphabet: str = DIGITS,
                             length: tuple = (2, 4), font: Optional[str] = None, font_size: int = 20,
                             height: int = 28, cell: Optional[int] = None) -> str:
    """``num_samples`` lines of ``length`` characters of ``alphabet`` (bounds inclusive), each in its own image
    ``height`` pixels tall and as wide as the text plus a margin (shifted by a few random pixels), and
    ``ocr_lines.jsonl``; returns the jsonl path. With ``cell`` each character is centred in its own ``cell``-pixel
    column instead and there is no margin: at 28 pixels (and an image processor that does not scale them up) one
    character is what one merged vision token of the tiny models sees, which keeps reading learnable from scratch on
    CPU (``benchmarks/learning.py --task ocr``)."""
    rng = np.random.default_rng(seed)
    face = ImageFont.truetype(font or default_font(), font_size)
    os.makedirs(os.path.join(out_dir, "images"), exist_ok=True)
    rows = []
    for i in range(num_samples):
        text = _random_text(rng, alphabet, length)
        if cell:
            image = Image.new("RGB", (cell * len(text), height), PAPER)
            for k, character in enumerate(text):
                _draw_centred(ImageDraw.Draw(image), character, face, k * cell, 0, cell, height)
        else:
            left, top, right, bottom = face.getbbox(text)
            margin = int(rng.integers(4, 9))
            image = Image.new("RGB", (right - left + 2 * margin, height), PAPER)
            ImageDraw.Draw(image).text((margin - left, (height - (bottom - top)) // 2 - top), text, font=face,
                                       fill=INK)
        name = f"images/line_{i:05d}.png"
        image.save(os.path.join(out_dir, name))
        rows.append(vl_sft_record(name, OCR_PROMPT, text))
    return write_jsonl(out_dir, "ocr_lines.jsonl", rows)


def _draw_centred(draw: ImageDraw.ImageDraw, text: str, face, x: int, y: int, width: int, height: int) -> None:
    left, top, right, bottom = face.getbbox(text)
    draw.text((x + (width - (right - left)) // 2 - left, y + (height - (bottom - top)) // 2 - top), text, font=face,
              fill=INK)


def make_synthetic_ocr_tables(out_dir: str, num_samples: int = 32, seed: int = 0, alphabet: str = DIGITS,
                              length: tuple = (1, 2), shapes=((2, 2), (2, 3), (3, 2)), font: Optional[str] = None,
                              font_size: int = 16, cell: tuple = (42, 28)) -> str:
    """``num_samples`` ruled tables (rows x columns from ``shapes``) of cells ``cell`` pixels wide and tall holding
    ``length`` characters of ``alphabet``, and ``ocr_tables.jsonl`` with the OTSL solutions; returns its path."""
    rng = np.random.default_rng(seed)
    face = ImageFont.truetype(font or default_font(), font_size)
    os.makedirs(os.path.join(out_dir, "images"), exist_ok=True)
    width, height = cell
    rows = []
    for i in range(num_samples):
        n_rows, n_columns = shapes[int(rng.integers(len(shapes)))]
        image = Image.new("RGB", (n_columns * width + 1, n_rows * height + 1), PAPER)
        draw = ImageDraw.Draw(image)
        otsl = []
        for r in range(n_rows):
            for c in range(n_columns):
                text = _random_text(rng, alphabet, length)
                draw.rectangle([c * width, r * height, (c + 1) * width, (r + 1) * height], outline=INK)
                _draw_centred(draw, text, face, c * width, r * height, width, height)
                otsl.append(f"<fcel>{text}")
            otsl.append("<nl>")
        name = f"images/table_{i:05d}.png"
        image.save(os.path.join(out_dir, name))
        rows.append(vl_sft_record(name, TABLE_PROMPT, "".join(otsl)))
    return write_jsonl(out_dir, "ocr_tables.jsonl", rows)
