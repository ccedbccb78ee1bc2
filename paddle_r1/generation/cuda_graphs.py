"""The one-token decode step replayed as CUDA graphs on a GPU (config key ``rollout_cuda_graphs``).

A decode step launches a few dozen kernels per layer for one token a row: on a GPU the host's launching of them, not
their arithmetic, bounds a small model's step, and takes a share of every token of a large one's. A CUDA graph
records the step's kernels once and launches them as one (Paddle's ``paddle.device.cuda.graphs.CUDAGraph``, as
FastDeploy captures its decode step in dygraph). What makes the step capturable is ``OneTokenDecoder``'s split of a
step: ``compute`` is the device's work alone (the slot it writes and the rotary row it takes are device tensors: no
host read, no host state changed), ``prepare`` and ``count`` are the host's and run around every replay.

A graph keeps the buffers it was captured with, so one is captured per block of the cache (``TransposedKVCache``
keeps its buffers for ``GROWTH`` steps). A block's first step runs eagerly; the cache's slot is stepped back and the
step captured at the same token and replayed, which must give the eager step's logits (it rewrites the same slot
with the same numbers). The first ``REPLAY_CHECKS`` replays after that are each checked against an eager step at the
same slot too (the slot stepped back again; the eager step's writes stand), so a step that froze a host value into
its graph fails there. A failed check, or an error while capturing or replaying, turns the graphs off for the rest
of the process with one warning naming why, and the step is redone eagerly at its slot: the rollout goes on, its
tokens unchanged.

Not yet run on a GPU, hence off by default: ``paddle-r1 selftest --only cuda_graph_decode`` runs it against the eager
step there. Read against Paddle 3.3's source, the step's writes at its device slot (setitem with a [1] int64 device
tensor: ``index_elementwise_put_with_tensor`` for the cache, ``index_elementwise_put`` for the mask's 0) pass the
index's device pointer as a kernel argument and read nothing from the host, and ``slot.add_`` is an elementwise
kernel; but only under ``FLAGS_use_stride_kernel`` (Paddle's default): with it off, setitem takes ``index_put``, which
copies its index pointers from pageable host memory at every call, a copy no capture can take, so graphs are not used
then (``capture_hazard``). ``tests/test_cuda_graphs.py`` runs the protocol on the CPU with a stand-in graph and shows
which kernel each flag value makes setitem run.
"""
from __future__ import annotations

import logging
from typing import Callable, Optional

import paddle

logger = logging.getLogger(__name__)

REPLAY_CHECKS = 2  # replays after a rollout's first capture checked against an eager step
AGREEMENT = 1e-3  # a checked replay's largest logit difference, as a share of the eager step's largest logit


class _Switch:
    """Why the graphs were turned off in this process (None: on)."""

    off: Optional[str] = None


def graphs_off() -> Optional[str]:
    """Why this process decodes without CUDA graphs after a failed check or capture (None: it does not)."""
    return _Switch.off


def capture_hazard() -> Optional[str]:
    """Why a decode step could not be captured in this process whatever the checks show (None: nothing known): the
    cache's writes at its device slot read host memory where Paddle's setitem does not take its stride kernels (see
    the module docstring)."""
    if not paddle.get_flags(["FLAGS_use_stride_kernel"])["FLAGS_use_stride_kernel"]:
        return ("FLAGS_use_stride_kernel is off: Paddle's setitem then writes the KV cache with index_put, which "
                "copies its index pointers from host memory at every step (unset the flag to use CUDA graphs)")
    return None


def capture_cuda_graph(compute: Callable, token: paddle.Tensor):
    """``compute(token)`` recorded as a CUDA graph: (the graph, whose ``replay`` reruns its kernels, and the output
    tensor the replays rewrite). Nothing runs while recording."""
    from paddle.device.cuda.graphs import CUDAGraph

    paddle.device.synchronize()
    graph = CUDAGraph()
    graph.capture_begin()
    try:
        logits = compute(token)
    finally:
        graph.capture_end()
    return graph, logits


class GraphedDecoder:
    """``OneTokenDecoder``'s steps as CUDA graph replays (see the module docstring), with its ``step`` and ``cache``.
    ``capture(decoder.compute, token)`` records a step (default ``capture_cuda_graph``; the tests give a CPU
    stand-in)."""

    def __init__(self, decoder, capture: Optional[Callable] = None):
        if not decoder.cache.writes_at_device_slot:
            raise ValueError("a captured decode step needs its cache written at the device's slot, not the host's "
                             "count (TransposedKVCache.writes_at_device_slot)")
        if (hazard := capture_hazard()) is not None:
            raise ValueError(f"a decode step cannot be captured here: {hazard}")
        self.decoder, self._capture = decoder, capture or capture_cuda_graph
        self.graph, self.logits, self.token = None, None, None
        self.block = 0  # the cache block the graph was captured in
        self.checks_left = REPLAY_CHECKS
        self.replays = 0

    @property
    def cache(self):
        return self.decoder.cache

    def step(self, token: paddle.Tensor) -> paddle.Tensor:
        """Next-token logits [rows, vocab] after ``token`` [rows] (a replay's: a copy of the graph's output, so no
        tensor the caller holds lives in a graph's memory pool when the graph is reset)."""
        decoder = self.decoder
        if _Switch.off is not None:
            self._release()
            return decoder.step(token)
        decoder.prepare(token.shape[0])
        if self.graph is None or self.block != decoder.cache.blocks:
            logits = self._capture_at(token)
        else:
            logits = self._replay(token)
        decoder.count()
        return logits

    def _capture_at(self, token: paddle.Tensor) -> paddle.Tensor:
        """A block's first step: eager, then captured at the same token and slot and replayed."""
        self._release()
        cache = self.decoder.cache
        eager = self.decoder.compute(token)
        cache.rewind_slot()
        self.token = token.clone()  # the graph's input, outside its memory pool
        try:
            self.graph, self.logits = self._capture(self.decoder.compute, self.token)
            self.graph.replay()
        except Exception as error:  # any failure here leaves the graphs off and the step to the eager path
            return self._eager_again(token, f"capturing the decode step failed: {type(error).__name__}: {error}")
        self.replays += 1
        self.block = cache.blocks
        why = _disagreement(self.logits, eager)
        return eager if why is None else self._eager_again(token, f"the captured step's replay {why}")

    def _replay(self, token: paddle.Tensor) -> paddle.Tensor:
        try:
            self.token.copy_(token, False)
            self.graph.replay()
        except Exception as error:
            return self._eager_again(token, f"replaying the decode step failed: {type(error).__name__}: {error}")
        self.replays += 1
        if not self.checks_left:
            return self.logits.clone()
        self.checks_left -= 1
        self.decoder.cache.rewind_slot()
        eager = self.decoder.compute(token)  # its writes stand, whatever the check finds
        why = _disagreement(self.logits, eager)
        if why is not None:
            self._turn_off(f"a replay of the decode step {why}")
        return eager

    def _eager_again(self, token: paddle.Tensor, why: str) -> paddle.Tensor:
        """Turn the graphs off (``why``) and redo this step eagerly at its slot, over whatever a failed capture or
        replay wrote there."""
        self._turn_off(why)
        cache = self.decoder.cache
        cache.set_slot(cache.length)
        return self.decoder.compute(token)

    def _turn_off(self, why: str) -> None:
        _Switch.off = why
        self._release()
        logger.warning("CUDA graphs off for the rest of this process (the rollouts decode eagerly, slower, the same "
                       "tokens): %s. Run paddle-r1 selftest --only cuda_graph_decode and send its report", why)

    def _release(self) -> None:
        """Reset the graph, which frees its memory pool, after dropping the output tensor that lives in it."""
        graph, self.graph, self.logits = self.graph, None, None
        if graph is not None:
            graph.reset()

    def __del__(self):
        if getattr(self, "graph", None) is not None:  # (not set when __init__ refused the decoder)
            self._release()


def _disagreement(replayed: paddle.Tensor, eager: paddle.Tensor) -> Optional[str]:
    """None when the replay's logits are the eager step's (to ``AGREEMENT`` of its largest), else how far apart."""
    replayed, eager = replayed.astype("float32"), eager.astype("float32")
    gap, scale = float((replayed - eager).abs().max()), float(eager.abs().max())
    if gap <= AGREEMENT * scale:
        return None
    return f"gave logits {gap:.3g} from the eager step's (largest {scale:.3g}; allowed {AGREEMENT:g} of it)"
