"""``GraphedDecoder``'s protocol on the CPU. No CUDA graph runs here: ``HostFrozenGraph`` stands in for one, keeping
what a graph keeps of a step (its output tensor, rewritten by each replay; nothing run while recording; the host's
state as it was when recorded: the cache's host count and the steps counted), so a step that reads host state
replays wrong here as it would from a real graph. On a GPU, ``paddle-r1 selftest``'s ``cuda_graph_decode`` check runs
the real graphs."""
import logging

import numpy as np
import paddle
import pytest

from paddle_r1.generation import cuda_graphs, kv_cache
from paddle_r1.generation import decoder as decoders
from paddle_r1.generation.cuda_graphs import GraphedDecoder, graphs_off
from paddle_r1.generation.decoder import OneTokenDecoder, make_decoder
from paddle_r1.generation.generator import build_prompt_batch
from paddle_r1.generation.rollout import prefill
from paddle_r1.models.forward import RepeatedPrompt, repeat_rows

TEMPLATE = "{Question} Answer with a box."


class HostFrozenGraph:
    """A recorded ``decoder.compute(token)``: ``replay`` reruns it with the decoder's host state set back to the
    recording's and writes the result into ``out`` (NaN until the first replay: recording runs nothing)."""

    def __init__(self, compute, token, disturb: float = 0.0):
        self.decoder, self.compute, self.token, self.disturb = compute.__self__, compute, token, disturb
        self.frozen = (self.decoder.cache.length, self.decoder.steps)
        vocab = self.decoder.model.lm_head.weight.shape[0]
        self.out = paddle.full([token.shape[0], vocab], float("nan"))
        self.resets = 0

    def replay(self) -> None:
        cache, decoder = self.decoder.cache, self.decoder
        now = (cache.length, decoder.steps)
        cache.length, decoder.steps = self.frozen
        try:
            logits = self.compute(self.token)
        finally:
            cache.length, decoder.steps = now
        paddle.assign(logits + self.disturb * logits.abs().max(), self.out)

    def reset(self) -> None:
        self.resets += 1


def _recorder(graphs: list, disturb: float = 0.0, fails: bool = False):
    def capture(compute, token):
        if fails:
            raise RuntimeError("operation not permitted when stream is capturing")
        graph = HostFrozenGraph(compute, token, disturb)
        graphs.append(graph)
        return graph, graph.out
    return capture


def _on_the_device_slot(monkeypatch) -> None:
    """Caches written at their device slot (a GPU's way: no MKL copies), weights never packed."""
    monkeypatch.setattr(cuda_graphs._Switch, "off", None)
    monkeypatch.setattr(kv_cache, "float32_on_cpu", lambda tensor: False)
    monkeypatch.setattr(decoders, "packed", lambda *args, **kwargs: None)


@pytest.fixture
def device_slot_decoders(tiny, rec_samples, monkeypatch):
    """A function making (one-token decoder, its twin) over the same prompts (3 prompts x 2 rows), each cache written
    at its device slot (a GPU's way: no MKL copies, no packing) and grown by 2 slots at a time (a new block, so a new
    capture, every 2 steps)."""
    _on_the_device_slot(monkeypatch)
    monkeypatch.setattr(kv_cache, "GROWTH", 2)
    model, processor = tiny
    prompt, _ = build_prompt_batch(rec_samples[:3], processor, TEMPLATE)

    def make(steps: int) -> OneTokenDecoder:
        cache, _, next_position = prefill(model, prompt)
        return OneTokenDecoder(model, RepeatedPrompt(cache, 2), repeat_rows(prompt.attention_mask, 2),
                               repeat_rows(next_position, 2), steps, pack_after=0)
    return make


def _tokens(steps: int, rows: int = 6) -> paddle.Tensor:
    return paddle.to_tensor(np.random.default_rng(0).integers(0, 100, [rows, steps]))


@paddle.no_grad()
def test_replayed_steps_give_the_eager_steps_logits_across_cache_blocks(device_slot_decoders):
    """7 steps over blocks of 2 slots: a capture at each block's first step (4), the other steps replays, the first
    ``REPLAY_CHECKS`` of them checked against an eager step; every step's logits are the eager decoder's, and the
    graphs stay on. Unchecked replays return the graph's own output tensor."""
    steps, graphs = 7, []
    eager, graphed = device_slot_decoders(steps), GraphedDecoder(device_slot_decoders(steps))
    graphed._capture = _recorder(graphs)
    tokens, got = _tokens(steps), []
    for step in range(steps):
        got.append(graphed.step(tokens[:, step]))
        np.testing.assert_allclose(got[-1].numpy(), eager.step(tokens[:, step]).numpy(), rtol=0, atol=1e-6)
    assert graphs_off() is None
    assert len(graphs) == 4 and [g.resets for g in graphs] == [1, 1, 1, 0]  # one graph per block, the last kept
    assert graphed.replays == 4 + 3  # each capture replayed once, and each block's second step
    # no step returns a graph's own output tensor (step 5's replay, past the checks, returns a copy of it)
    assert not any(t is g.out for g in graphs for t in got)
    np.testing.assert_array_equal(got[5].numpy(), graphs[2].out.numpy())
    assert graphed.cache.length == eager.cache.length and int(graphed.cache.slot) == int(eager.cache.slot)


@paddle.no_grad()
def test_a_step_that_reads_the_hosts_count_is_caught_and_the_rollout_goes_on_eagerly(device_slot_decoders,
                                                                                    monkeypatch, caplog):
    """A step whose device work read the host's slot count (here: the mask opened at ``cache.length``) replays the
    count frozen at its capture. The first checked replay catches it, turns the graphs off with a warning, and every
    step's logits are still the eager decoder's; later steps never replay."""
    def open_at_the_hosts_count(cache):
        cache.mask[:, :, :, cache.length] = 0.0
    monkeypatch.setattr(kv_cache.TransposedKVCache, "open_slot", open_at_the_hosts_count)
    steps, graphs = 5, []
    eager, graphed = device_slot_decoders(steps), GraphedDecoder(device_slot_decoders(steps))
    graphed._capture = _recorder(graphs)
    tokens = _tokens(steps)
    with caplog.at_level(logging.WARNING, logger=cuda_graphs.__name__):
        for step in range(steps):
            np.testing.assert_allclose(graphed.step(tokens[:, step]).numpy(), eager.step(tokens[:, step]).numpy(),
                                       rtol=0, atol=1e-6)
    assert graphs_off() is not None and graphs_off().startswith("a replay of the decode step gave logits")
    assert len(graphs) == 1 and graphed.replays == 2  # its capture's replay (right: nothing moved yet), one more
    assert [r.message for r in caplog.records if "CUDA graphs off" in r.message] != []


@pytest.mark.parametrize("fault", ["capture raises", "replay disagrees"])
@paddle.no_grad()
def test_a_failed_capture_or_check_redoes_the_step_eagerly_and_turns_graphs_off(device_slot_decoders, fault):
    """A capture that raises (a kernel that syncs with the host, say), or a capture whose replay is off by 1% of the
    largest logit: the step is redone eagerly over whatever the replay wrote, so every step's logits are the eager
    decoder's; the graphs stay off for the process: a later rollout's decoder captures nothing."""
    steps, graphs = 4, []
    eager, graphed = device_slot_decoders(steps), GraphedDecoder(device_slot_decoders(steps))
    graphed._capture = _recorder(graphs, disturb=0.01 if fault == "replay disagrees" else 0.0,
                                 fails=fault == "capture raises")
    tokens = _tokens(steps)
    for step in range(steps):
        np.testing.assert_allclose(graphed.step(tokens[:, step]).numpy(), eager.step(tokens[:, step]).numpy(),
                                   rtol=0, atol=1e-6)
    expected = "capturing the decode step failed: RuntimeError" if fault == "capture raises" else "the captured step"
    assert graphs_off().startswith(expected)
    assert len(graphs) == (0 if fault == "capture raises" else 1)
    later = GraphedDecoder(device_slot_decoders(steps))
    later._capture = _recorder(graphs)
    later.step(tokens[:, 0])
    assert len(graphs) == (0 if fault == "capture raises" else 1) and later.replays == 0


def test_graphs_need_a_cache_written_at_the_device_slot_and_a_gpu(tiny, rec_samples, monkeypatch):
    """The CPU's float32 cache is written at the host's count (MKL): no graph can replay it, and ``make_decoder``
    with ``cuda_graphs`` on a CPU gives the plain one-token step."""
    monkeypatch.setattr(cuda_graphs._Switch, "off", None)
    model, processor = tiny
    prompt, _ = build_prompt_batch(rec_samples[:1], processor, TEMPLATE)
    with paddle.no_grad():
        cache, _, next_position = prefill(model, prompt)
        decoder = make_decoder(model, RepeatedPrompt(cache, 1), prompt.attention_mask, next_position, 4,
                               cuda_graphs=True)
    assert type(decoder) is OneTokenDecoder and not decoder.cache.writes_at_device_slot
    with pytest.raises(ValueError, match="written at the device's slot"):
        GraphedDecoder(decoder)


def _kernels_run(write) -> set:
    """The names of the operators ``write()`` runs (Paddle's profiler on the CPU)."""
    import paddle.profiler as profiler

    def names(node):
        yield node.name.split(" ")[0]
        for child in node.children_node:
            yield from names(child)

    run = profiler.Profiler(targets=[profiler.ProfilerTarget.CPU], on_trace_ready=lambda prof: None)
    run.start()
    write()
    run.stop()
    return {name for root in run.profiler_result.get_data().values() for name in names(root)}


def test_the_caches_writes_take_the_stride_kernels_and_graphs_refuse_the_flag_that_turns_them_off(
        device_slot_decoders):
    """The cache's writes at its device slot are setitem with a [1] device tensor: under FLAGS_use_stride_kernel
    (the default) Paddle runs its index_elementwise_put kernels, which read no host memory; with the flag off it
    runs index_put, which copies its index pointers from host memory at each call, and no graph is captured then."""
    decoder = device_slot_decoders(4)
    cache = decoder.cache
    rows, kv_heads, head_dim, _ = cache.keys[0].shape
    key = paddle.randn([rows, kv_heads, 1, head_dim])

    def write():
        cache.open_slot()
        cache.write(0, key, key)

    flag = "FLAGS_use_stride_kernel"
    assert paddle.get_flags([flag])[flag] and cuda_graphs.capture_hazard() is None
    assert {"index_elementwise_put_with_tensor_", "index_elementwise_put_"} <= _kernels_run(write)
    assert "index_put_" not in _kernels_run(write)
    paddle.set_flags({flag: False})
    try:
        assert "index_put_" in _kernels_run(write)
        assert flag in cuda_graphs.capture_hazard()
        with pytest.raises(ValueError, match=flag):
            GraphedDecoder(decoder)
    finally:
        paddle.set_flags({flag: True})
    GraphedDecoder(decoder)


def test_the_trainer_passes_rollout_cuda_graphs_to_its_rollouts_and_says_a_cpu_ignores_it(rollout_key_on_and_off):
    said = rollout_key_on_and_off("rollout_cuda_graphs")
    assert said[True][0].cuda_graphs
    assert "rollout engine: one_token; rollout_cuda_graphs ignored: no GPU here" in said[True][1]
    assert not said[False][0].cuda_graphs and "rollout_cuda_graphs" not in said[False][1]


@pytest.mark.parametrize("disturb", [0.0, 0.01])
def test_the_selftest_check_replays_every_step_over_three_blocks_and_fails_on_a_disagreement(tmp_path, monkeypatch,
                                                                                            disturb):
    """``paddle-r1 selftest``'s ``cuda_graph_decode`` (GPU-only) run here with the stand-in graph: 2 x GROWTH + 8
    steps in 3 cache blocks (blocks of 8 slots here: 24 steps), each step replayed, the logits the eager step's;
    replays off by 1% fail it, naming the decoder's own finding."""
    from paddle_r1.selftest import checks
    from paddle_r1.selftest.machine import inspect_machine
    from paddle_r1.selftest.tolerances import CheckFailed
    from paddle_r1.selftest.workspace import Workspace

    _on_the_device_slot(monkeypatch)
    monkeypatch.setattr(kv_cache, "GROWTH", 8)
    monkeypatch.setattr(cuda_graphs, "capture_cuda_graph", _recorder([], disturb=disturb))
    ws = Workspace(str(tmp_path), inspect_machine(), 2)
    if disturb:
        with pytest.raises(CheckFailed, match="^the decoder turned its CUDA graphs off: the captured step's replay "
                                              "gave logits"):
            checks.cuda_graph_decode(ws)
        return
    figure = checks.cuda_graph_decode(ws)
    assert figure.startswith(f"{2 * kv_cache.GROWTH + 8} steps x ") and ", 3 graphs: logits vs the eager" in figure
    assert "ms a step against" in figure
