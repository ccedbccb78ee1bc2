"""Decode-step products by weights prepacked with oneDNN, in bfloat16 where the CPU has bf16 instructions.

The one-token step multiplies 16 rows by each weight of the decoder, and on CPU those products bound it. In float32
MKL's packed products run them near the core's peak (``packed_products.py``). A CPU with bfloat16 dot-product
instructions (AVX-512 BF16 on AMD Zen 4 and Intel Cooper Lake; AMX on Sapphire Rapids and later Xeons) multiplies
bf16 numbers at twice that rate or more, and oneDNN, the library Paddle's CPU wheel ships beside MKL
(``paddle/libs/libdnnl.so.3``), has those kernels where Paddle's own CPU kernels have none. Here it is reached through
its C API with ctypes (the calls of ``dnnl.h``, oneDNN 3.x):

    y = bf16(x) @ bf16(W)   accumulated in float32, y float32

x's cast is a oneDNN reorder into a buffer made once; W is cast and laid out once for the kernel oneDNN picks for the
row count (its "prepacked" layout), as vLLM's CPU build lays its weights. bf16 keeps 8 significant bits: a product
differs from float32's by about 2e-3 of its largest value (``benchmarks/experiments/bf16_products.py``). The rest of
the step (norms, attention, cache, sampling) stays float32 (config key ``rollout_bf16_products``).

Objects here are freed with their owner (``weakref.finalize``), the library's handles destroyed in reverse order.
"""
from __future__ import annotations

import ctypes
import functools
import os
import weakref
from typing import Optional

import paddle
from paddle import _C_ops

from ..cpu_math import cpu_flags, read_cpuinfo

FLOAT32, BFLOAT16 = 3, 2  # dnnl_data_type_t
ARG_SRC, ARG_DST, ARG_WEIGHTS = 1, 17, 33  # DNNL_ARG_*: a reorder's FROM and TO are SRC and DST
QUERY_IMPL_INFO, QUERY_WEIGHTS_MD, FORMAT_ANY = 8, 131, 1  # dnnl_query_impl_info_str, dnnl_query_weights_md, any
CPU, IN_ORDER = 1, 1  # dnnl_cpu, dnnl_stream_in_order
LIBRARY_ALLOCATES = ctypes.c_void_p(2 ** 64 - 1)  # DNNL_MEMORY_ALLOCATE
BF16_INSTRUCTIONS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo's names


def bf16_instructions(cpuinfo: Optional[str] = None) -> list[str]:
    """The bfloat16 dot-product instruction sets this CPU has, per ``/proc/cpuinfo`` (empty: none, or not Linux)."""
    flags = cpu_flags(read_cpuinfo() if cpuinfo is None else cpuinfo)
    return [name for name in BF16_INSTRUCTIONS if name in flags]


class _Arg(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_int), ("memory", ctypes.c_void_p)]


class OneDNN:
    """The library, one CPU engine and one in-order stream."""

    def __init__(self, path: str):
        self.lib = lib = ctypes.CDLL(path)
        pointer = ctypes.c_void_p
        lib.dnnl_primitive_desc_query_md.restype = pointer
        lib.dnnl_primitive_desc_query_md.argtypes = [pointer, ctypes.c_int, ctypes.c_int]
        lib.dnnl_memory_set_data_handle.argtypes = [pointer, pointer]
        lib.dnnl_primitive_execute.argtypes = [pointer, pointer, ctypes.c_int, pointer]
        for name in ("dnnl_primitive_destroy", "dnnl_primitive_desc_destroy", "dnnl_memory_destroy",
                     "dnnl_memory_desc_destroy"):
            getattr(lib, name).argtypes = [pointer]
        self.engine, self.stream = pointer(), pointer()
        self.check(lib.dnnl_engine_create(ctypes.byref(self.engine), CPU, 0), "dnnl_engine_create")
        self.check(lib.dnnl_stream_create(ctypes.byref(self.stream), self.engine, IN_ORDER), "dnnl_stream_create")

    @staticmethod
    def check(status: int, call: str) -> None:
        if status != 0:  # dnnl_status_t: 0 success, 3 unimplemented, ...
            raise RuntimeError(f"oneDNN's {call} returned status {status}")

    def descriptor(self, shape: list[int], dtype: int, strides: Optional[list[int]] = None) -> ctypes.c_void_p:
        """A memory descriptor with ``strides`` (elements), or in whatever layout the primitive picks (None)."""
        dims, out = (ctypes.c_int64 * len(shape))(*shape), ctypes.c_void_p()
        if strides is None:
            self.check(self.lib.dnnl_memory_desc_create_with_tag(ctypes.byref(out), len(shape), dims, dtype,
                                                                 FORMAT_ANY), "dnnl_memory_desc_create_with_tag")
        else:
            self.check(self.lib.dnnl_memory_desc_create_with_strides(
                ctypes.byref(out), len(shape), dims, dtype, (ctypes.c_int64 * len(shape))(*strides)),
                "dnnl_memory_desc_create_with_strides")
        return out

    def memory(self, descriptor: ctypes.c_void_p, handle=LIBRARY_ALLOCATES) -> ctypes.c_void_p:
        """Memory of ``descriptor`` over ``handle`` (an address; by default the library allocates it)."""
        out = ctypes.c_void_p()
        self.check(self.lib.dnnl_memory_create(ctypes.byref(out), descriptor, self.engine, handle),
                   "dnnl_memory_create")
        return out

    def primitive(self, descriptor: ctypes.c_void_p) -> ctypes.c_void_p:
        out = ctypes.c_void_p()
        self.check(self.lib.dnnl_primitive_create(ctypes.byref(out), descriptor), "dnnl_primitive_create")
        return out

    def reorder(self, source: ctypes.c_void_p, target: ctypes.c_void_p) -> ctypes.c_void_p:
        """The primitive descriptor of a copy from layout and dtype ``source`` to ``target``."""
        out = ctypes.c_void_p()
        self.check(self.lib.dnnl_reorder_primitive_desc_create(ctypes.byref(out), source, self.engine, target,
                                                               self.engine, None), "dnnl_reorder_primitive_desc_create")
        return out

    @staticmethod
    def arguments(args: list[tuple[int, ctypes.c_void_p]]) -> ctypes.Array:
        """A primitive's arguments as ``dnnl_primitive_execute`` takes them (made once, reused for every call)."""
        return (_Arg * len(args))(*(_Arg(arg, memory) for arg, memory in args))

    def run(self, primitive: ctypes.c_void_p, arguments: ctypes.Array) -> None:
        self.check(self.lib.dnnl_primitive_execute(primitive, self.stream, len(arguments), arguments),
                   "dnnl_primitive_execute")


@functools.lru_cache(maxsize=None)
def onednn() -> Optional[OneDNN]:
    """The oneDNN Paddle's CPU wheel ships, or None where it ships none that loads with the calls used here (another
    build's library may lack one, or fail to make a CPU engine)."""
    path = os.path.join(os.path.dirname(paddle.__file__), "libs", "libdnnl.so.3")
    try:
        return OneDNN(path) if os.path.isfile(path) else None
    except (OSError, AttributeError, RuntimeError):
        return None


@functools.lru_cache(maxsize=None)
def bf16_products_run() -> bool:
    """Whether oneDNN makes a bfloat16 product on this CPU: it has kernels for CPUs with AVX-512 (native bf16
    instructions or emulated) and answers "unimplemented" elsewhere, as on an AMD EPYC before Zen 4 (AVX2 only)."""
    if onednn() is None:
        return False
    try:
        OneDNNWeight(paddle.ones([16, 16]), 2)
    except RuntimeError:
        return False
    return True


class OneDNNWeight:
    """``x @ weight`` (float32 [rows, in] -> float32 [rows, out]) for a Paddle linear weight [in, out] (``x @
    weight.T`` for a weight [out, in] stored ``transposed``, as an LM head's), the weight held once in ``dtype``
    ("bfloat16" or "float32") in the layout of oneDNN's kernel for ``rows`` rows; in bfloat16 x is cast by oneDNN
    first. Another row count, dtype or device takes Paddle's float32 product."""

    def __init__(self, weight: paddle.Tensor, rows: int, transposed: bool = False, dtype: str = "bfloat16"):
        dnn = onednn()
        if dnn is None:
            raise RuntimeError("Paddle's wheel has no oneDNN library (paddle/libs/libdnnl.so.3)")
        self.weight, self.rows, self.transposed = weight, rows, transposed
        self.inner, self.outer = reversed(weight.shape) if transposed else weight.shape
        kind = {"bfloat16": BFLOAT16, "float32": FLOAT32}[dtype]
        inner, outer, owned = self.inner, self.outer, []  # owned: (destroy, handle), destroyed in reverse order
        self._free = weakref.finalize(self, _destroy, owned)  # also what was made before a failed call

        def keep(destroy: str, handle):
            owned.append((getattr(dnn.lib, destroy), handle))
            return handle

        descriptor = dnn.descriptor
        source32 = keep("dnnl_memory_desc_destroy", descriptor([rows, inner], FLOAT32, [inner, 1]))
        source = keep("dnnl_memory_desc_destroy", descriptor([rows, inner], kind, [inner, 1]))
        target = keep("dnnl_memory_desc_destroy", descriptor([rows, outer], FLOAT32, [outer, 1]))
        chosen = keep("dnnl_memory_desc_destroy", descriptor([inner, outer], kind))
        matmul = ctypes.c_void_p()
        dnn.check(dnn.lib.dnnl_matmul_primitive_desc_create(ctypes.byref(matmul), dnn.engine, source, chosen, None,
                                                            target, None), "dnnl_matmul_primitive_desc_create")
        keep("dnnl_primitive_desc_destroy", matmul)
        info = ctypes.c_char_p()
        dnn.lib.dnnl_primitive_desc_query(matmul, QUERY_IMPL_INFO, 0, ctypes.byref(info))
        self.kernel = (info.value or b"?").decode()  # e.g. brg_matmul:avx512_core_bf16
        packed_layout = ctypes.c_void_p(dnn.lib.dnnl_primitive_desc_query_md(matmul, QUERY_WEIGHTS_MD, 0))
        self._matmul = keep("dnnl_primitive_destroy", dnn.primitive(matmul))
        self._packed = keep("dnnl_memory_destroy", dnn.memory(packed_layout))
        # the weight as stored: [in, out] row-major, or [out, in] read as [in, out] with strides (1, in)
        stored = keep("dnnl_memory_desc_destroy", descriptor([inner, outer], FLOAT32,
                                                             [1, inner] if transposed else [outer, 1]))
        packing = keep("dnnl_primitive_desc_destroy", dnn.reorder(stored, packed_layout))
        pack = keep("dnnl_primitive_destroy", dnn.primitive(packing))
        contiguous = weight.contiguous()
        stored_memory = keep("dnnl_memory_destroy", dnn.memory(stored, ctypes.c_void_p(contiguous.data_ptr())))
        dnn.run(pack, dnn.arguments([(ARG_SRC, stored_memory), (ARG_DST, self._packed)]))
        self._cast = None  # float32 x -> the bf16 buffer the product reads
        self._x = keep("dnnl_memory_destroy", dnn.memory(source32, ctypes.c_void_p(0)))
        self._y = keep("dnnl_memory_destroy", dnn.memory(target, ctypes.c_void_p(0)))
        operand = self._x
        if kind == BFLOAT16:
            casting = keep("dnnl_primitive_desc_destroy", dnn.reorder(source32, source))
            self._cast = keep("dnnl_primitive_destroy", dnn.primitive(casting))
            operand = keep("dnnl_memory_destroy", dnn.memory(source))
            self._cast_arguments = dnn.arguments([(ARG_SRC, self._x), (ARG_DST, operand)])
        self._arguments = dnn.arguments([(ARG_SRC, operand), (ARG_WEIGHTS, self._packed), (ARG_DST, self._y)])
        self._dnn = dnn

    def __call__(self, x: paddle.Tensor) -> paddle.Tensor:
        if x.shape != [self.rows, self.inner] or x.dtype != paddle.float32 or not x.place.is_cpu_place():
            return paddle.matmul(x, self.weight, transpose_y=self.transposed)
        x = x if x.is_contiguous() else x.contiguous()
        out = _C_ops.empty([self.rows, self.outer], paddle.float32, x.place)
        dnn, lib = self._dnn, self._dnn.lib
        lib.dnnl_memory_set_data_handle(self._x, x.data_ptr())
        lib.dnnl_memory_set_data_handle(self._y, out.data_ptr())
        if self._cast is not None:
            dnn.run(self._cast, self._cast_arguments)
        dnn.run(self._matmul, self._arguments)
        return out


def _destroy(owned: list) -> None:
    for destroy, handle in reversed(owned):
        destroy(handle)
