"""The multi-process tests' ranks (``forked_ranks.spawn_ranks``): forked from a server that imported the trainer
once, yet each run under the caller's environment at the call with Paddle's own variables for its rank, and without
the proxies Paddle's wrapper removes."""
import json

from dp_worker import dump_environment
from forked_ranks import spawn_ranks


def test_ranks_run_under_the_callers_environment_with_their_own_rank(tmp_path, monkeypatch):
    names = ["PADDLE_R1_PROBE", "PADDLE_R1_PROBE_REMOVED", "http_proxy"]
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # paddle.distributed.spawn's wrapper removes it in a rank
    reports = []
    for call, value in enumerate(["first", "second"]):
        monkeypatch.setenv("PADDLE_R1_PROBE", value)
        if call == 0:
            monkeypatch.setenv("PADDLE_R1_PROBE_REMOVED", "present")
        else:
            monkeypatch.delenv("PADDLE_R1_PROBE_REMOVED")
        folder = tmp_path / str(call)
        folder.mkdir()
        spawn_ranks(dump_environment, args=(names, str(folder)))
        reports.append([json.load(open(folder / f"rank{rank}_environment.json")) for rank in (0, 1)])
    for call, expected in enumerate([{"PADDLE_R1_PROBE": "first", "PADDLE_R1_PROBE_REMOVED": "present"},
                                     {"PADDLE_R1_PROBE": "second", "PADDLE_R1_PROBE_REMOVED": None}]):
        expected["http_proxy"] = None
        for rank, report in enumerate(reports[call]):
            assert report["values"] == expected, (call, rank, report)
            assert report["trainer_id"] == str(rank) and report["trainer_preloaded"], report
