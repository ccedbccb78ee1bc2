"""A GRPO run and an SFT run with valid settings compute what they computed before the trainer's structure
changed: their metrics are compared with ``fixtures/recorded_runs.json``, recorded by
``fixtures/record_runs.py`` on the code before the refactor. The standard deviations (``reward_std``,
``rewards/<name>/std``) were re-recorded when they became TRL 1.16's ``nanstd`` over the gathered batch (they had
been the mean of the groups' stds and the population std); ``test_loss.py`` checks them against the rewards."""
import json
import math
import os

from fixtures.record_runs import run_jobs

RECORDED = os.path.join(os.path.dirname(__file__), "fixtures", "recorded_runs.json")


def test_runs_match_the_recording(tmp_path):
    with open(RECORDED) as f:
        recorded = json.load(f)
    now = run_jobs(str(tmp_path))
    for job in ("grpo", "sft"):
        assert len(now[job]) == len(recorded[job]), job
        for step, (got, want) in enumerate(zip(now[job], recorded[job]), start=1):
            assert set(want) <= set(got), (job, step, sorted(set(want) - set(got)))
            for key, value in want.items():
                assert math.isclose(got[key], value, rel_tol=1e-5, abs_tol=1e-7), (job, step, key, got[key], value)
