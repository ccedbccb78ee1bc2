"""The one-token decoder's cache write (``generation/kv_cache.py``, ``TransposedKVCache.write``): this token's key and
value into the slot held by a device tensor (``slot``, [1] int64, so the step reads nothing from the host), by each op
that can do it in place without a host read (and, as the floor, a basic-slicing write at a slot the host knows, which a
captured step could not use), against ``buffer[:, :, slot] = value`` (the advanced-indexing setitem, a GPU's way:
``index_elementwise_put_with_tensor`` inside); and MKL's strided copies at the host's slot, the CPU's way
(``generation/mkl.py``: ``cblas_scopy`` for the key, ``MKL_Somatcopy`` for the value). Every candidate's result is
checked equal to the setitem's before it is timed.

    python benchmarks/experiments/kv_cache_writes.py [--repeats 200]

Prints, per cache size (rows x kv_heads x slots x head_dim, float32 on CPU), microseconds per write of one layer's
key and value (median of ``--repeats``) and each candidate's time over the setitem's, and the CPU model.
"""
from __future__ import annotations

import argparse
import statistics
import timeit
import warnings

warnings.filterwarnings("ignore")

HOST_SLOT = [0]  # the reference row's slot, set per size (a decode step may not read it from the device)
SIZES = [(16, 2, 256, 64), (16, 2, 1152, 64), (8, 4, 2432, 128)]  # speed anchor; its 1024-token rollout; 7B-like


def candidates(paddle):
    """name -> write(keys [r, k, d, s], values [r, k, s, d], slot [1], key [r, k, 1, d], value [r, k, 1, d])."""

    def setitem(keys, values, slot, key, value):
        rows, kv_heads, _, head_dim = key.shape
        keys[:, :, :, slot] = key.reshape([rows, kv_heads, head_dim, 1])
        values[:, :, slot] = value

    def put_along_axis(keys, values, slot, key, value):
        rows, kv_heads, _, head_dim = key.shape
        key_t = key.reshape([rows, kv_heads, head_dim, 1])
        keys.put_along_axis_(slot.reshape([1, 1, 1, 1]).expand(key_t.shape), key_t, 3)
        values.put_along_axis_(slot.reshape([1, 1, 1, 1]).expand(value.shape), value, 2)

    def index_put(keys, values, slot, key, value):
        rows, kv_heads, _, head_dim = key.shape
        # index_put_ takes one index tensor per leading axis: the slot axis moved to the front of a view
        keys_view = keys.transpose([3, 0, 1, 2])
        paddle.index_put_(keys_view, (slot,), key.reshape([1, rows, kv_heads, head_dim]))
        values_view = values.transpose([2, 0, 1, 3])
        paddle.index_put_(values_view, (slot,), value.reshape([1, rows, kv_heads, head_dim]))

    def host_slice(keys, values, slot, key, value):  # the floor: a basic-slicing write, but its slot is a host int
        rows, kv_heads, _, head_dim = key.shape
        at = HOST_SLOT[0]
        keys[:, :, :, at:at + 1] = key.reshape([rows, kv_heads, head_dim, 1])
        values[:, :, at:at + 1] = value

    def mkl_copies(keys, values, slot, key, value):  # the CPU's way: the host's slot, straight into the buffers
        from paddle_r1.generation.mkl import write_rows, write_spaced

        rows, kv_heads, slots, head_dim = values.shape
        write_spaced(key, keys, HOST_SLOT[0], slots)
        write_rows(value, values, HOST_SLOT[0] * head_dim, rows * kv_heads, slots * head_dim)

    return {"setitem (GPU)": setitem, "MKL copies at a host int (CPU)": mkl_copies,
            "reference: slice at a host int": host_slice, "put_along_axis_": put_along_axis,
            "index_put_ on a transposed view": index_put}


def cpu_model() -> str:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "unknown CPU")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    import numpy as np
    import paddle

    paddle.set_device("cpu")
    print(f"{cpu_model()}, paddle {paddle.__version__}")
    ops = candidates(paddle)
    for rows, kv_heads, slots, head_dim in SIZES:
        key = paddle.randn([rows, kv_heads, 1, head_dim])
        value = paddle.randn([rows, kv_heads, 1, head_dim])
        slot = paddle.full([1], slots // 2, dtype="int64")
        HOST_SLOT[0] = slots // 2
        results, times = {}, {}
        for name, write in ops.items():
            keys = paddle.zeros([rows, kv_heads, head_dim, slots])
            values = paddle.zeros([rows, kv_heads, slots, head_dim])
            try:
                write(keys, values, slot, key, value)
            except Exception as e:  # an op this Paddle lacks or refuses: shown, not timed
                print(f"  {name}: {type(e).__name__}: {str(e).splitlines()[0][:100]}")
                continue
            results[name] = (keys.numpy(), values.numpy())
            times[name] = 1e6 * statistics.median(timeit.repeat(lambda: write(keys, values, slot, key, value),
                                                                 number=1, repeat=args.repeats))
        reference = results["setitem (GPU)"]
        print(f"\ncache {rows} x {kv_heads} x {slots} x {head_dim}")
        print(f"{'write':<34}{'us':>9}{'/ setitem':>11}  same result")
        for name, us in times.items():
            same = all(np.array_equal(a, b) for a, b in zip(results[name], reference))
            print(f"{name:<34}{us:>9.1f}{us / times['setitem (GPU)']:>11.2f}  {same}")


if __name__ == "__main__":
    main()
