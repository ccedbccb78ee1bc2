"""The rollout's KV caches: every layer's keys and values in preallocated buffers, with the additive attention mask
over the same slots: ``StaticKVCache`` allocates room for the prompt and all the completion tokens once,
``TransposedKVCache`` for the prompt and the next ``GROWTH`` tokens, growing by ``GROWTH`` slots when full.

A decode step writes its token's slot in place, so no tensor grows (or is copied) token by token and the steps
between two growths have the same shapes. The prompt's padding and the slots not yet written are -inf in the mask; a
step opens its own slot before attending.

``TransposedKVCache`` writes at a slot held in a device tensor, by advanced-indexing setitem (Paddle's stride kernel
``index_elementwise_put_with_tensor`` inside: the index's device pointer is a kernel argument, nothing is read from or
copied out of host memory; ``cuda_graphs.capture_hazard``). No in-place op without a host read does it cheaper:
``put_along_axis_`` takes about as long and ``index_put_`` on a transposed view far longer; a basic-slicing write at a
host int, which a captured step cannot use, is cheaper. On the CPU, where the host count is the slot anyway, float32
buffers are written by MKL's copy routines at that count (``mkl.py``: one strided copy per buffer, 0.40x the setitem's
time at the decode step's sizes; ``python benchmarks/experiments/kv_cache_writes.py``, figures in
``benchmarks/README.md``).
"""
from __future__ import annotations

import paddle

from ..models.forward import RepeatedPrompt
from ..models.transposes import transposed
from .mkl import float32_on_cpu, write_rows, write_spaced


def _additive_mask(prompt_mask: paddle.Tensor, capacity: int, dtype) -> paddle.Tensor:
    """[rows, 1, 1, capacity]: 0 over the prompt's real tokens, -inf over its padding and the free slots."""
    rows, prompt_len = prompt_mask.shape
    allowed = paddle.concat([prompt_mask.astype("bool"), paddle.zeros([rows, capacity - prompt_len], "bool")], 1)
    return paddle.where(allowed, 0.0, float("-inf")).astype(dtype).reshape([rows, 1, 1, capacity])


class StaticKVCache:
    """Keys and values [rows, kv_heads, capacity, head_dim], answering the two calls paddleformers' attention makes
    of a cache (``update``, ``get_seq_length``): the cache of ``decoder.LayerDecoder``. The next slot is a Python
    int, since paddleformers' layers read the cache length on the host."""

    def __init__(self, prompt: RepeatedPrompt, prompt_mask: paddle.Tensor, capacity: int):
        """From the prompt's keys and values (already repeated per completion), in the first slots."""
        self.length = prompt.get_seq_length()
        self.keys, self.values = [], []
        for buffers, filled_layers in ((self.keys, prompt.keys), (self.values, prompt.values)):
            for filled in filled_layers:
                shape = filled.shape
                buffer = paddle.zeros([shape[0], shape[1], capacity, shape[3]], dtype=filled.dtype)
                buffer[:, :, :self.length] = filled
                buffers.append(buffer)
        self.mask = _additive_mask(prompt_mask, capacity, prompt.keys[0].dtype)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length

    def open_next(self) -> None:
        """Let every row attend to the slot the next token is written into."""
        self.mask[:, :, :, self.length] = 0.0

    def update(self, key: paddle.Tensor, value: paddle.Tensor, layer_idx: int):
        """Write this step's K/V at the next free slot; return the whole buffers (the mask hides empty slots)."""
        end = self.length + key.shape[2]
        self.keys[layer_idx][:, :, self.length:end] = key
        self.values[layer_idx][:, :, self.length:end] = value
        return self.keys[layer_idx], self.values[layer_idx]

    def advance(self) -> None:
        self.length += 1

    def filled(self) -> tuple[list, list]:
        """Every layer's keys and values [rows, kv_heads, written slots, head_dim] (a multi-turn episode carries
        them into its next turn)."""
        return ([k[:, :, :self.length] for k in self.keys], [v[:, :, :self.length] for v in self.values])


GROWTH = 128  # slots a TransposedKVCache's buffers grow by when full


class TransposedKVCache:
    """Every layer's keys [rows, kv_heads, head_dim, slots] (transposed: q @ K over keys stored this way is faster on
    CPU than a ``transpose_y`` product; ``benchmarks/experiments/decode_products.py``) and values [rows, kv_heads,
    slots, head_dim]: the cache of ``decoder.OneTokenDecoder``. The slot a step writes is a tensor on the device
    (``slot``, [1] int64), written and advanced there, so a decode step reads nothing from the host.

    The buffers hold the prompt and the next ``GROWTH`` slots, and grow by ``GROWTH`` slots (one copy) when full, up to
    ``capacity``: a step attends over the slots allocated so far, not over the whole capacity. Long completions made
    the decode step stream the cache (every layer's keys and values of every slot, masked or not) from memory at
    each token, so the rollout's time per token grew with the completion length (``benchmarks/grpo_step.py
    --new-tokens``); a growing cache runs long rollouts faster (``benchmarks/experiments/decode_levers.py``). Within a
    block of ``GROWTH`` steps every step has the same shapes and buffers (what a captured CUDA-graph step needs, one
    per block: ``blocks`` counts them).

    A step's work is split by where it runs: ``make_room`` and ``count_slot`` are the host's (growing, counting),
    ``open_slot`` and ``advance_slot`` the device's, and where the cache writes at its device slot
    (``writes_at_device_slot``: a GPU, a dtype MKL does not copy) they read nothing from the host."""

    def __init__(self, prompt: RepeatedPrompt, prompt_mask: paddle.Tensor, capacity: int):
        self.length = prompt.get_seq_length()  # slots written, counted on the host (never read from the device)
        self.capacity = capacity
        allocated = min(capacity, self.length + GROWTH)
        self.keys, self.values = [], []
        free = allocated - self.length
        for keys, values in zip(prompt.keys, prompt.values):  # the prompt's, then the free slots' zeros
            rows, kv_heads, _, head_dim = keys.shape
            self.keys.append(paddle.concat([transposed(keys, [0, 1, 3, 2]),
                                            paddle.zeros([rows, kv_heads, head_dim, free], dtype=keys.dtype)], axis=3))
            self.values.append(paddle.concat([values, paddle.zeros([rows, kv_heads, free, head_dim],
                                                                   dtype=values.dtype)], axis=2))
        self.mask = _additive_mask(prompt_mask, allocated, prompt.keys[0].dtype)
        self.slot = paddle.full([1], self.length, dtype="int64")
        self._one = paddle.ones_like(self.slot)
        # on the CPU, writes at the host count by MKL (see the module docstring): the mask's slot from these zeros
        self._open = paddle.zeros([self.mask.shape[0]], dtype=self.mask.dtype) if float32_on_cpu(self.mask) else None
        self.blocks = 1  # buffers allocated so far: the first, then one per growth

    @property
    def writes_at_device_slot(self) -> bool:
        """Whether the device's half of a step (``open_slot``, ``write``, ``advance_slot``) reads nothing from the
        host: it writes at ``slot``, not at the host's count (as MKL's copies do on the CPU)."""
        return self._open is None

    def make_room(self) -> None:
        """(Host) Grow the buffers when every slot allocated is written: the next step's buffers are new ones."""
        if self.length == self.mask.shape[-1]:
            self._grow()
            self.blocks += 1

    def open_slot(self) -> None:
        """(Device) Let every row attend to the slot this step writes."""
        if self._open is None:
            self.mask[:, :, :, self.slot] = 0.0
        else:
            write_spaced(self._open, self.mask, self.length, self.mask.shape[-1])

    def _grow(self) -> None:
        added = min(GROWTH, self.capacity - self.length)
        if added <= 0:
            raise ValueError(f"the KV cache is full: all {self.capacity} slots are written")
        self.keys = [paddle.concat([k, paddle.zeros(k.shape[:3] + [added], dtype=k.dtype)], axis=3) for k in self.keys]
        self.values = [paddle.concat([v, paddle.zeros([v.shape[0], v.shape[1], added, v.shape[3]], dtype=v.dtype)],
                                     axis=2) for v in self.values]
        closed = paddle.full(self.mask.shape[:3] + [added], float("-inf"), dtype=self.mask.dtype)
        self.mask = paddle.concat([self.mask, closed], axis=3)

    def write(self, layer: int, key: paddle.Tensor, value: paddle.Tensor) -> tuple[paddle.Tensor, paddle.Tensor]:
        """This token's key and value [rows, kv_heads, 1, head_dim] into their slot; the layer's whole buffers."""
        rows, kv_heads, _, head_dim = key.shape
        keys, values = self.keys[layer], self.values[layer]
        if self._open is None:
            keys[:, :, :, self.slot] = key.reshape([rows, kv_heads, head_dim, 1])  # its transpose: one slot
            values[:, :, self.slot] = value
        else:  # the key's numbers one slot row apart; the value's rows of head_dim one slot block apart
            slots = keys.shape[-1]
            write_spaced(key, keys, self.length, slots)
            write_rows(value, values, self.length * head_dim, rows * kv_heads, slots * head_dim)
        return keys, values

    def advance_slot(self) -> None:
        """(Device) The next step writes the next slot."""
        self.slot.add_(self._one)

    def rewind_slot(self) -> None:
        """(Device) Undo ``advance_slot``: the next step writes this step's slot again."""
        self.slot.subtract_(self._one)

    def set_slot(self, slot: int) -> None:
        """(Device, from the host) The next step writes ``slot``."""
        self.slot.fill_(slot)

    def count_slot(self) -> None:
        """(Host) Count the slot a step wrote."""
        self.length += 1

    def filled(self) -> tuple[list, list]:
        """As ``StaticKVCache.filled`` (keys back in [rows, kv_heads, slots, head_dim]), from the host's count."""
        return ([k[:, :, :, :self.length].transpose([0, 1, 3, 2]) for k in self.keys],
                [v[:, :, :self.length] for v in self.values])
