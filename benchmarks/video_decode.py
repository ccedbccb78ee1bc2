"""Seconds to read one clip as a prompt reads it (``paddle_r1.data.video.read_clip``: decode, keep the sampled frames,
resize them) and frames decoded per second, for clips this script writes with PyAV (noise over moving bars, so the
encoder cannot shrink them to nothing): H.264 and MPEG-4 Part 2 in MP4, at 640 x 360 and 1280 x 720, 30 fps.

    python benchmarks/video_decode.py [--seconds 20] [--repeats 3]

The sampling is the default's (2 frames per second of clip, qwen-vl-utils' per-frame and total pixel budgets).
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

import av
import numpy as np

from paddle_r1.data.video import VideoSampling, read_clip

FPS = 30


def write_clip(path: str, codec: str, width: int, height: int, seconds: float, gop: int = 0) -> None:
    """``gop``: a key frame at least every ``gop`` frames (0: the encoder's default)."""
    rng = np.random.default_rng(0)
    noise = (rng.random((height, width, 3)) * 60).astype(np.uint8)
    with av.open(path, "w") as container:
        stream = container.add_stream(codec, rate=FPS)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        if gop:
            stream.codec_context.gop_size = gop
        for i in range(int(seconds * FPS)):
            picture = noise.copy()
            picture[:, (4 * i) % width:(4 * i) % width + 40] = (220, 40, 40)
            container.mux(stream.encode(av.VideoFrame.from_ndarray(picture, format="rgb24")))
        container.mux(stream.encode())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    sampling = VideoSampling()
    print(f"PyAV {av.__version__}, FFmpeg {av.library_versions['libavcodec']} (libavcodec)")
    print("| codec | size | clip | frames kept | frame size | read (s, best of runs) | frames decoded / s |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as work:
        for codec in ("libx264", "mpeg4"):
            for width, height in ((640, 360), (1280, 720)):
                path = os.path.join(work, f"{codec}_{width}.mp4")
                write_clip(path, codec, width, height, args.seconds)
                times = []
                for _ in range(args.repeats):
                    start = time.perf_counter()
                    clip = read_clip(path, sampling)
                    times.append(time.perf_counter() - start)
                best = min(times)
                _, h, w, _ = clip.frames.shape
                print(f"| {codec} | {width}x{height} | {args.seconds:.0f} s | {len(clip.frames)} | {w}x{h} | "
                      f"{best:.3f} | {args.seconds * FPS / best:.0f} |")


if __name__ == "__main__":
    main()
