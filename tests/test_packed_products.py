"""MKL's packed products of the decode step (generation/packed_products.py) against Paddle's own matmul."""
import numpy as np
import paddle
import pytest

from paddle_r1.generation.packed_products import PackedWeight, mkl_library, packs

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
