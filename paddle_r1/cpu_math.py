"""Two settings of the process that Paddle's CPU kernels are slow without (``tune_cpu_math``), made by a job that
runs on the CPU (config key ``tune_cpu_math``, on by default) and by the commands that run a model on a machine
without CUDA; importing paddle_r1 makes neither.

MKL on AMD. Paddle's CPU wheel calls an old Intel MKL (``libmklml_intel``) for its matrix products, and that MKL picks a
generic, non-AVX2 code path on AMD processors, slower than torch's newer MKL on the same products.
``MKL_DEBUG_CPU_TYPE`` makes that MKL use the kernels of the instruction set named: 5 its AVX2 ones, 7 its AVX-512
(Skylake) ones, faster still, which need AVX-512 F, CD, BW, DQ and VL (AMD has them from Zen 4 on)
(``python benchmarks/experiments/mkl_kernels.py`` times each set; its figures are in ``benchmarks/README.md``). The
MKL_DEBUG_CPU_TYPE values above 7 are Xeon Phi's kernels, which stop an EPYC with an illegal instruction. MKL reads
the variable when Paddle first loads it (the first matrix product), so it must be set before that; a value the user
set is kept, and Intel processors (where MKL already chooses well, AVX-512 included) are left alone.

Large blocks from glibc's heap. glibc serves blocks above its mmap threshold (128 KiB at first, 32 MiB at most) with
a fresh ``mmap`` and gives them back on free, so every activation-sized tensor Paddle's CPU allocator (which keeps
no cache on the CPU) asks for starts on untouched pages, and each first touch of a page is a page fault the kernel
answers by zeroing it. Here all blocks come from the heap (``M_MMAP_MAX`` 0) and a freed block is taken again by the
next tensor that fits, untouched pages no more; up to 256 MiB free at the heap's top is kept (the trim threshold).
The slowness of Paddle's CPU elementwise kernels on large tensors (a block of the log-prob attention's scores at
1,024 completion tokens is [16, 2, 512, 1073] float32, 70 MB) was mostly these page faults
(``python benchmarks/experiments/heap_blocks.py``); the speed anchor's GRPO step at 1,024 completion tokens is
faster, at a higher peak RSS (blocks freed inside the heap are reused but not given back; ``python
benchmarks/grpo_step.py --model DIR --new-tokens 1024 --steps 3 --json [--glibc-default]``, DIR the anchor's
checkpoint); at 64 and 256 tokens, whose blocks are under 32 MiB, nothing changes. The figures are in
``docs/performance.md`` (What to set). Set with ``mallopt`` on glibc; elsewhere nothing is done."""
from __future__ import annotations

import ctypes
import functools
import os
import platform

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4


AVX512_SKYLAKE = {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"}


def _vendor_and_flags(cpuinfo: str) -> tuple[str, set]:
    """The first processor's vendor_id and flags in ``/proc/cpuinfo``'s text."""
    vendor = flags = ""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "vendor_id" and not vendor:
            vendor = value.strip()
        elif key == "flags" and not flags:
            flags = value
        if vendor and flags:  # the first processor's: the rest of a many-core machine's file repeats them
            break
    return vendor, set(flags.split())


def cpu_flags(cpuinfo: str) -> set:
    """The first processor's flags in ``/proc/cpuinfo``'s text (avx2, avx512f, avx512_bf16, amx_bf16, ...)."""
    return _vendor_and_flags(cpuinfo)[1]


def has_avx512(cpuinfo: str | None = None) -> bool:
    """Whether the processor has AVX-512 F, CD, BW, DQ and VL (``/proc/cpuinfo``'s text, this machine's if None)."""
    return AVX512_SKYLAKE <= cpu_flags(read_cpuinfo() if cpuinfo is None else cpuinfo)


def mkl_cpu_type(cpuinfo: str) -> str | None:
    """For an AMD processor, per ``/proc/cpuinfo``'s text: "7" (AVX-512) if it has AVX-512 F, CD, BW, DQ and VL,
    "5" (AVX2) if it has AVX2 and FMA; else None."""
    vendor, flags = _vendor_and_flags(cpuinfo)
    if vendor != "AuthenticAMD":
        return None
    if has_avx512(cpuinfo):
        return "7"
    return "5" if {"avx2", "fma"} <= flags else None


@functools.lru_cache(maxsize=None)
def read_cpuinfo(path: str = "/proc/cpuinfo") -> str:
    """The file's text, or "" where there is none (not Linux)."""
    if not os.path.isfile(path):
        return ""
    with open(path) as f:
        return f.read()


def choose_mkl_kernels(cpuinfo_path: str = "/proc/cpuinfo") -> None:
    if "MKL_DEBUG_CPU_TYPE" in os.environ:
        return
    cpu_type = mkl_cpu_type(read_cpuinfo(cpuinfo_path))
    if cpu_type:
        os.environ["MKL_DEBUG_CPU_TYPE"] = cpu_type


def keep_large_blocks_on_the_heap() -> None:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return
    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt(M_MMAP_MAX, 0)
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
