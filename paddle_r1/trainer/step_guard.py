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
"""
from __future__ import annotations

import numpy as np
import paddle

from ..memory import stepping_optimizer


@paddle.no_grad()
def finite_flags(tensors: list) -> np.ndarray:
    """Whether each tensor holds only finite values, read from the device once for all of them. ``(t * 0).sum()``
    is 0 for a finite tensor and NaN for one holding NaN or infinity, in any dtype (a plain sum of finite float16
    weights can overflow), and costs one pass over the tensor: about half of ``isfinite(t).all()``, which writes a
    boolean tensor first (``benchmarks/update_guard.py``)."""
    if not tensors:
        return np.ones(0, dtype=bool)
    sums = paddle.stack([(t * 0).sum().astype("float32") for t in tensors])
    return np.isfinite(sums.numpy())


class StepSnapshot:
    """Copies of ``parameters`` and of ``optimizer``'s state (moments, beta powers, master weights), taken before a
    step by ``take`` and written back by ``restore``. The host buffers are allocated at the first ``take`` and
    reused: a step costs one copy of those tensors, no allocation."""

    def __init__(self, optimizer, parameters: list):
        self.optimizer = stepping_optimizer(optimizer)
        self.parameters = parameters
        self.buffers: dict[str, paddle.Tensor] = {}

    def _tensors(self) -> dict:
        """Everything a step writes, by a name that stays the same from step to step (the optimizer's state
        tensors may be replaced, by a resume's ``set_state_dict``, so they are looked up each time)."""
        named = {f"param/{p.name}": p for p in self.parameters}
        for kind, per_param in self.optimizer._accumulators.items():
            named.update({f"{kind}/{name}": t for name, t in per_param.items()})
        named.update({f"master/{name}": t for name, t in getattr(self.optimizer, "_master_weights", {}).items()})
        return named

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
