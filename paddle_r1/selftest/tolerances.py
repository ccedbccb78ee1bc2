"""How close two computations of the same thing must be, per dtype, and how each distance is measured.

float32's limits are 10-100 times the distances the CPU checks measure here (``paddle-r1 selftest`` prints each
distance beside its limit; docs/reference.md: selftest). The 16-bit limits follow from the format's precision: bfloat16
keeps 8 significant bits (a rounding error of 2^-8 = 3.9e-3 per operation), float16 11 (4.9e-4), and a forward through a
few layers and a softmax adds up a few such errors. float32 on a GPU gets float16's: Paddle lets cuBLAS multiply
float32 in TF32 (11 significant bits) from sm80 unless told otherwise. None of these has been measured on a GPU yet:
a first GPU run that fails only by a distance a little over its limit is worth a report (the JSON holds the figure).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class CheckFailed(AssertionError):
    """A check ran and measured something wrong (as opposed to an exception from the code it exercises)."""


@dataclass(frozen=True)
class Tolerance:
    logprobs: float  # max |a - b| of per-token log-probabilities, in nats
    gradients: float  # ||a - b|| / ||b|| over all gradients together
    logits: float  # max |a - b| / max |b| of next-token logits
    # ||a - b|| / ||b - initial||: a difference of trained weights as a share of how far training moved them
    weights: float
    loss: float  # max |a - b| of logged per-step losses, in the loss's own units (GRPO losses here are ~1e-3)
    grad_norm: float  # |a - b| / |b| of logged gradient norms


TOLERANCES = {
    "float32": Tolerance(logprobs=1e-5, gradients=1e-5, logits=1e-4, weights=1e-3, loss=1e-6, grad_norm=1e-5),
    "bfloat16": Tolerance(logprobs=5e-2, gradients=5e-2, logits=5e-2, weights=0.1, loss=2e-4, grad_norm=5e-2),
    "float16": Tolerance(logprobs=1e-2, gradients=1e-2, logits=1e-2, weights=0.05, loss=5e-5, grad_norm=1e-2),
}


def tolerance_for(dtype: str, on_gpu: bool) -> Tolerance:
    """float32 on a GPU is held to float16's limits (TF32 products, see the module docstring)."""
    return TOLERANCES["float16" if dtype == "float32" and on_gpu else dtype]


def within(what: str, distance: float, limit: float) -> str:
    """``"what 3.1e-07 (limit 1e-05)"``; raises ``CheckFailed`` when ``distance`` is over ``limit`` or not a number."""
    text = f"{what} {distance:.2g} (limit {limit:.0e})"
    if not distance <= limit:  # NaN fails too
        raise CheckFailed(f"{text}: over the limit")
    return text


def _flat(arrays) -> np.ndarray:
    return np.concatenate([np.asarray(a, dtype="float64").ravel() for a in arrays])


def max_abs_difference(a, b) -> float:
    return float(np.abs(np.asarray(a, "float64") - np.asarray(b, "float64")).max())


def largest_change(after: dict, before: dict) -> float:
    """max |after - before| over every tensor (name -> array) of ``before``."""
    return max(max_abs_difference(after[name], before[name]) for name in before)


def relative_difference(a: list, b: list) -> float:
    """||a - b|| / ||b|| over lists of arrays taken as one vector."""
    a, b = _flat(a), _flat(b)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def relative_to_largest(a, b) -> float:
    """max |a - b| / max |b|."""
    b = np.asarray(b, "float64")
    return max_abs_difference(a, b) / max(float(np.abs(b).max()), 1e-30)


def relative_to_movement(a: dict, b: dict, initial: dict) -> float:
    """||a - b|| / ||b - initial|| over every tensor of ``b`` (name -> array): how much two trainings from
    ``initial`` ended apart, as a share of how far ``b``'s training moved."""
    names = sorted(b)
    moved = _flat([b[n] for n in names]) - _flat([initial[n] for n in names])
    apart = _flat([a[n] for n in names]) - _flat([b[n] for n in names])
    return float(np.linalg.norm(apart) / max(np.linalg.norm(moved), 1e-30))
