"""What verifying a checkpoint costs: SHA-256 over its files, as ``paddle_r1.checkpoints.manifest`` hashes them.

    python benchmarks/checkpoint_hashing.py                       # 2 GB of written files, 4 of them
    python benchmarks/checkpoint_hashing.py --gb 8 --files 8
    python benchmarks/checkpoint_hashing.py --folder output/checkpoint-500   # a real checkpoint (as it is cached)

Prints GB/s for one file on one thread (as the manifest hashes it, with hashlib.file_digest's 256 KiB reads, and
with 16 MiB reads), for all the files on 1..N threads, and what those rates make of a 7B checkpoint. The files were just
written, so they are read from the page cache: this is the hashing rate, an upper bound when the disk is slower (a save
hashes what it just wrote, as here; a resume after a reboot reads from disk).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import tempfile
import time

import numpy as np

from paddle_r1.checkpoints.manifest import files_under, sha256_of, sha256_of_files

LARGE_READ = 16 << 20

# a 7B checkpoint: Qwen2.5-VL-7B's published bf16 weights, and AdamW's two fp32 moments plus fp32 master weights
# (7e9 parameters x 12 bytes)
SEVEN_B = {"weights (bf16)": 15e9, "AdamW moments + master weights (fp32)": 84e9}


def write_files(folder: str, total_bytes: int, files: int) -> list[str]:
    """``files`` files of random bytes (a 64 MiB random block repeated: incompressible for the page cache)."""
    block = np.random.default_rng(0).integers(0, 256, 64 << 20, dtype=np.uint8).tobytes()
    names = []
    for i in range(files):
        name = f"part{i}.bin"
        left = total_bytes // files
        with open(os.path.join(folder, name), "wb") as f:
            while left > 0:
                f.write(block[:left])
                left -= len(block)
        names.append(name)
    return names


def best_rates(methods: list[tuple[str, object, int]], repeats: int) -> list[tuple[str, float]]:
    """(label, GB/s) of each (label, fn, bytes): the best of ``repeats`` runs, the methods taking turns within each
    round so that load from other processes on a shared machine falls on all of them alike."""
    best = [float("inf")] * len(methods)
    for _ in range(repeats):
        for i, (_, fn, _) in enumerate(methods):
            start = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - start)
    return [(label, nbytes / seconds / 1e9) for (label, _, nbytes), seconds in zip(methods, best)]


def sha256_large_reads(path: str) -> str:
    """The alternative to hashlib.file_digest's 256 KiB reads: 16 MiB ones."""
    digest = hashlib.sha256()
    buffer = memoryview(bytearray(LARGE_READ))
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buffer):
            digest.update(buffer[:n])
    return digest.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gb", type=float, default=2.0, help="bytes to write and hash, in GB (default 2)")
    parser.add_argument("--files", type=int, default=4, help="split into this many files (default 4)")
    parser.add_argument("--folder", help="hash this folder's files instead (e.g. a checkpoint)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    scratch = None
    if args.folder:
        folder, names = args.folder, files_under(args.folder)
    else:
        scratch = folder = tempfile.mkdtemp(prefix="hash-bench-")
        names = write_files(folder, int(args.gb * 1e9), args.files)
    try:
        sizes = {name: os.path.getsize(os.path.join(folder, name)) for name in names}
        total = sum(sizes.values())
        largest = max(names, key=sizes.get)
        largest_path = os.path.join(folder, largest)
        print(f"{len(names)} files, {total / 1e9:.2f} GB in {folder}; {os.cpu_count()} CPUs\n")
        methods = [(f"one file ({sizes[largest] / 1e9:.2f} GB), sha256_of (hashlib.file_digest, 256 KiB reads)",
                    lambda: sha256_of(largest_path), sizes[largest]),
                   (f"one file, {LARGE_READ >> 20} MiB reads", lambda: sha256_large_reads(largest_path),
                    sizes[largest])]
        for threads in range(1, min(os.cpu_count() or 1, len(names)) + 1):
            methods.append((f"all files, {threads} thread(s) (sha256_of_files)",
                            lambda threads=threads: sha256_of_files(folder, names, threads=threads), total))
        rows = best_rates(methods, args.repeats)
        print("| hashing | GB/s |\n|---|---|")
        for label, gbs in rows:
            print(f"| {label} | {gbs:.2f} |")

        seven_b = sum(SEVEN_B.values())
        one = rows[0][1]
        many_label, many = max(rows[2:], key=lambda row: row[1])
        print(f"\n7B checkpoint: {' + '.join(f'{v / 1e9:.0f} GB {k}' for k, v in SEVEN_B.items())} = "
              f"{seven_b / 1e9:.0f} GB")
        print(f"| 7B checkpoint, {seven_b / 1e9:.0f} GB | seconds |\n|---|---|")
        print(f"| one thread ({one:.2f} GB/s) | {seven_b / 1e9 / one:.0f} |")
        print(f"| {many_label}, the fastest ({many:.2f} GB/s) | {seven_b / 1e9 / many:.0f} |")
    finally:
        if scratch:
            shutil.rmtree(scratch)


if __name__ == "__main__":
    main()
