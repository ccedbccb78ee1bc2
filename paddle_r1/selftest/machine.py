"""What this machine is, for the report and for choosing what the checks run: Paddle's build, its GPUs and their
compute capabilities, paddleformers, and the precision training would choose here."""
from __future__ import annotations

import importlib.metadata
import platform
import sys
from dataclasses import dataclass
from typing import Optional

from ..models.precision import Precision, choose_precision

SHIPPED_DTYPE = "bfloat16"  # what configs/grpo_*.yaml ask for: the precision a GPU run starts from


@dataclass
class Machine:
    environment: dict  # the report's "environment"
    gpus: int
    precision: Precision  # what the checks train in: the device's choice for the requested dtype; float32 on CPU
    no_gpu_reason: Optional[str]  # why GPU-only checks are skipped here; None on a machine with a GPU

    @property
    def dtype(self) -> str:
        return self.precision.dtype


def _version(distribution: str) -> Optional[str]:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _no_gpu_reason() -> Optional[str]:
    import paddle

    if not paddle.is_compiled_with_cuda():
        return "no CUDA device: paddle.is_compiled_with_cuda() is False"
    if paddle.device.cuda.device_count() == 0:
        return "no CUDA device: paddle.device.cuda.device_count() is 0 (check the driver and CUDA_VISIBLE_DEVICES)"
    return None


def _gpus() -> list[dict]:
    import paddle

    gpus = []
    for index in range(paddle.device.cuda.device_count()):
        properties = paddle.device.cuda.get_device_properties(index)
        gpus.append({"index": index, "name": properties.name,
                     "capability": f"{properties.major}.{properties.minor}",
                     "memory_gib": round(properties.total_memory / 2**30, 1)})
    return gpus


def inspect_machine(requested_dtype: Optional[str] = None) -> Machine:
    """The machine, with the checks' device set: the first GPU when there is one, else the CPU. ``requested_dtype``
    is what a GPU run asks for (default: the shipped configs' bfloat16), which the device may change as training
    does (``models.precision``); CPU checks run float32."""
    import paddle

    no_gpu = _no_gpu_reason()
    paddle.set_device("cpu" if no_gpu else "gpu:0")
    gpus = [] if no_gpu else _gpus()
    requested = requested_dtype or SHIPPED_DTYPE
    # the capability as get_device_properties reports it; the environment check compares the trainer's own reading
    capability = None if no_gpu else tuple(int(part) for part in gpus[0]["capability"].split("."))
    precision = choose_precision("float32", None) if no_gpu else choose_precision(requested, capability)
    environment = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "paddle": {"version": paddle.version.full_version, "commit": paddle.version.commit,
                   "compiled_with_cuda": paddle.is_compiled_with_cuda(), "cuda": paddle.version.cuda(),
                   "cudnn": paddle.version.cudnn(), "nccl": paddle.version.nccl(),
                   **{flag: paddle.framework._global_flags().get(f"FLAGS_{flag}")  # sdpa's kernels in this build
                      for flag in ("flash_attn_available", "mem_efficient_attn_available")}},
        "gpus": gpus,
        "paddleformers": _version("paddleformers"),
        "paddle_r1": _version("paddle_r1"),
        "precision": {"requested": "float32" if no_gpu else requested, "dtype": precision.dtype,
                      "attention": precision.attention, "grad_scaler": precision.grad_scaler,
                      "reason": precision.reason},
        "no_gpu_reason": no_gpu,
    }
    return Machine(environment=environment, gpus=len(gpus), precision=precision, no_gpu_reason=no_gpu)
