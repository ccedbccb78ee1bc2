"""models/transposes.py: a transpose laid out by Paddle's dense kernel equals the transposed view, value and
gradient."""
import numpy as np
import paddle
import pytest

from paddle_r1.models.transposes import transposed


@pytest.mark.parametrize("perm", [[0, 2, 1, 3], [3, 0, 2, 1], [1, 0]])
def test_transposed_is_the_transpose_laid_out(perm):
    rng = np.random.default_rng(0)
    data = rng.standard_normal([3, 4, 5, 6][:len(perm)]).astype("float32")
    x = paddle.to_tensor(data, stop_gradient=False)
    got = transposed(x, perm)
    assert got.is_contiguous() and got.shape == list(np.transpose(data, perm).shape)
    np.testing.assert_array_equal(got.numpy(), np.transpose(data, perm))
    weights = rng.standard_normal(got.shape).astype("float32")
    (got * paddle.to_tensor(weights)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.transpose(weights, np.argsort(perm)))


def test_dtypes_without_a_cpu_einsum_kernel_keep_the_view():
    x = paddle.arange(24, dtype="int64").reshape([2, 3, 4])
    half = paddle.randn([2, 3, 4]).astype("bfloat16")
    np.testing.assert_array_equal(transposed(x, [2, 0, 1]).numpy(), np.transpose(x.numpy(), [2, 0, 1]))
    assert transposed(half, [1, 0, 2]).shape == [3, 2, 4]
