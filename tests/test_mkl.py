"""The decode step's MKL routines: packed products (generation/packed_products.py) against Paddle's own matmul, and
the cache's strided writes (generation/mkl.py) against numpy's."""
import numpy as np
import paddle
import pytest

from paddle_r1.generation.mkl import mkl_library, write_rows, write_spaced
from paddle_r1.generation.packed_products import PackedWeight, packs

pytestmark = pytest.mark.skipif(mkl_library() is None, reason="this Paddle build ships no MKL with the packed API")


@pytest.mark.parametrize("transposed", [False, True])
def test_a_packed_weight_multiplies_as_paddle_does(transposed):
    """x @ W for a linear weight [in, out], x @ W^T for a head's [out, in]; a non-contiguous x is read right."""
    rng = np.random.default_rng(0)
    weight = paddle.to_tensor(rng.standard_normal([48, 80] if transposed else [80, 48]).astype("float32"))
    packed = PackedWeight(weight, rows=6, transposed=transposed)
    assert (packed.inner, packed.outer) == (80, 48)
    wide = paddle.to_tensor(rng.standard_normal([6, 160]).astype("float32"))
    for x in (wide[:, :80], wide[:, 80:].contiguous()):
        got = packed(x)
        assert got.shape == [6, 48]
        np.testing.assert_allclose(got.numpy(), paddle.matmul(x, weight, transpose_y=transposed).numpy(),
                                   rtol=1e-5, atol=1e-5)


def test_another_row_count_or_dtype_takes_paddles_product():
    rng = np.random.default_rng(1)
    weight = paddle.to_tensor(rng.standard_normal([16, 8]).astype("float32"))
    packed = PackedWeight(weight, rows=4)
    x = paddle.to_tensor(rng.standard_normal([3, 16]).astype("float32"))
    np.testing.assert_allclose(packed(x).numpy(), (x @ weight).numpy(), rtol=1e-6)
    assert not packs(weight.astype("bfloat16")) and not packs(paddle.zeros([2, 3, 4]))


def test_strided_writes_land_where_numpy_puts_them():
    """One slot of a transposed key cache [rows, heads, dim, slots] (every slots-th number), of a value cache [rows,
    heads, slots, dim] (rows of dim a slot block apart), from a contiguous and a strided source; nothing else moves."""
    rng = np.random.default_rng(2)
    keys = rng.standard_normal([3, 2, 4, 7]).astype("float32")
    values = rng.standard_normal([3, 2, 7, 4]).astype("float32")
    wide = paddle.to_tensor(rng.standard_normal([3, 2, 1, 8]).astype("float32"))
    for key, value, slot in ((wide[..., :4].contiguous(), wide[..., 4:], 5), (wide[..., 4:], wide[..., :4], 0)):
        assert not value.is_contiguous() or not key.is_contiguous()
        key_buffer, value_buffer = paddle.to_tensor(keys), paddle.to_tensor(values)
        write_spaced(key, key_buffer, slot, 7)
        write_rows(value, value_buffer, slot * 4, 6, 7 * 4)
        want_keys, want_values = keys.copy(), values.copy()
        want_keys[:, :, :, slot] = key.numpy()[:, :, 0]
        want_values[:, :, slot] = value.numpy()[:, :, 0]
        np.testing.assert_array_equal(key_buffer.numpy(), want_keys)
        np.testing.assert_array_equal(value_buffer.numpy(), want_values)
