"""Paddle's CPU wheel calls an old Intel MKL (``libmklml_intel``) for its matrix products, and that MKL picks a
generic, non-AVX2 code path on AMD processors: a [1696, 256] x [256, 2048] product ran at 14 GFLOP/s on this
project's 2-core AMD EPYC (torch's newer MKL: 45-69). ``MKL_DEBUG_CPU_TYPE=5`` makes that MKL use its AVX2
kernels on any processor that has AVX2 and FMA: 40-78 GFLOP/s on the same machine. MKL reads the variable
when Paddle first loads it (the first matrix product), so it is set when paddle_r1 is imported; a value the
user set is kept, and Intel processors (where MKL already chooses well, AVX-512 included) are left alone."""
from __future__ import annotations

import os


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
