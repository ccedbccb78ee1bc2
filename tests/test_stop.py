"""A run stopped from outside (SIGTERM, a signal the config names) ends after the step in progress with that step's
checkpoint, one line and exit code 128 + the signal; it used to end at once with nothing saved (exit -15). Real
``paddle-r1 train`` processes, real signals: one process, and 2 gloo ranks through ``paddle.distributed.launch``
signalled at the launcher or at one rank."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml
from safetensors.numpy import load_file

from test_rank_faults import _children, _environment, _kill_group, _launch, _wait_for_steps

from paddle_r1.checkpoints.folders import list_checkpoints, load_trainer_state, verify_checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _config(tmp_path, tiny_model_dir, rec_jsonl, output_dir, **extra) -> str:
    """Steps slow enough to be signalled in the middle (each rank's reward waits 0.3 s), saved only at the end."""
    path = tmp_path / f"{os.path.basename(output_dir)}.yaml"
    path.write_text(yaml.safe_dump({**dict(
        model_name_or_path=tiny_model_dir, data_path=rec_jsonl, output_dir=str(output_dir),
        reward_funcs=["reward_helpers:slow_on_rank"],
        reward_kwargs={"reward_helpers:slow_on_rank": {"seconds": 0.3, "rank": 0}}, num_generations=2,
        per_device_train_batch_size=2, max_completion_length=4, max_steps=200, save_steps=1000, use_visualdl=False,
        disable_tqdm=True, device="cpu", dtype="float32"), **extra}))
    return str(path)


def _train(config: str, *args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "paddle_r1.cli", "train", "--config", config, *args],
                            env=_environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _weights(checkpoint: str) -> dict:
    return {k: v for name in os.listdir(checkpoint) if name.endswith(".safetensors")
            for k, v in load_file(os.path.join(checkpoint, name)).items()}


def _losses(output_dir) -> list:
    return [json.loads(line)["loss"] for line in open(os.path.join(output_dir, "metrics.jsonl"))]


@pytest.mark.timeout(600)
def test_sigusr1_saves_the_last_finished_step_and_resume_continues_exactly(tmp_path, tiny_model_dir, rec_jsonl):
    """``stop_signals: [SIGTERM, SIGUSR1]``; SIGUSR1 after 2 logged steps: exit code 138, one line naming the
    checkpoint of the last finished step, which verifies; a leftover ``.tmp`` is removed at the start with its size;
    ``--resume latest`` says where it continues and ends where an uninterrupted run ends."""
    run = tmp_path / "run"
    leftover = run / "checkpoint-99.tmp"
    leftover.mkdir(parents=True)
    (leftover / "model.safetensors").write_bytes(b"\0" * (3 << 20))
    config = _config(tmp_path, tiny_model_dir, rec_jsonl, run, stop_signals=["SIGTERM", "SIGUSR1"])
    process = _train(config)
    try:
        _wait_for_steps(run, 2, [process])
        process.send_signal(signal.SIGUSR1)
        output = process.communicate(timeout=120)[0]
    finally:
        process.kill()
    assert process.returncode == 128 + signal.SIGUSR1, output[-3000:]
    assert f"removed {leftover} (3.0 MiB), left by a save that did not finish" in output
    assert not leftover.exists()
    [checkpoint] = list_checkpoints(str(run))
    step = load_trainer_state(checkpoint)["global_step"]
    assert step == len(_losses(run)) >= 2  # the step in progress was finished, and it is the one saved
    verify_checkpoint(checkpoint)
    [line] = [line for line in output.splitlines() if line.startswith("stopped by ")]
    assert line.startswith(f"stopped by SIGUSR1: {checkpoint} holds step {step} (written in ") \
        and line.endswith("--resume latest continues from it; exit code 138"), line

    resumed = _train(config, "--resume", "latest", "--max_steps", str(step + 1))
    output = resumed.communicate(timeout=300)[0]
    assert resumed.returncode == 0, output[-3000:]
    assert f"resuming from {checkpoint}: step {step} of {step + 1}, data position epoch 0, prompt {step} of 12 " \
           "in that epoch's order" in output, output[-3000:]
    straight = tmp_path / "straight"
    uninterrupted = _train(_config(tmp_path, tiny_model_dir, rec_jsonl, straight, max_steps=step + 1))
    assert uninterrupted.wait(timeout=300) == 0
    np.testing.assert_allclose(_losses(run), _losses(straight), rtol=1e-6, atol=1e-7)
    expected = _weights(straight / f"checkpoint-{step + 1}")
    got = _weights(run / f"checkpoint-{step + 1}")
    for key, value in expected.items():
        np.testing.assert_allclose(got[key], value, rtol=1e-6, atol=1e-7, err_msg=key)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("target", ["launcher", "rank 1"])
def test_two_ranks_stop_after_the_same_step_with_one_checkpoint(tmp_path, tiny_model_dir, rec_jsonl, target):
    """SIGTERM to ``paddle.distributed.launch`` (which passes it to both ranks) or to rank 1 alone: the ranks agree
    at the next step boundary, write one complete checkpoint of that step together, and end; rank 0 says so."""
    run = tmp_path / "run"
    launcher = _launch(_config(tmp_path, tiny_model_dir, rec_jsonl, run), tmp_path / "logs", "--nproc_per_node", "2")
    try:
        _wait_for_steps(run, 2, [launcher])
        ranks = _children(launcher.pid)
        assert len(ranks) == 2, ranks
        os.kill(launcher.pid if target == "launcher" else max(ranks), signal.SIGTERM)
        code = launcher.wait(timeout=120)
    finally:
        _kill_group(launcher)
    assert code != 0
    log = open(tmp_path / "logs" / "workerlog.0", errors="replace").read()
    assert [n for n in os.listdir(run) if n.startswith("checkpoint-")] == \
        [os.path.basename(c) for c in list_checkpoints(str(run))], os.listdir(run)
    [checkpoint] = list_checkpoints(str(run))
    verify_checkpoint(checkpoint)
    state = load_trainer_state(checkpoint)
    assert state["world_size"] == 2 and state["global_step"] == len(_losses(run)) >= 2
    [line] = [line for line in log.splitlines() if line.startswith("stopped by ")]
    assert line.startswith(f"stopped by SIGTERM: {checkpoint} holds step {state['global_step']}") \
        and line.endswith("exit code 143"), line


@pytest.mark.timeout(300)
def test_past_the_grace_period_the_run_ends_saying_nothing_was_saved(tmp_path, tiny_model_dir, rec_jsonl):
    """A step that cannot finish within ``stop_grace_seconds`` (its reward waits 20 s, as on a slow judge): the run
    exits with code 1 once they pass, saying it saved nothing, before a scheduler's SIGKILL would end it mute."""
    run = tmp_path / "run"
    config = _config(tmp_path, tiny_model_dir, rec_jsonl, run, stop_grace_seconds=1.0,
                     reward_kwargs={"reward_helpers:slow_on_rank": {"seconds": 20.0, "rank": 0}})
    process = _train(config)
    try:
        for line in process.stdout:  # the trainer's last line before the loop; then step 1's reward waits 20 s
            if line.startswith("rollout engine"):
                break
        time.sleep(3)
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=60)[0]
    finally:
        process.kill()
    assert process.returncode == 1, output[-3000:]
    assert "paddle-r1: SIGTERM came 1 s ago (stop_grace_seconds) and the step in progress and its checkpoint are " \
           "not done: exiting without them; no checkpoint was saved" in output, output[-3000:]
    assert not [n for n in os.listdir(run) if n.startswith("checkpoint-")]
