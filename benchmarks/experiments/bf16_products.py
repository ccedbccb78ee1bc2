"""The decode step's products in bfloat16 on this CPU: the lever a bf16 rollout would pull, measured before building it.

    python benchmarks/experiments/bf16_products.py [--hidden 1024] [--intermediate 4096] [--rows 16] [--threads 1]

The one-token step multiplies 16 rows by each weight; in float32 on CPU it runs MKL's packed products
(``paddle_r1/generation/packed_products.py``), about level with the oneDNN kernel vLLM's CPU build runs. oneDNN,
which Paddle's CPU wheel ships (``paddle/libs/libdnnl.so.3``, reached here through its C API with ctypes), also
multiplies bfloat16 weights and activations into float32 outputs with the CPU's bf16 instructions (AVX-512 BF16 on
Zen 4 and Cooper Lake, AMX on Sapphire Rapids and later), where Paddle's own CPU kernels have none. Printed per
product of a decoder layer at the given sizes, milliseconds (median of 40 calls after a warm-up), the weight
prepacked once for each kernel: MKL's packed float32 (the step's), oneDNN float32, oneDNN bfloat16 (activations
already bf16), and the same with the activations' cast from float32 included; and each bf16 product's largest
difference from the float32 one, relative to its largest value (bf16 keeps 8 significant bits).

A bf16 rollout would be a separate mode (its tokens come from bf16 products, compared with a reference that also
runs bf16), not a change to the float32 figures.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import warnings

warnings.filterwarnings("ignore")

F32, BF16 = 3, 2  # dnnl_data_type_t
ARG_SRC, ARG_DST, ARG_WEIGHTS = 1, 17, 33  # DNNL_ARG_*, also reorder's FROM and TO
QUERY_IMPL_INFO, QUERY_WEIGHTS_MD, FORMAT_ANY = 8, 131, 1  # oneDNN 3.x's enum values (checked against 3.6's header)
MEMORY_ALLOCATE = 2 ** 64 - 1  # DNNL_MEMORY_ALLOCATE: the library allocates the buffer


class Arg(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_int), ("memory", ctypes.c_void_p)]


class OneDNN:
    """The few calls of oneDNN's C API a prepacked matrix product needs."""

    def __init__(self, path: str):
        self.lib = lib = ctypes.CDLL(path)
        lib.dnnl_primitive_desc_query_md.restype = ctypes.c_void_p
        lib.dnnl_primitive_desc_query_md.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
        lib.dnnl_memory_set_data_handle.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        lib.dnnl_primitive_execute.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
        self.engine, self.stream = ctypes.c_void_p(), ctypes.c_void_p()
        self.check(lib.dnnl_engine_create(ctypes.byref(self.engine), 1, 0), "engine")  # dnnl_cpu
        self.check(lib.dnnl_stream_create(ctypes.byref(self.stream), self.engine, 1), "stream")  # default flags

    @staticmethod
    def check(status: int, what: str) -> None:
        if status != 0:
            raise RuntimeError(f"oneDNN {what}: status {status}")

    def desc(self, shape, dtype, strides=None):
        """A memory descriptor: row-major ``strides`` (default: contiguous), or any layout the primitive picks."""
        dims = (ctypes.c_int64 * 12)(*shape)
        out = ctypes.c_void_p()
        if strides is None:
            self.check(self.lib.dnnl_memory_desc_create_with_tag(ctypes.byref(out), len(shape), dims, dtype,
                                                                 FORMAT_ANY), "descriptor")
        else:
            self.check(self.lib.dnnl_memory_desc_create_with_strides(
                ctypes.byref(out), len(shape), dims, dtype, (ctypes.c_int64 * 12)(*strides)), "descriptor")
        return out

    def memory(self, desc, handle):
        out = ctypes.c_void_p()
        self.check(self.lib.dnnl_memory_create(ctypes.byref(out), desc, self.engine, ctypes.c_void_p(handle)),
                   "memory")
        return out

    def run(self, primitive, args) -> None:
        array = (Arg * len(args))(*(Arg(a, m) for a, m in args))
        self.check(self.lib.dnnl_primitive_execute(primitive, self.stream, len(args), array), "execute")


class Prepacked:
    """x [rows, in] (``dtype``) @ weight [in, out] (float32 given, held in ``dtype`` in oneDNN's chosen layout) ->
    float32 [rows, out]."""

    def __init__(self, dnn: OneDNN, weight, rows: int, dtype: int):
        import paddle

        self.dnn, self.paddle = dnn, paddle
        inner, outer = weight.shape
        self.rows, self.outer = rows, outer
        src, dst = dnn.desc([rows, inner], dtype, [inner, 1]), dnn.desc([rows, outer], F32, [outer, 1])
        pd = ctypes.c_void_p()
        dnn.check(dnn.lib.dnnl_matmul_primitive_desc_create(ctypes.byref(pd), dnn.engine, src,
                                                            dnn.desc([inner, outer], dtype), None, dst, None),
                  "matmul")
        info = ctypes.c_char_p()
        dnn.lib.dnnl_primitive_desc_query(pd, QUERY_IMPL_INFO, 0, ctypes.byref(info))
        self.kernel = (info.value or b"?").decode()
        packed_desc = ctypes.c_void_p(dnn.lib.dnnl_primitive_desc_query_md(pd, QUERY_WEIGHTS_MD, 0))
        self.primitive = ctypes.c_void_p()
        dnn.check(dnn.lib.dnnl_primitive_create(ctypes.byref(self.primitive), pd), "primitive")
        self.weight = dnn.memory(packed_desc, MEMORY_ALLOCATE)
        plain = dnn.desc([inner, outer], F32, [outer, 1])
        self.source = weight.contiguous()  # kept alive until the reorder ran
        reorder_pd, reorder = ctypes.c_void_p(), ctypes.c_void_p()
        dnn.check(dnn.lib.dnnl_reorder_primitive_desc_create(ctypes.byref(reorder_pd), plain, dnn.engine,
                                                             packed_desc, dnn.engine, None), "reorder")
        dnn.check(dnn.lib.dnnl_primitive_create(ctypes.byref(reorder), reorder_pd), "reorder primitive")
        dnn.run(reorder, [(ARG_SRC, dnn.memory(plain, self.source.data_ptr())), (ARG_DST, self.weight)])
        self.src, self.dst = dnn.memory(src, 0), dnn.memory(dst, 0)

    def __call__(self, x):
        out = self.paddle.empty([self.rows, self.outer], dtype="float32")
        self.dnn.lib.dnnl_memory_set_data_handle(self.src, x.data_ptr())
        self.dnn.lib.dnnl_memory_set_data_handle(self.dst, out.data_ptr())
        self.dnn.run(self.primitive, [(ARG_SRC, self.src), (ARG_WEIGHTS, self.weight), (ARG_DST, self.dst)])
        return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--intermediate", type=int, default=4096)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [here, os.path.dirname(os.path.dirname(here))]
    import paddle
    from decode_products import timings  # beside this file

    from paddle_r1.cpu_math import choose_mkl_kernels
    from paddle_r1.generation.packed_products import PackedWeight

    choose_mkl_kernels()
    paddle.core.set_num_threads(args.threads)
    dnn = OneDNN(os.path.join(os.path.dirname(paddle.__file__), "libs", "libdnnl.so.3"))
    h, i, rows = args.hidden, args.intermediate, args.rows
    flags = open("/proc/cpuinfo").read().split("flags", 1)[1].split("\n", 1)[0].split()
    bf16 = [f for f in ("avx512_bf16", "amx_bf16") if f in flags] or ["none"]
    print(f"{rows} rows, hidden {h}, intermediate {i}, {args.threads} thread(s); bf16 instructions: {', '.join(bf16)}")
    print("| product | MKL packed f32 | oneDNN f32 | oneDNN bf16 | bf16 + the activations' cast | bf16 / MKL f32 "
          "| bf16 difference | oneDNN's bf16 kernel |")
    print("|---|---|---|---|---|---|---|---|")
    for name, (inner, outer) in {"qkv + out": (h, 2 * h), "gate/up": (h, 2 * i), "down": (i, h)}.items():
        weight, x = paddle.randn([inner, outer]), paddle.randn([rows, inner])
        x16 = x.astype("bfloat16")
        mkl, one32, one16 = PackedWeight(weight, rows), Prepacked(dnn, weight, rows, F32), Prepacked(dnn, weight,
                                                                                                    rows, BF16)
        want = mkl(x)
        gap = float((one16(x16) - want).abs().max()) / float(want.abs().max())
        calls = [lambda: mkl(x), lambda: one32(x), lambda: one16(x16), lambda: one16(x.astype("bfloat16"))]
        times = [1e3 * statistics.median(timings(call, 40, warmup=3)) for call in calls]
        print(f"| {name} [{rows}, {inner}] x [{inner}, {outer}] | " + " | ".join(f"{t:.3f}" for t in times)
              + f" | {times[3] / times[0]:.2f} | {gap:.1e} | {one16.kernel} |")


if __name__ == "__main__":
    main()
