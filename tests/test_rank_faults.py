"""Faults on one rank of a 2-rank job (gloo on CPU): what one rank saw never changes the shape of what the ranks
send each other, the logged numbers are those of the whole global batch, a late rank is waited for up to
``collective_timeout`` and then named with its phase, and a job whose launcher or one of whose ranks is killed
ends whole, fast, without writing another checkpoint."""
import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml

from dp_worker import train_and_dump
from forked_ranks import spawn_ranks

from paddle_r1.trainer.sampler import PromptSampler

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
G = 3  # completions per prompt
SEED = 11


def _settings(model_dir, data, out, **extra):
    return {**dict(model_name_or_path=model_dir, data_path=data, output_dir=str(out),
                   reward_funcs=["reward_helpers:inf_if_poisoned", "iou"], num_generations=G,
                   per_device_train_batch_size=2 * G, max_completion_length=6, learning_rate=5e-3, max_steps=2,
                   save_steps=100, use_visualdl=False, disable_tqdm=True, seed=SEED, beta=0.02,
                   log_completions_steps=1), **extra}


@pytest.fixture(scope="module")
def uneven_data(tmp_path_factory, rec_jsonl):
    """The synthetic REC set with, in the first global batch (2 prompts per rank), rank 0's first image
    truncated and rank 1's first sample marked ``poison`` (its reward is inf), and in the second only rank 1's
    last sample poisoned: step 1 has as many extra metric keys on each rank but other names (the silently wrong
    form), step 2 an extra key on rank 1 alone (the crash)."""
    folder = tmp_path_factory.mktemp("uneven")
    rows = [json.loads(line) for line in open(rec_jsonl)]
    source = os.path.dirname(rec_jsonl)
    order = PromptSampler(len(rows), 4, SEED)
    first, second = order.next_batch(), order.next_batch()
    broken = rows[first[0]]
    data = open(os.path.join(source, broken["image"]), "rb").read()
    with open(folder / "truncated.png", "wb") as f:
        f.write(data[:len(data) // 2])
    broken["image"] = str(folder / "truncated.png")
    rows[first[2]]["poison"] = True
    rows[second[3]]["poison"] = True
    for row in rows:
        if not os.path.isabs(row["image"]):
            row["image"] = os.path.join(source, row["image"])
    path = folder / "rec.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


GLOO_TIMEOUT_TEST = "test_a_rank_later_than_gloos_own_timeout_is_waited_for"


@pytest.fixture(scope="module", autouse=True)
def rank_later_than_gloos_timeout(request, tmp_path_factory, tiny_model_dir, rec_jsonl):
    """The 2-rank run of ``test_a_rank_later_than_gloos_own_timeout_is_waited_for``, started with the file's first
    test and joined by that test, the file's last: the 35 s rank 1 sleeps pass while the other tests run. Not
    started when that test is not selected; its ranks are ended when the file is done."""
    if not any(item.name == GLOO_TIMEOUT_TEST for item in request.session.items):
        yield None
        return
    folder = tmp_path_factory.mktemp("gloo_timeout")
    settings = _settings(tiny_model_dir, rec_jsonl, folder / "run", reward_funcs=["reward_helpers:slow_on_rank"],
                         reward_kwargs={"reward_helpers:slow_on_rank": {"seconds": 35.0}}, max_steps=1)
    ranks = spawn_ranks(train_and_dump, args=(settings, str(folder)), join=False)
    yield ranks, folder
    for process in ranks.processes:
        if process.is_alive():
            process.terminate()
        process.join()


def _nanstd(values):
    kept = np.asarray([v for v in values if v is not None], dtype="float64")
    return float(kept.std(ddof=1))


def _truth(rows: list[dict]) -> dict:
    """A step's numbers computed from its completions (every rank's, as completions.jsonl holds them)."""
    rewards = [r["reward"] for r in rows]
    truth = {"reward": float(np.mean([r for r in rewards if r is not None])), "reward_std": _nanstd(rewards)}
    for name in ("reward_helpers:inf_if_poisoned", "iou"):
        column = [r[f"reward/{name}"] for r in rows]
        truth[f"rewards/{name}/mean"] = float(np.mean([v for v in column if v is not None]))
        truth[f"rewards/{name}/std"] = _nanstd(column)
    zero = [len(set(rewards[i:i + G])) == 1 for i in range(0, len(rewards), G)]
    truth["frac_reward_zero_std"] = float(np.mean(zero))
    return truth


@pytest.mark.timeout(600)
def test_uneven_events_on_one_rank_log_the_global_batch(tmp_path, tiny_model_dir, uneven_data):
    """Before: step 1 logged means of mismatched keys (a skip count averaged with a non-finite count), step 2
    died in gloo (``op.preamble.length <= op.nbytes``), and completions.jsonl held rank 0's rows only."""
    spawn_ranks(train_and_dump, args=(_settings(tiny_model_dir, uneven_data, tmp_path / "run"), str(tmp_path)))
    metrics = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    rows = [json.loads(line) for line in open(tmp_path / "run" / "completions.jsonl")]
    assert [m["step"] for m in metrics] == [1, 2]
    by_step = {s: [r for r in rows if r["step"] == s] for s in (1, 2)}
    # step 1: rank 0 lost its truncated sample (1 prompt), rank 1 kept both; step 2: 2 prompts each
    assert [len(by_step[s]) for s in (1, 2)] == [3 * G, 4 * G]
    for m in metrics:
        truth = _truth(by_step[m["step"]])
        for key, value in truth.items():
            np.testing.assert_allclose(m[key], value, rtol=1e-5, err_msg=f"step {m['step']}: {key}")
        assert m["rewards/reward_helpers:inf_if_poisoned/non_finite"] == G  # summed, not averaged over ranks
        assert m["learning_rate"] == 5e-3 and 0 < m["entropy"] < 10 and m["completion_length/max"] <= 6
    assert metrics[0]["data/skipped_samples"] == 1 and "data/skipped_samples" not in metrics[1]
    # every rank logged the same numbers it gathered: rank 1's history equals rank 0's
    np.testing.assert_array_equal(np.load(tmp_path / "rank0_rewards.npy"), np.load(tmp_path / "rank1_rewards.npy"))


@pytest.mark.timeout(300)
def test_a_late_rank_is_named_with_its_phase_past_collective_timeout(tmp_path, tiny_model_dir, rec_jsonl):
    """Rank 1's reward takes 10 s; with collective_timeout 5 rank 0 stops at the step's first collective after the
    rollout and says which rank it waited for and what that rank was doing. (The timeout also bounds the ranks'
    model loading, one after the other: at 2 s a busy machine's load crossed it first.)"""
    settings = _settings(tiny_model_dir, rec_jsonl, tmp_path / "run", reward_funcs=["reward_helpers:slow_on_rank"],
                         reward_kwargs={"reward_helpers:slow_on_rank": {"seconds": 10.0}}, collective_timeout=5.0,
                         max_steps=1)
    start = time.monotonic()
    with pytest.raises(Exception) as failure:
        spawn_ranks(train_and_dump, args=(settings, str(tmp_path)))
    message = str(failure.value)
    assert "RankFailure" in message and "rank 0 waited" in message, message
    assert "for rank 1 (in phase 'rewards'" in message and "collective_timeout = 5 s" in message, message
    assert time.monotonic() - start < 120
    assert not os.path.isdir(tmp_path / "run" / "checkpoint-1")


@pytest.mark.parametrize("heartbeat_timeout", [2.0, 5.0])
def test_a_rank_whose_heartbeat_stops_is_named_after_heartbeat_timeout(heartbeat_timeout):
    """Two ranks' watches on a real TCP store; rank 1's heartbeat thread stops (as when its process is killed) and
    rank 0, waiting for it at a check-in, ends after ``heartbeat_timeout`` seconds without a beat, naming it."""
    from paddle.base.core import TCPStore

    from paddle_r1.parallel.rank_watch import RankFailure, RankWatch

    port = _free_port()
    store = TCPStore("127.0.0.1", port, True, 1, 60)  # noqa: F841 (the job's store: it serves while referenced)
    watches = [RankWatch(rank, 2, collective_timeout=100.0, dead_after=heartbeat_timeout,
                         endpoint=("127.0.0.1", port)) for rank in (0, 1)]
    try:
        watches[1].phase("rewards")
        watches[1].stop()
        start = time.monotonic()
        with pytest.raises(RankFailure) as failure:
            watches[0].arrive("the step's metrics")
        waited = time.monotonic() - start
    finally:
        watches[0].stop()
    assert heartbeat_timeout <= waited < heartbeat_timeout + 20, waited
    message = str(failure.value)
    assert "waiting at the step's metrics: rank 1 (in phase 'rewards'" in message, message
    assert f"past heartbeat_timeout = {heartbeat_timeout:g} s" in message, message


def test_a_collective_that_failed_inside_the_backward_is_named_after_the_stopped_rank(monkeypatch):
    """A gradient all-reduce that fails inside the backward's hooks reaches the trainer as Paddle's SystemError
    caused by gloo's TIMEOUT: with rank 1's heartbeat stopped, rank 0 names it and quotes the TIMEOUT, not the
    SystemError (the two-node kill test meets this when the kill lands in the backward). Heartbeats every 0.5 s
    instead of 2: ``explain`` watches for three of them."""
    from paddle.base.core import TCPStore

    from paddle_r1.parallel import rank_watch
    from paddle_r1.parallel.rank_watch import RankFailure, RankWatch

    monkeypatch.setattr(rank_watch, "HEARTBEAT_SECONDS", 0.5)
    port = _free_port()
    store = TCPStore("127.0.0.1", port, True, 1, 60)  # noqa: F841 (the job's store: it serves while referenced)
    watches = [RankWatch(rank, 2, collective_timeout=100.0, endpoint=("127.0.0.1", port)) for rank in (0, 1)]
    try:
        watches[1].phase("backward")
        watches[1].stop()
        try:
            try:
                raise RuntimeError("[gloo/transport/tcp/pair.cc:584] TIMEOUT self_rank = 0 pair_rank = 1\nmore")
            except RuntimeError as timeout:
                raise SystemError("<built-in function run_backward> returned a result with an exception set") \
                    from timeout
        except SystemError as wrapped:
            explained = watches[0].explain(wrapped)
    finally:
        watches[0].stop()
    assert isinstance(explained, RankFailure), explained
    message = str(explained)
    assert "rank 1 (in phase 'backward'" in message and "stopped" in message, message
    assert message.endswith("The collective's error: [gloo/transport/tcp/pair.cc:584] TIMEOUT self_rank = 0 "
                            "pair_rank = 1"), message


def _no_delay_of_clients(port: int, make_client) -> list[int]:
    """TCP_NODELAY of the sockets to ``port`` that ``make_client()`` opened in this process."""
    from paddle_r1.parallel.rank_watch import _socket_fds

    before = _socket_fds()
    client = make_client()
    options = []
    for fd in _socket_fds() - before:
        with socket.socket(fileno=os.dup(fd)) as sock:
            if sock.getpeername()[1] == port:
                options.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
    del client
    return options


def test_the_watch_asks_the_store_without_waiting_for_delayed_acks():
    """Paddle's own TCPStore client leaves Nagle's algorithm on (an ``add`` then waits 40 ms for the server's
    delayed ACK; benchmarks/store_latency.py); the watch's clients turn it off. If a Paddle release sets the option
    itself, the first assertion fails and ``rank_watch.no_delay`` can go."""
    from paddle.base.core import TCPStore

    from paddle_r1.parallel.rank_watch import _client

    port = _free_port()
    store = TCPStore("127.0.0.1", port, True, 1, 60)  # noqa: F841 (serves while referenced)
    assert _no_delay_of_clients(port, lambda: TCPStore("127.0.0.1", port, False, 0, 60)) == [0]
    assert _no_delay_of_clients(port, lambda: _client("127.0.0.1", port)) == [1]


# ---- whole jobs through paddle.distributed.launch ------------------------------------------------------------
def _launch_config(tmp_path, tiny_model_dir, rec_jsonl, **extra) -> str:
    """A run that keeps going (many steps, each rank's reward waits 0.3 s) and saves only at its end."""
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(dict(
        model_name_or_path=tiny_model_dir, data_path=rec_jsonl, output_dir=str(tmp_path / "run"),
        reward_funcs=["reward_helpers:slow_on_rank"], reward_kwargs={"reward_helpers:slow_on_rank": {"seconds": 0.3}},
        num_generations=2, per_device_train_batch_size=2, max_completion_length=4, max_steps=500, save_steps=1000,
        use_visualdl=False, disable_tqdm=True, device="cpu", dtype="float32", **extra)))
    return str(config)


def _environment() -> dict:
    tests = os.path.dirname(os.path.abspath(__file__))
    return {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, tests, os.environ.get("PYTHONPATH", "")])}


def _launch(config: str, log_dir, *launch_args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "paddle.distributed.launch", *launch_args, "--log_dir",
                             str(log_dir), os.path.join(ROOT, "scripts", "grpo_entry.py"), "train", "--config", config],
                            env=_environment(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def _state_and_parent(pid) -> tuple:
    """(state letter, parent pid) from /proc/PID/stat; None for a process that is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1])


def _children(pid: int) -> list[int]:
    found = [(entry, _state_and_parent(entry)) for entry in os.listdir("/proc") if entry.isdigit()]
    return [int(entry) for entry, info in found if info is not None and info[0] != "Z" and info[1] == pid]


def _alive(pid: int) -> bool:
    info = _state_and_parent(pid)
    return info is not None and info[0] != "Z"


def _wait_for_steps(output_dir, steps: int, processes, limit: float = 240) -> None:
    metrics = os.path.join(output_dir, "metrics.jsonl")
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if os.path.isfile(metrics) and sum(1 for _ in open(metrics)) >= steps:
            return
        assert all(p.poll() is None for p in processes), "the job ended before training"
        time.sleep(0.5)
    raise AssertionError(f"no {steps} steps logged in {limit} s")


def _gone_within(pids: list[int], seconds: float) -> float:
    start = time.monotonic()
    while any(_alive(p) for p in pids):
        assert time.monotonic() - start < seconds, f"still running after {seconds} s: {[p for p in pids if _alive(p)]}"
        time.sleep(0.2)
    return time.monotonic() - start


def _kill_group(process: subprocess.Popen) -> None:
    """Whatever is left of a launched job (after a failed assertion)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(400)
def test_killing_the_launcher_ends_its_ranks(tmp_path, tiny_model_dir, rec_jsonl):
    """kill -9 of paddle.distributed.launch: its 2 ranks used to train on as orphans and write checkpoints."""
    launcher = _launch(_launch_config(tmp_path, tiny_model_dir, rec_jsonl), tmp_path / "logs", "--nproc_per_node", "2")
    try:
        _wait_for_steps(tmp_path / "run", 1, [launcher])
        ranks = _children(launcher.pid)
        assert len(ranks) == 2, ranks
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        _gone_within(ranks, 15)
        time.sleep(1)
        assert not [n for n in os.listdir(tmp_path / "run") if n.startswith("checkpoint-")]
    finally:
        _kill_group(launcher)


@pytest.mark.timeout(400)
def test_killing_a_rank_of_a_two_node_job_ends_the_other_node(tmp_path, tiny_model_dir, rec_jsonl):
    """Two launchers (``--nnodes 2`` on 127.0.0.1), one rank each; kill -9 of node 1's rank: node 1's launcher
    fails, and node 0's rank, which shares no launcher with it, ends with an error naming the lost rank, within
    ``heartbeat_timeout`` (10 s here; the default 60 s would take over a minute)."""
    config = _launch_config(tmp_path, tiny_model_dir, rec_jsonl, heartbeat_timeout=10)
    master = f"127.0.0.1:{_free_port()}"
    nodes = [_launch(config, tmp_path / f"logs{n}", "--nnodes", "2", "--rank", str(n), "--master", master,
                     "--nproc_per_node", "1") for n in (0, 1)]
    try:
        _wait_for_steps(tmp_path / "run", 2, nodes)
        rank0, rank1 = (_children(node.pid) for node in nodes)
        assert len(rank0) == len(rank1) == 1, (rank0, rank1)
        os.kill(rank1[0], signal.SIGKILL)
        took = _gone_within(rank0 + rank1, 120)
        assert took < 45, f"node 0's rank ended {took:.0f} s after rank 1 was killed"
        codes = [node.wait(timeout=60) for node in nodes]
        assert all(code != 0 for code in codes), codes
        assert not [n for n in os.listdir(tmp_path / "run") if n.startswith("checkpoint-")]
        log = open(tmp_path / "logs0" / "workerlog.0", errors="replace").read()
        named = [line for line in log.splitlines() if "RankFailure" in line or "error: rank 0" in line]
        assert named and "rank 1 (" in named[-1] and "stopped" in named[-1], log[-3000:]
        assert "heartbeat_timeout" not in named[-1] or "heartbeat_timeout = 10 s" in named[-1], named[-1]
        print(named[-1])
        print(f"node 0's rank ended {took:.1f} s after rank 1 was killed")
    finally:
        for node in nodes:
            _kill_group(node)


@pytest.mark.timeout(300)
def test_a_rank_later_than_gloos_own_timeout_is_waited_for(rank_later_than_gloos_timeout):
    """Rank 1's reward takes 35 s, past gloo's fixed 30 s that used to end the job with a bare TIMEOUT; under the
    default collective_timeout (1800 s) both ranks finish the step and save."""
    ranks, folder = rank_later_than_gloos_timeout
    while not ranks.join():
        pass
    metrics = [json.loads(line) for line in open(folder / "run" / "metrics.jsonl")]
    assert metrics[0]["step_seconds"] > 35 and os.path.isdir(folder / "run" / "checkpoint-1")
