"""The MKL Paddle's CPU wheel ships and loads for its own products (``paddle/libs/libmklml_intel.so``), reached with
ctypes for what Paddle's CPU kernels do slowly at the decode step's sizes: products by weights packed once
(``packed_products.py``) and writes of one cache slot (``kv_cache.TransposedKVCache``). Its kernel choice
(``cpu_math.choose_mkl_kernels``) and its thread count (``paddle.set_num_threads``) are Paddle's.

Writes go straight into a tensor's memory: only for float32 CPU tensors outside autograd (the decode step runs under
``no_grad``), where Paddle runs every kernel before the next call returns, so nothing reads the memory meanwhile.
"""
from __future__ import annotations

import ctypes
import functools
import math
import os
from typing import Optional

import paddle

FLOAT32 = 4  # bytes


@functools.lru_cache(maxsize=None)
def mkl_library() -> Optional[ctypes.CDLL]:
    """The MKL Paddle loads for its CPU products, with the entry points used here declared; None where Paddle ships
    no such library or it lacks one of them."""
    path = os.path.join(os.path.dirname(paddle.__file__), "libs", "libmklml_intel.so")
    if not os.path.isfile(path):
        return None
    library = ctypes.CDLL(path)
    if not all(hasattr(library, name) for name in ("cblas_sgemm_alloc", "cblas_sgemm_pack", "cblas_sgemm_compute",
                                                   "cblas_sgemm_free", "cblas_scopy", "MKL_Somatcopy")):
        return None
    ints, pointer, size = [ctypes.c_int] * 6, ctypes.c_void_p, ctypes.c_size_t
    library.cblas_sgemm_alloc.restype = pointer
    library.cblas_sgemm_alloc.argtypes = [ctypes.c_int] * 4
    library.cblas_sgemm_free.argtypes = [pointer]
    library.cblas_sgemm_pack.argtypes = ints + [ctypes.c_float, pointer, ctypes.c_int, pointer]
    library.cblas_sgemm_compute.argtypes = ints + [pointer, ctypes.c_int, pointer, ctypes.c_int, ctypes.c_float,
                                                   pointer, ctypes.c_int]
    library.cblas_scopy.argtypes = [ctypes.c_int, pointer, ctypes.c_int, pointer, ctypes.c_int]
    # the C interface (``mkl_somatcopy`` is the Fortran one here, every argument by reference)
    library.MKL_Somatcopy.argtypes = [ctypes.c_char, ctypes.c_char, size, size, ctypes.c_float, pointer, size,
                                      pointer, size]
    return library


def float32_on_cpu(tensor: paddle.Tensor) -> bool:
    """Whether the routines here can take ``tensor``: float32 on the CPU, with this MKL at hand."""
    return tensor.place.is_cpu_place() and tensor.dtype == paddle.float32 and mkl_library() is not None


def write_spaced(source: paddle.Tensor, target: paddle.Tensor, offset: int, stride: int) -> None:
    """target.flat[offset + i * stride] = source.flat[i] for every element i of ``source`` (one ``cblas_scopy``).
    Both float32 on the CPU, ``target`` contiguous and large enough (not checked: the caller's shapes say so)."""
    source = source if source.is_contiguous() else source.contiguous()
    count = math.prod(source.shape)  # (``Tensor.size`` costs more than the copy)
    mkl_library().cblas_scopy(count, source.data_ptr(), 1, target.data_ptr() + FLOAT32 * offset, stride)


def write_rows(source: paddle.Tensor, target: paddle.Tensor, offset: int, rows: int, row_stride: int) -> None:
    """target.flat[offset + r * row_stride + j] = source.flat[r * cols + j] for ``source`` read as ``rows`` rows of
    cols = size / rows (one ``MKL_Somatcopy``); as ``write_spaced``'s."""
    source = source if source.is_contiguous() else source.contiguous()
    cols = math.prod(source.shape) // rows
    mkl_library().MKL_Somatcopy(b"R", b"N", rows, cols, 1.0, source.data_ptr(), cols,
                                target.data_ptr() + FLOAT32 * offset, row_stride)
