"""MKL's packed matrix products for the decode step's weights on CPU.

A decode step multiplies a few rows (one token per completion) by every weight of the decoder, and on CPU those
products bound its time: each call of MKL's plain ``sgemm`` re-lays the whole weight out in the panels its kernel
reads, for 16 rows of work. MKL's packed API (``cblas_sgemm_pack`` once, ``cblas_sgemm_compute`` per product) lays a
weight out once and reuses it, as vLLM's CPU build does with oneDNN's prepacked weights. The MKL used is the one
Paddle's CPU wheel ships and loads for its own products (``mkl.py``).
``python benchmarks/experiments/mlp_products.py`` times the products both ways (figures in ``benchmarks/README.md``).

A packed copy is made per rollout (the policy's weights change between rollouts) and freed with it: one extra copy
of the decoder's weights while the rollout runs. Float32 weights on the CPU only; elsewhere (a GPU, another dtype, a
build without that library) the products stay Paddle's.
"""
from __future__ import annotations

import weakref

import paddle
from paddle import _C_ops

from .mkl import float32_on_cpu, mkl_library
from .onednn import OneDNNWeight, bf16_products_run

ROW_MAJOR, NO_TRANS, TRANS, PACKED, B_MATRIX = 101, 111, 112, 151, 162  # MKL's CBLAS enum values


def packs(weight: paddle.Tensor) -> bool:
    """Whether ``PackedWeight`` can multiply by ``weight``: float32 on the CPU, with MKL's packed API at hand."""
    return weight.ndim == 2 and float32_on_cpu(weight)


def packed(weight: paddle.Tensor, rows: int, transposed: bool = False, bf16: bool = False):
    """``weight`` packed for ``rows``-row products where ``packs`` takes it: with ``bf16`` by oneDNN in bfloat16
    (``onednn.OneDNNWeight``) where oneDNN makes bf16 products on this CPU, else by MKL in float32
    (``PackedWeight``); None where ``packs`` does not take it."""
    if not packs(weight):
        return None
    return OneDNNWeight(weight, rows, transposed) if bf16 and bf16_products_run() else PackedWeight(weight, rows,
                                                                                                   transposed)


class PackedWeight:
    """``x @ weight`` for ``x`` [rows, in] and a Paddle linear weight [in, out] (``x @ weight.T`` for a weight
    [out, in] stored ``transposed``, as an LM head's), the weight packed once for products of ``rows`` rows (MKL packs
    for the row count it is told; another count takes Paddle's product)."""

    def __init__(self, weight: paddle.Tensor, rows: int, transposed: bool = False):
        library = mkl_library()
        self.weight, self.rows, self.transposed = weight, rows, transposed
        self.inner, self.outer = reversed(weight.shape) if transposed else weight.shape
        contiguous = weight.contiguous()
        buffer = library.cblas_sgemm_alloc(B_MATRIX, rows, self.outer, self.inner)
        if not buffer:
            raise MemoryError(f"MKL could not allocate a packed copy of a {weight.shape} weight")
        library.cblas_sgemm_pack(ROW_MAJOR, B_MATRIX, TRANS if transposed else NO_TRANS, rows, self.outer, self.inner,
                                 1.0, contiguous.data_ptr(), self.inner if transposed else self.outer, buffer)
        self.buffer = buffer
        self._free = weakref.finalize(self, library.cblas_sgemm_free, buffer)

    def __call__(self, x: paddle.Tensor) -> paddle.Tensor:
        if x.shape != [self.rows, self.inner] or x.dtype != paddle.float32 or not x.place.is_cpu_place():
            return paddle.matmul(x, self.weight, transpose_y=self.transposed)
        x = x if x.is_contiguous() else x.contiguous()
        out = _C_ops.empty([self.rows, self.outer], paddle.float32, x.place)
        mkl_library().cblas_sgemm_compute(ROW_MAJOR, NO_TRANS, PACKED, self.rows, self.outer, self.inner,
                                          x.data_ptr(), self.inner, self.buffer, self.outer, 0.0, out.data_ptr(),
                                          self.outer)
        return out
