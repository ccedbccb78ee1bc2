"""Seconds the ``frames`` tool takes to read a span of a long clip: by a seek to the key frame before the span
(``paddle_r1.data.video_seek.read_frames``, what the tool does) against a scan from the clip's start (what it did),
for spans at the start, in the middle and near the end of a clip this script writes with PyAV (H.264 in MP4, noise
over a moving bar, 30 fps, a key frame every ``--gop`` frames: 250 is x264's own default), each span's frames resized
as the tool sizes them. Both reads are checked to give the same pixels.

    python benchmarks/video_seek.py [--minutes 10] [--width 640 --height 360] [--gop 250] [--repeats 3]
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time

import numpy as np
from PIL import Image

from paddle_r1.data.video import VideoSampling
from paddle_r1.data.video_seek import read_frames

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from video_decode import FPS, write_clip  # noqa: E402  (the clip that benchmark decodes)

SPAN_SECONDS = 2.0


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        return f"{len(names)} x {names[0]}"
    except (OSError, IndexError):
        return platform.processor() or platform.machine()


def timed(path: str, indices: list[int], total: int, convert, seek: bool, repeats: int):
    """The best of ``repeats`` reads' seconds, and the last read."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        read = read_frames(path, indices, total, convert, seek=seek)
        best = min(best, time.perf_counter() - start)
    return best, read


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--height", type=int, default=360)
    parser.add_argument("--gop", type=int, default=250)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    total = round(args.minutes * 60 * FPS)
    span = round(SPAN_SECONDS * FPS)
    size = VideoSampling().frame_size(args.width, args.height, span, 28)  # the tool's size for a span's frames

    def resized(image: Image.Image) -> np.ndarray:
        return np.asarray(image.convert("RGB").resize(size, Image.BICUBIC))

    print(f"CPU: {cpu_name()}")
    print(f"clip: {args.minutes:g} min H.264 {args.width}x{args.height} at {FPS} fps ({total} frames), a key frame "
          f"every {args.gop} frames; each span {SPAN_SECONDS:g} s = {span} frames resized to {size[0]}x{size[1]}")
    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, "long.mp4")
        start = time.perf_counter()
        write_clip(path, "libx264", args.width, args.height, args.minutes * 60, gop=args.gop)
        print(f"(written in {time.perf_counter() - start:.0f} s)")
        print("| span | seek (s, best of runs) | frames decoded | scan (s) | frames decoded | scan / seek |")
        print("|---|---|---|---|---|---|")
        for name, first in (("start", 0), ("middle", total // 2), ("near the end", total - span)):
            indices = list(range(first, first + span))
            seek_s, sought = timed(path, indices, total, resized, True, args.repeats)
            scan_s, scanned = timed(path, indices, total, resized, False, 1 if first else args.repeats)
            assert sought.sought and all(np.array_equal(a, b) for a, b in zip(sought.frames, scanned.frames))
            label = f"{name}: {first / FPS:.0f}-{(first + span) / FPS:.0f} s"
            print(f"| {label} | {seek_s:.3f} | {sought.decoded} | {scan_s:.3f} | {scanned.decoded} | "
                  f"{scan_s / seek_s:.1f}x |")


if __name__ == "__main__":
    main()
