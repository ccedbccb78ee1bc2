"""Transposes laid out by Paddle's transpose kernel.

Paddle 3's ``transpose`` returns a strided view; the first kernel that needs the data contiguous (a product, a scale,
a ``reshape`` that merges the moved axes) copies it with the strided-copy kernel, which on CPU takes ~8 ns an
element: 2.1 ms for a [16, 4, 64, 64] float32 tensor (one attention output of the speed anchor's training forward),
where the same permutation through ``einsum`` (Paddle's dense transpose kernel) takes 0.05 ms and its gradient as
little (``python benchmarks/experiments/written_gradients.py`` times both). The values are the same, bit for bit.
On a GPU the view stays a view: its strided copy is fast there, and ``einsum`` is on Paddle's AMP white list (under
``auto_cast`` it would compute in half precision). So does any dtype but float32 and float64, for which Paddle has no
CPU ``einsum`` kernel.
"""
from __future__ import annotations

import functools

import paddle

AXES = "abcdefgh"


@functools.lru_cache(maxsize=None)
def _equation(perm: tuple) -> str:
    source = AXES[:len(perm)]
    return f"{source}->{''.join(source[axis] for axis in perm)}"


def transposed(x: paddle.Tensor, perm) -> paddle.Tensor:
    """``x.transpose(perm)``, laid out contiguously on the CPU (see the module docstring)."""
    if not x.place.is_cpu_place() or x.dtype not in (paddle.float32, paddle.float64):
        return x.transpose(perm)
    return paddle.einsum(_equation(tuple(perm)), x)
