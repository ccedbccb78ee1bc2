"""Synthetic clips: "when does the red circle appear?", temporal grounding a tiny model learns on CPU.

Each clip is ``frames`` frames at ``fps`` (MPEG-4 in MP4, written by PyAV) of a plain background; a red circle
appears at one random place for a random run of whole frame pairs and is gone before and after. Qwen-VL towers join
frames in pairs (the temporal patch), so at the readers' default 2 fps every pair is one second and one time step
of vision tokens: the true span [start, end] is in whole seconds, the pairs the circle is in. Rows are Charades-STA
layout ({video, duration, timestamp, sentence}, the ``temporal_grounding`` format) and score with ``temporal_iou``.
"""
from __future__ import annotations

import os

import numpy as np
from PIL import Image, ImageDraw

from .records import write_jsonl
from .video import TEMPORAL_PATCH

EVENT = "the red circle appears"
CIRCLE = (220, 30, 30)
BACKGROUND = (245, 245, 245)


def make_synthetic_temporal(out_dir: str, num_samples: int = 32, seed: int = 0, frame_counts=(8,), fps: float = 2.0,
                            size: int = 56) -> str:
    """Write ``num_samples`` clips (their frame count drawn from ``frame_counts``, each a multiple of 2) and
    ``temporal.jsonl``; return its path. The circle spans 1 to all but one of the clip's frame pairs, at random."""
    import av

    rng = np.random.default_rng(seed)
    clip_dir = os.path.join(out_dir, "clips")
    os.makedirs(clip_dir, exist_ok=True)
    rows = []
    for i in range(num_samples):
        frames = int(frame_counts[int(rng.integers(len(frame_counts)))])
        pairs = frames // TEMPORAL_PATCH
        if frames % TEMPORAL_PATCH or pairs < 2:
            raise ValueError(f"frame_counts: {frames} is not an even count of at least 4 frames")
        length = int(rng.integers(1, pairs))
        first = int(rng.integers(0, pairs - length + 1))
        radius = int(rng.integers(size // 4, size // 3))
        x, y = (int(v) for v in rng.integers(radius, size - radius, 2))
        shown = Image.new("RGB", (size, size), BACKGROUND)
        ImageDraw.Draw(shown).ellipse([x - radius, y - radius, x + radius, y + radius], fill=CIRCLE)
        empty = np.asarray(Image.new("RGB", (size, size), BACKGROUND))
        name = f"clip_{i:05d}.mp4"
        with av.open(os.path.join(clip_dir, name), "w") as container:
            stream = container.add_stream("mpeg4", rate=int(fps))
            stream.width, stream.height, stream.pix_fmt = size, size, "yuv420p"
            for k in range(frames):
                picture = np.asarray(shown) if first <= k // TEMPORAL_PATCH < first + length else empty
                container.mux(stream.encode(av.VideoFrame.from_ndarray(picture, format="rgb24")))
            container.mux(stream.encode())
        seconds = TEMPORAL_PATCH / fps
        rows.append({"video": f"clips/{name}", "duration": frames / fps, "sentence": EVENT,
                     "timestamp": [first * seconds, (first + length) * seconds]})
    return write_jsonl(out_dir, "temporal.jsonl", rows)
