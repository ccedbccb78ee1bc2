"""``paddle-r1 selftest`` on this CPU machine: every CPU check passes and every GPU-only check is skipped with its
reason (the whole command once, as a user runs it); a branch broken on purpose is a FAIL with its error, what to do,
and exit code 1; ``SELFTEST=1`` runs it before a launch script trains, and a failure stops the launch."""
import json
import os
import subprocess
import sys

import paddle
import pytest

from paddle_r1.cli import main
from paddle_r1.selftest import CHECKS
from test_cli import assert_no_library_notices

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NO_CUDA = "no CUDA device: paddle.is_compiled_with_cuda() is False"


@pytest.fixture(scope="module")
def cpu_selftest(tmp_path_factory):
    folder = tmp_path_factory.mktemp("selftest")
    report, workdir = folder / "report.json", folder / "work"
    result = subprocess.run([sys.executable, "-m", "paddle_r1.cli", "selftest", "--output", str(report),
                             "--workdir", str(workdir)], capture_output=True, text=True, timeout=600)
    return result, json.load(open(report)), workdir


@pytest.mark.timeout(600)
def test_cpu_selftest_passes_every_cpu_check_and_skips_each_gpu_check_with_its_reason(cpu_selftest):
    result, report, workdir = cpu_selftest
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert_no_library_notices(result)
    checks = {check["name"]: check for check in report["checks"]}
    assert list(checks) == [check.name for check in CHECKS]
    assert all(set(check) >= {"name", "status", "seconds", "figure", "error"} for check in report["checks"])
    for check in CHECKS:
        got = checks[check.name]
        if check.gpu_only:
            assert (got["status"], got["error"]) == ("SKIP", NO_CUDA), got
        else:
            assert got["status"] == "PASS" and got["figure"], got
    assert sum(check["status"] == "PASS" for check in report["checks"]) >= 8
    # one console line per check: status, name, seconds, the figure or the reason
    lines = [line for line in result.stdout.splitlines() if line[:4] in ("PASS", "FAIL", "SKIP")]
    assert [line.split()[:2] for line in lines] == [[checks[name]["status"], name] for name in checks]
    assert all(NO_CUDA in line for line in lines if line.startswith("SKIP"))
    # each comparison states its limit, and the measured distance is within it
    assert "limit" in checks["attention"]["figure"] and "math x" in checks["attention"]["figure"]
    stage1 = checks["ranks_stage1"]["figure"]
    assert "gloo, stage1" in stage1 and "AdamW state per rank" in stage1
    assert "skipped on every rank, loss scale 32768 -> 16384 on all" in checks["ranks_overflow_stage1"]["figure"]
    # the clip variants: data parallel runs here on gloo ranks, stage 2 only on GPUs
    assert "gloo, data parallel, clips" in checks["ranks_data_parallel_video"]["figure"]
    assert (checks["ranks_stage2_video"]["status"], checks["ranks_stage2_video"]["error"]) == ("SKIP", NO_CUDA)
    for run in ("run-1-rank-video", "run-2-ranks-data-parallel-video"):
        rows = [json.loads(line) for line in open(workdir / run / "completions.jsonl")]
        assert len(rows) == 8 and all(row["videos"][0].endswith(".mp4") and not row["images"] for row in rows), run
    environment = report["environment"]
    assert environment["paddle"]["version"] == paddle.__version__ and environment["gpus"] == []
    assert environment["precision"]["dtype"] == "float32" and environment["no_gpu_reason"] == NO_CUDA


def _broken_attention_kernel(monkeypatch):
    def fails(*args, **kwargs):
        raise RuntimeError("CUDA error: no kernel image is available for execution on the device")

    monkeypatch.setattr(paddle.nn.functional, "scaled_dot_product_attention", fails)


def _top_left_causality_after_a_cache(monkeypatch):
    """Qwen2.5-VL's text attention handing sdpa what paddleformers does: no mask for an unpadded batch, and
    ``is_causal``, which Paddle aligns top-left when the queries follow a KV cache."""
    from paddle_r1.models import text_attention

    monkeypatch.setattr(text_attention, "sdpa_causality",
                        lambda mask, queries, keys, dtype: (mask, mask is None and queries > 1))


def _decode_off_by_a_little(monkeypatch):
    """A one-token step whose logits are off by 1e-3 of their largest: a kernel subtly wrong, not crashing."""
    from paddle_r1.generation.decoder import OneTokenDecoder

    step = OneTokenDecoder.step
    monkeypatch.setattr(OneTokenDecoder, "step", lambda self, token: (lambda x: x + 1e-3 * x.abs().max())(
        step(self, token)))


def _ranks_that_disagree_on_an_overflow(monkeypatch):
    """Launched ranks reporting what stage 1 did when only the overflowing rank saw found_inf (as measured on 2 gloo
    ranks before the fix): rank 0 stepped on the overflow and kept its loss scale, rank 1 skipped and halved it."""
    from paddle_r1.selftest import runs

    def launched(ws, logs, module):
        reports = module[module.index("--out") + 1]
        os.makedirs(reports)
        for rank, scale in ((0, 32768.0), (1, 16384.0)):
            steps = [{"applied": True, "scale": 32768.0, "weights": "a"}, {"applied": rank == 0, "scale": scale,
                     "weights": "b"}, {"applied": True, "scale": scale, "weights": "c"}]
            with open(os.path.join(reports, f"rank{rank}.json"), "w") as f:
                json.dump({"initial": {"scale": 32768.0, "weights": "0"}, "steps": steps}, f)

    monkeypatch.setattr(runs, "_launch", launched)


def _ranks_that_drop_the_clips(monkeypatch):
    """Launched ranks that trained on the images instead of the clips (the media not passed to them): the 1-rank
    image run stands in for their run, as measured when ``launch`` dropped ``media``."""
    from paddle_r1.selftest import runs

    monkeypatch.setattr(runs, "launch", lambda ws, name, sharding, media: runs.single_run(ws, "image")[0])


def _rollout_log_probs_half_a_nat_off(monkeypatch):
    """A rollout whose log-prob of each drawn token is off by 0.5 nats (its tokens drawn right): the sampler's
    correction would then reweigh every token by exp(-0.5)."""
    from paddle_r1.generation import rollout

    drawn = rollout._drawn_logp
    monkeypatch.setattr(rollout, "_drawn_logp", lambda *args: drawn(*args) - 0.5)


@pytest.mark.parametrize("check, breaks, error, advice", [
    ("attention", _broken_attention_kernel, "RuntimeError: CUDA error: no kernel image is available",
     "--attn_implementation eager"),
    ("attention", _top_left_causality_after_a_cache, "CheckFailed: one prompt without padding (what each device "
     "holds with one prompt per device): sdpa's log-probs are", "--attn_implementation eager"),
    ("one_token_decode", _decode_off_by_a_little, "CheckFailed: logits vs the layers' (relative to the largest) "
     "0.001 (limit 1e-04): over the limit", "--rollout_engine layers"),
    ("ranks_overflow_stage1", _ranks_that_disagree_on_an_overflow, "CheckFailed: a gradient overflowed on rank 1 "
     "only: ranks [1] skipped the step, the others applied it; loss scales after it [32768.0, 16384.0]",
     "train float16 without --sharding"),
    ("ranks_data_parallel_video", _ranks_that_drop_the_clips, "CheckFailed: the ranks' prompts showed [(1, 'none'),",
     "train on clips on one GPU"),
    ("grpo_run", _rollout_log_probs_half_a_nat_off, "CheckFailed: importance_sampling_correction, step 1: "
     "sampling/sampling_logp_difference/mean 0.5, ", "--workdir DIR"),
], ids=["attention kernel raises", "attention top-left after a cache", "decode step off by 1e-3",
        "ranks part on an overflow", "ranks train without the clips", "rollout log-probs off by 0.5 nats"])
def test_a_branch_broken_on_purpose_is_a_fail_with_its_error_and_exit_code_1(check, breaks, error, advice, tmp_path,
                                                                             monkeypatch, capsys):
    breaks(monkeypatch)
    report = tmp_path / "report.json"
    assert main(["selftest", "--only", check, "--output", str(report)]) == 1
    (got,) = json.load(open(report))["checks"]
    assert (got["name"], got["status"]) == (check, "FAIL")
    assert got["error"].startswith(error) and advice in got["advice"] and got["traceback"]
    out = capsys.readouterr().out
    assert f"FAIL  {check}" in out and f"error: {error}" in out and f"what to do: {got['advice']}" in out
    assert "0 passed, 1 failed, 0 skipped" in out


def _launch_with_selftest(tmp_path, selftest_args: str):
    out = tmp_path / "out"
    env = {**os.environ, "GPUS": "0", "OUTPUT_DIR": str(out), "PYTHON": sys.executable, "SELFTEST": "1",
           "SELFTEST_ARGS": selftest_args}
    return out, subprocess.run(["bash", os.path.join(ROOT, "scripts", "run_grpo_rec.sh"), "--max_steps", "1"],
                               env=env, capture_output=True, text=True, timeout=300)


def test_selftest_1_runs_before_the_launch_trains(tmp_path):
    out, result = _launch_with_selftest(tmp_path, "--only environment")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert result.stdout.index("PASS  environment") < result.stdout.index("CPU smoke run")
    assert json.load(open(out / "selftest.json"))["checks"][0]["status"] == "PASS"
    assert [json.loads(line)["step"] for line in open(out / "metrics.jsonl")] == [1]


def test_a_failed_selftest_stops_the_launch_before_training(tmp_path):
    out, result = _launch_with_selftest(tmp_path, "--only no_such_check")
    assert result.returncode == 1
    assert "invalid choice: 'no_such_check'" in result.stdout and "selftest failed: not training" in result.stderr
    assert "CPU smoke run" not in result.stdout and not os.path.exists(out / "metrics.jsonl")

