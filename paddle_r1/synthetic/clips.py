"""Synthetic clips a tiny model learns from on CPU: temporal grounding and counting over time.

- ``temporal``: "when does the red circle appear?" A red circle appears at one random place for a random run of
  whole frame pairs and is gone before and after; the true span [start, end] is in whole seconds, the pairs the
  circle is in. Rows are Charades-STA layout ({video, duration, timestamp, sentence}, the ``temporal_grounding``
  format) and score with ``temporal_iou``.
- ``video_count``: "how many times does the red circle flash?" The circle flashes N times, each flash one frame
  pair, never two flashes in neighbouring pairs (so each is one flash, seen going off between them). Every flash is
  the same picture, a large circle at the centre: with circles of random place and size the tiny model's SFT
  answered "1" to most clips, and GRPO raised its held-out score little (docs/reference.md). Rows are Video-R1's json
  (``problem_type`` numerical, the ``video_r1`` format) and score with ``video_r1_accuracy`` (the count exactly).

Each clip is ``frames`` frames at ``fps`` (MPEG-4 in MP4, written by PyAV) of a plain background. Qwen-VL towers join
frames in pairs (the temporal patch), so at the readers' default 2 fps every pair is one second and one time step of
vision tokens.
"""
from __future__ import annotations

import os

import numpy as np
from PIL import Image, ImageDraw

from ..data.records import write_jsonl
from ..data.video import TEMPORAL_PATCH

EVENT = "the red circle appears"
COUNT_QUESTION = "How many times does the red circle flash?"
CIRCLE = (220, 30, 30)
BACKGROUND = (245, 245, 245)


def _pairs_of(frames: int, least: int) -> int:
    """The frame pairs of a clip of ``frames`` frames; a ValueError unless that is a whole number, at least
    ``least``."""
    pairs = frames // TEMPORAL_PATCH
    if frames % TEMPORAL_PATCH or pairs < least:
        raise ValueError(f"frame_counts: {frames} is not an even count of at least {TEMPORAL_PATCH * least} frames")
    return pairs


def _circle_frame(rng, size: int) -> np.ndarray:
    """A ``size`` x ``size`` frame with the red circle of radius size/4 to size/3 at a random place inside it."""
    radius = int(rng.integers(size // 4, size // 3))
    x, y = (int(v) for v in rng.integers(radius, size - radius, 2))
    shown = Image.new("RGB", (size, size), BACKGROUND)
    ImageDraw.Draw(shown).ellipse([x - radius, y - radius, x + radius, y + radius], fill=CIRCLE)
    return np.asarray(shown)


def _write_clip(path: str, pictures: list, fps: float) -> None:
    """``pictures`` (RGB arrays of one size) as an MPEG-4 clip at ``fps``."""
    import av

    height, width = pictures[0].shape[:2]
    with av.open(path, "w") as container:
        stream = container.add_stream("mpeg4", rate=int(fps))
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for picture in pictures:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(picture, format="rgb24")))
        container.mux(stream.encode())


def make_synthetic_temporal(out_dir: str, num_samples: int = 32, seed: int = 0, frame_counts=(8,), fps: float = 2.0,
                            size: int = 56) -> str:
    """Write ``num_samples`` clips (their frame count drawn from ``frame_counts``, each a multiple of 2) and
    ``temporal.jsonl``; return its path. The circle spans 1 to all but one of the clip's frame pairs, at random."""
    rng = np.random.default_rng(seed)
    clip_dir = os.path.join(out_dir, "clips")
    os.makedirs(clip_dir, exist_ok=True)
    rows = []
    for i in range(num_samples):
        frames = int(frame_counts[int(rng.integers(len(frame_counts)))])
        pairs = _pairs_of(frames, 2)
        length = int(rng.integers(1, pairs))
        first = int(rng.integers(0, pairs - length + 1))
        shown, empty = _circle_frame(rng, size), np.asarray(Image.new("RGB", (size, size), BACKGROUND))
        name = f"clip_{i:05d}.mp4"
        _write_clip(os.path.join(clip_dir, name),
                    [shown if first <= k // TEMPORAL_PATCH < first + length else empty for k in range(frames)], fps)
        seconds = TEMPORAL_PATCH / fps
        rows.append({"video": f"clips/{name}", "duration": frames / fps, "sentence": EVENT,
                     "timestamp": [first * seconds, (first + length) * seconds]})
    return write_jsonl(out_dir, "temporal.jsonl", rows)


def flash_pairs(rng, pairs: int, count: int) -> list[int]:
    """``count`` of ``pairs`` frame pairs, no two neighbours, uniform over all such choices: ``count`` sorted
    picks from ``pairs - count + 1`` slots, the k-th moved k pairs on (which leaves a gap after each)."""
    slots = sorted(int(s) for s in rng.choice(pairs - count + 1, size=count, replace=False))
    return [slot + k for k, slot in enumerate(slots)]


def make_synthetic_video_count(out_dir: str, num_samples: int = 32, seed: int = 0, counts=(1, 2, 3),
                               frame_counts=(12,), fps: float = 2.0, size: int = 56) -> str:
    """Write ``num_samples`` clips and ``video_count.jsonl`` (Video-R1 rows, numerical); return its path. A clip's
    count is drawn from ``counts`` and its frame count from ``frame_counts`` (even), each uniform and apart, so the
    length says nothing of the count; the flashes' pairs are ``flash_pairs``'."""
    rng = np.random.default_rng(seed)
    clip_dir = os.path.join(out_dir, "clips")
    os.makedirs(clip_dir, exist_ok=True)
    empty, flash = Image.new("RGB", (size, size), BACKGROUND), Image.new("RGB", (size, size), BACKGROUND)
    radius = 3 * size // 8
    ImageDraw.Draw(flash).ellipse([size // 2 - radius, size // 2 - radius, size // 2 + radius, size // 2 + radius],
                                  fill=CIRCLE)
    empty, flash = np.asarray(empty), np.asarray(flash)
    rows = []
    for i in range(num_samples):
        count = int(counts[int(rng.integers(len(counts)))])
        frames = int(frame_counts[int(rng.integers(len(frame_counts)))])
        pairs = _pairs_of(frames, 2 * count - 1)  # room for count flashes with a gap between each two
        shown = set(flash_pairs(rng, pairs, count))
        name = f"clip_{i:05d}.mp4"
        _write_clip(os.path.join(clip_dir, name),
                    [flash if k // TEMPORAL_PATCH in shown else empty for k in range(frames)], fps)
        rows.append({"problem_id": i, "problem": COUNT_QUESTION, "data_type": "video", "problem_type": "numerical",
                     "options": [], "solution": f"<answer>{count}</answer>", "path": f"clips/{name}",
                     "data_source": "synthetic"})
    return write_jsonl(out_dir, "video_count.jsonl", rows)
