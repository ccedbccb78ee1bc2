"""What checking a REC dataset costs before training: ``load_samples`` (every row read, adapted, validated, each
image's header checked once however many rows share it) and ``paddle-r1 check-data --decode``'s extra pass (every
image decoded whole, as training reads it) on 1 and on N threads, for a REC file this script writes: ROWS rows over
IMAGES JPEGs of 640 x 480 (noise, so that they do not decode in no time), each row naming a random one, as RefCOCO's
120,624 training rows name 16,994 COCO images.

    python benchmarks/data_load.py [--rows 20000] [--images 3000] [--threads 2] [--repeats 3]

Each figure is the median of ``--repeats`` loads in this process (the files in the page cache after the first).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import numpy as np
from PIL import Image

from paddle_r1.data.loader import load_samples


def write_rec(folder: str, rows: int, images: int) -> str:
    rng = np.random.default_rng(0)
    noise = (rng.random((480, 640, 3)) * 255).astype(np.uint8)
    for i in range(images):
        Image.fromarray(np.roll(noise, i, axis=1)).save(os.path.join(folder, f"{i}.jpg"), quality=85)
    path = os.path.join(folder, "rec.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(rows):
            row = {"image": f"{int(rng.integers(images))}.jpg", "problem": "the thing", "solution": [10, 20, 300, 400]}
            f.write(json.dumps(row) + "\n")
    return path


def seconds(repeats: int, **load) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        load_samples(**load)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=20000)
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = write_rec(folder, args.rows, args.images)
        load = dict(data_path=path, image_root=folder)
        headers = seconds(args.repeats, **load)
        print(f"{args.rows:,} rows over {args.images:,} JPEGs (640 x 480), median of {args.repeats}\n")
        print("| check | seconds | rows per second |")
        print("|---|---|---|")
        print(f"| load_samples (headers, each image once) | {headers:.2f} | {args.rows / headers:,.0f} |")
        for threads in sorted({1, args.threads}):
            total = seconds(args.repeats, decode_threads=threads, **load)
            print(f"| + decode every image whole (check-data --decode), {threads} thread(s) | {total:.2f} | "
                  f"{args.rows / total:,.0f} |")


if __name__ == "__main__":
    main()
