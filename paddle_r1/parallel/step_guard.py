"""The last guard of an update: the weights an optimizer step wrote are checked for NaN and infinity, and a step
that wrote any is undone (weights and optimizer state as they were before it).

A finite loss and gradient norm do not make a finite update: a learning rate that overflows in float32 (1e39 is a
finite Python float, infinite in AdamW's float32 kernel), an overflow inside the optimizer, or a bad value from a
device writes NaN into the weights, and every later step trains and saves NaN. ``StepSnapshot`` keeps what a step
changes (the weights this rank updates, and the AdamW moments, beta powers and float32 master weights this rank
holds) in host memory buffers allocated once and refilled before each step, so a step can be put back exactly.
Why a copy: AdamW's update cannot be undone from its result (a NaN weight keeps nothing of the old one), and
checking before writing would mean running the update twice. The copy is kept off the accelerator (GPU memory is
what limits model size; host memory is larger) and, under sharding, covers this rank's share only. Its cost and the
check's, per step: ``python benchmarks/update_guard.py`` (docs/reference.md, Reliability).

Why the copy has a budget (config key ``undo_non_finite_updates: auto``, the default): the copy is about 14 bytes
per trainable weight (a 16-bit weight, float32 m, v and master weight), so a 7B full fine-tune without sharding
copies ~115 GB to pageable host memory on every rank before every step: more RAM than many machines have per GPU,
and tens of seconds a step. The check itself (``finite_flags``) costs one pass over the weights on the device and
one read of a few bytes; only the undo needs the copy. ``auto`` keeps the copy when it is at most
``memory.UNDO_COPY_BUDGET_GIB`` on every rank (LoRA, small models, a sharded share) and otherwise only detects: a
step that writes a non-finite weight stops the run before anything is saved, naming the newest checkpoint, which is
what a resume needs (the same as ``false``). The other designs weighed: copying a 1/N share on each replicated
rank and broadcasting it back on undo still moves 14/N bytes per weight each step and needs a collective per
tensor on the rare restore; an undo from the update's own inputs (AdamW's step run backwards from the gradient)
is not exact in floating point and is impossible once a moment is NaN. ``true`` and ``false`` keep their meaning.
"""
from __future__ import annotations

import numpy as np
import paddle

from .optimizer_state import state_tensors, stepping_optimizer, tensor_bytes


@paddle.no_grad()
def finite_flags(tensors: list) -> np.ndarray:
    """Whether each tensor holds only finite values, read from the device once for all of them. ``(t * 0).sum()``
    is 0 for a finite tensor and NaN for one holding NaN or infinity, in any dtype (a plain sum of finite float16
    weights can overflow), and costs one pass over the tensor: about half of ``isfinite(t).all()``, which writes a
    boolean tensor first, on the AMD Zen 4 it was measured on, and 1.8x it on an AVX2-only Zen 3
    (``benchmarks/update_guard.py``: a few milliseconds a step either way at 5M weights)."""
    if not tensors:
        return np.ones(0, dtype=bool)
    sums = paddle.stack([(t * 0).sum().astype("float32") for t in tensors])
    return np.isfinite(sums.numpy())


def step_tensors(optimizer, parameters: list) -> dict:
    """Everything a step of ``optimizer`` (the wrapper or the one that steps) writes, by a name that stays the same
    from step to step: ``parameters`` and the optimizer's state tensors (which may be replaced, by a resume's
    ``set_state_dict``, so they are looked up each time)."""
    return {**{f"param/{p.name}": p for p in parameters}, **state_tensors(stepping_optimizer(optimizer))}


def copy_bytes(optimizer, parameters: list) -> int:
    """Host bytes of a ``StepSnapshot`` of ``optimizer`` and ``parameters`` (once the optimizer state exists)."""
    return tensor_bytes(step_tensors(optimizer, parameters).values())


class StepSnapshot:
    """Copies of ``parameters`` and of ``optimizer``'s state (moments, beta powers, master weights), taken before a
    step by ``take`` and written back by ``restore``. The host buffers are allocated at the first ``take`` and
    reused: a step costs one copy of those tensors, no allocation."""

    def __init__(self, optimizer, parameters: list):
        self.optimizer = optimizer
        self.parameters = parameters
        self.buffers: dict[str, paddle.Tensor] = {}

    def _tensors(self) -> dict:
        return step_tensors(self.optimizer, self.parameters)

    @paddle.no_grad()
    def take(self) -> None:
        for name, tensor in self._tensors().items():
            buffer = self.buffers.get(name)
            if buffer is None or buffer.shape != tensor.shape or buffer.dtype != tensor.dtype:
                self.buffers[name] = tensor._copy_to(paddle.CPUPlace(), True)
            else:
                buffer.copy_(tensor, True)

    @paddle.no_grad()
    def restore(self) -> None:
        for name, tensor in self._tensors().items():
            tensor.copy_(self.buffers[name], True)
