"""Each clip the report shows: a strip of frames spread evenly over it, resized once into the report's folder, with
its length, so that the true and the predicted spans (seconds) are drawn on a time line under the frames.

A strip is named by a hash of the clip's path, size on disk and modification time, like a thumbnail (``thumbnails``);
a folder of frames is keyed by its own modification time. The frames are read by the trainer's reader
(``data.video.read_clip``): an unreadable clip gets no strip, the report says so and goes on.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Optional

from PIL import Image

from ..data.samples import DataError
from ..data.video import VideoSampling, read_clip
from ..rewards import BadSolution
from ..rewards.families.temporal import parse_span, truth_span

STRIP_FRAMES = 8
STRIP_SAMPLING = VideoSampling(fps=1e6, min_frames=2, max_frames=STRIP_FRAMES, min_pixels=28 * 28,
                               max_pixels=160 * 112)  # up to 8 frames however short the clip, each about 160 x 112


@dataclass
class Strip:
    frames: list  # file names inside the report's images folder, in clip order
    duration: float  # seconds


def frame_strip(path, folder: str) -> Optional[Strip]:
    """The clip at ``path`` (or a list of frame files, keyed by its first and its length) as a strip of frames
    written to ``folder`` (reused when already there); None when the clip cannot be read."""
    first = path[0] if isinstance(path, list) and path else path
    try:
        stat = os.stat(first)
    except (OSError, TypeError):
        return None
    count = f"|{len(path)}" if isinstance(path, list) else ""
    key = hashlib.sha1(f"{os.path.abspath(first)}{count}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    index_file = os.path.join(folder, f"{key}.strip.json")
    if os.path.isfile(index_file):
        with open(index_file, encoding="utf-8") as f:
            return Strip(**json.load(f))
    try:
        clip = read_clip(_spread(path) if isinstance(path, list) else path, STRIP_SAMPLING)
    except DataError:
        return None
    duration = len(path) / STRIP_SAMPLING.frames_fps if isinstance(path, list) else clip.duration
    os.makedirs(folder, exist_ok=True)
    names = []
    for i, frame in enumerate(clip.frames):
        names.append(f"{key}-{i}.jpg")
        Image.fromarray(frame).save(os.path.join(folder, names[-1]), quality=85)
    strip = Strip(frames=names, duration=duration)
    with open(index_file, "w", encoding="utf-8") as f:
        json.dump(strip.__dict__, f)
    return strip


def _spread(frames: list) -> list:
    """Up to ``STRIP_FRAMES`` of a list of frame files, spread evenly (a list is read whole; its rate is taken to be
    the default ``video_frames_fps``: the report does not know the job's)."""
    count = min(STRIP_FRAMES, len(frames))
    return [frames[round(k * (len(frames) - 1) / max(count - 1, 1))] for k in range(count)]


def solution_span(solution) -> Optional[tuple[float, float]]:
    """The true (start, end) seconds when the solution is a temporal grounding one, else None."""
    try:
        return truth_span(solution)
    except (BadSolution, TypeError, ValueError):
        return None


def predicted_span(text: str) -> Optional[tuple[float, float]]:
    """A completion's span as the ``temporal_iou`` reward reads it; None when it reads none or it is reversed."""
    span = parse_span(text) if isinstance(text, str) else None
    return span if span is not None and span[0] <= span[1] else None
