"""Two settings of the process that Paddle's CPU kernels are slow without (``tune_cpu_math``), made by a job that
runs on the CPU (config key ``tune_cpu_math``, on by default) and by the commands that run a model on a machine
without CUDA; importing paddle_r1 makes neither.

MKL on AMD. Paddle's CPU wheel calls an old Intel MKL (``libmklml_intel``) for its matrix products, and that MKL picks a
generic, non-AVX2 code path on AMD processors: a [1696, 256] x [256, 2048] product ran at 14 GFLOP/s on this
project's 2-core AMD EPYC (torch's newer MKL: 45-69). ``MKL_DEBUG_CPU_TYPE=5`` makes that MKL use its AVX2
kernels on any processor that has AVX2 and FMA: 40-78 GFLOP/s on the same machine. MKL reads the variable
when Paddle first loads it (the first matrix product), so it must be set before that; a value the user set is
kept, and Intel processors (where MKL already chooses well, AVX-512 included) are left alone.

Large blocks from glibc's heap. glibc serves blocks above its mmap threshold (128 KiB at first) with a fresh
``mmap`` and gives them back on free, so every activation-sized tensor Paddle's CPU allocator asks for starts on
untouched pages: a [16, 64, 1024] float32 product took 3.8 ms, 0.35 ms with the threshold at glibc's maximum
(32 MiB) and the heap kept (trim threshold 256 MiB). Set with ``mallopt`` on glibc; elsewhere nothing is done."""
from __future__ import annotations

import ctypes
import os
import platform

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3


def mkl_cpu_type(cpuinfo: str) -> str | None:
    """"5" (AVX2) for an AMD processor with AVX2 and FMA, per ``/proc/cpuinfo``'s text; else None."""
    vendor = flags = ""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "vendor_id" and not vendor:
            vendor = value.strip()
        elif key == "flags" and not flags:
            flags = value
    return "5" if vendor == "AuthenticAMD" and {"avx2", "fma"} <= set(flags.split()) else None


def choose_mkl_kernels(cpuinfo_path: str = "/proc/cpuinfo") -> None:
    if "MKL_DEBUG_CPU_TYPE" in os.environ or not os.path.isfile(cpuinfo_path):
        return
    with open(cpuinfo_path) as f:
        cpu_type = mkl_cpu_type(f.read())
    if cpu_type:
        os.environ["MKL_DEBUG_CPU_TYPE"] = cpu_type


def keep_large_blocks_on_the_heap() -> None:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return
    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt(M_MMAP_THRESHOLD, 32 << 20)
    libc.mallopt(M_TRIM_THRESHOLD, 256 << 20)


def tune_cpu_math() -> None:
    """Both settings, for a process that runs Paddle on the CPU; call it before the first matrix product."""
    choose_mkl_kernels()
    keep_large_blocks_on_the_heap()


def tune_if_no_gpu() -> None:
    """``tune_cpu_math`` in a command that runs a model where Paddle has no CUDA (eval, serve)."""
    import paddle

    if not paddle.is_compiled_with_cuda():
        tune_cpu_math()
