"""report_to: one 2-step ``paddle-r1 train`` reports to SwanLab and W&B in their offline modes; what each wrote is read
back with a reader of its run files and holds the run's metrics, its config and a table of its completions."""
import glob
import json
import math
import os
import sys

import pytest
import yaml

from paddle_r1.config.jobs import GRPOConfig
from paddle_r1.errors import ConfigError
from paddle_r1.config.reading.loading import load_config
from test_cli import paddle_r1


def offline_trackers(folder) -> dict:
    """The environment of a run whose trackers write only on this machine, W&B's cache, data and settings in
    ``folder`` rather than the home folder."""
    return {"SWANLAB_MODE": "offline", "WANDB_MODE": "offline", "WANDB_CACHE_DIR": str(folder / "wandb_cache"),
            "WANDB_DATA_DIR": str(folder / "wandb_data"), "WANDB_CONFIG_DIR": str(folder / "wandb_config")}


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_model_dir, rec_jsonl):
    """The run's output folder."""
    pytest.importorskip("swanlab", reason="pip install 'paddle_r1[swanlab]'")
    pytest.importorskip("wandb", reason="pip install 'paddle_r1[wandb]'")
    tmp = tmp_path_factory.mktemp("trackers")
    out = tmp / "run"
    result = paddle_r1("train", "--model_name_or_path", tiny_model_dir, "--data_path", rec_jsonl, "--output_dir",
                       str(out), "--num_generations", "2", "--max_completion_length", "6", "--max_steps", "2",
                       "--save_steps", "0", "--log_completions_steps", "1", "--disable_tqdm", "true",
                       "--report_to", "swanlab", "wandb", env=offline_trackers(tmp))
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def only(pattern: str) -> str:
    found = glob.glob(pattern)
    assert len(found) == 1, (pattern, found)
    return found[0]


def logged_metrics(out) -> dict:
    """metrics.jsonl as {(key, step): value}."""
    rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
    assert [row["step"] for row in rows] == [1, 2]
    return {(key, row["step"]): value for row in rows for key, value in row.items() if key != "step"}


def completions_by_step(out) -> dict:
    rows = [json.loads(line) for line in open(out / "completions.jsonl")]
    return {step: [row["completion"] for row in rows if row["step"] == step] for step in (1, 2)}


def same_numbers(got: dict, expected: dict) -> bool:
    return got.keys() == expected.keys() and all(
        math.isclose(got[k], expected[k], rel_tol=1e-6) or (math.isnan(got[k]) and math.isnan(expected[k]))
        for k in expected)


def read_records(reader, path: str, record_class) -> list:
    """Every record of a run file (both libraries write LevelDB-log journals of protobuf records)."""
    reader.open(path)
    records = []
    while (data := reader.scan()) is not None:
        record = record_class()
        record.ParseFromString(data)
        records.append(record)
    reader.close()
    return records


def test_swanlab_offline_run_holds_metrics_config_and_completions(run):
    """Read with SwanLab's own reader (the one ``swanlab sync`` uploads from)."""
    from swanlab.proto.swanlab.record.v1.record_pb2 import Record
    from swanlab.sdk.internal.core_python.store import DataStoreReader

    folder = only(str(run / "swanlog" / "run-*"))
    records = read_records(DataStoreReader(), only(os.path.join(folder, "run-*.swanlab")), Record)
    scalars = {(r.scalar.key, r.scalar.step): r.scalar.value.number for r in records if r.HasField("scalar")}
    assert same_numbers(scalars, logged_metrics(run))
    assert [r.start.name for r in records if r.HasField("start")] == ["run"]  # named after output_dir
    config = yaml.safe_load(open(os.path.join(folder, "files", "config.yaml")))
    assert (config["num_generations"]["value"], config["report_to"]["value"]) == (2, ["swanlab", "wandb"])
    tables = {r.media.step: r.media.value.items[0].filename for r in records
              if r.HasField("media") and r.media.key == "completions"}
    assert sorted(tables) == [1, 2]
    for step, completions in completions_by_step(run).items():
        table = json.load(open(os.path.join(folder, "media", "echarts", tables[step])))
        assert [row["completion"] for row in table["rowData"]] == completions
        assert {"problem", "solution", "reward", "advantage", "reward/iou"} <= {c["field"] for c in table["colDefs"]}


def test_wandb_offline_run_holds_metrics_config_and_completions(run):
    """W&B 0.31 keeps no Python reader of its .wandb journal (its reader is in wandb-core); SwanLab's W&B converter
    reads it, with W&B's own record schema."""
    from swanlab.converter.wb.wbdatastore import WBDataStoreReader
    from wandb.proto.wandb_internal_pb2 import Record

    folder = only(str(run / "wandb" / "offline-run-*"))
    records = read_records(WBDataStoreReader(), only(os.path.join(folder, "run-*.wandb")), Record)
    history = {}
    for record in (r for r in records if r.HasField("history")):
        items = {"/".join(item.nested_key) or item.key: json.loads(item.value_json) for item in record.history.item}
        history.update({(key, items["_step"]): value for key, value in items.items()
                        if not key.startswith(("_", "completions/"))})  # not wandb's own, nor the table's fields
    assert same_numbers(history, logged_metrics(run))
    (started,) = [r.run for r in records if r.HasField("run")]
    config = {item.key: json.loads(item.value_json) for item in started.config.update}
    assert (started.display_name, config["num_generations"], config["report_to"]) == ("run", 2, ["swanlab", "wandb"])
    for step, completions in completions_by_step(run).items():
        pattern = os.path.join(folder, "files", "media", "table", f"completions_{step}_*.table.json")
        table = json.load(open(only(pattern)))
        assert [row[table["columns"].index("completion")] for row in table["data"]] == completions


def test_a_missing_tracker_library_is_named_with_its_extra_before_any_model_loads(monkeypatch, tmp_path, rec_jsonl):
    from paddle_r1.trainer.job import prepare_job

    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` fails as where wandb is not installed
    config = load_config(GRPOConfig, None, ["--model_name_or_path", str(tmp_path / "no_model_here"), "--data_path",
                                            rec_jsonl, "--report_to", "wandb", "--output_dir", str(tmp_path / "o")])
    with pytest.raises(ConfigError, match=r"^config key 'report_to': wandb needs the wandb package, which cannot be "
                                          r"imported \(.*\): pip install 'paddle_r1\[wandb\]'$"):
        prepare_job(config)  # the model folder does not exist: the trackers are checked first
    with pytest.raises(ConfigError, match="config key 'report_to': 'tensorboard' is not one of visualdl, swanlab, "
                                          "wandb, none"):
        load_config(GRPOConfig, None, ["--report_to", "tensorboard"])
    with pytest.raises(ConfigError, match="'none' is not one of .*none stands alone"):
        load_config(GRPOConfig, None, ["--report_to", "none", "wandb"])
    assert load_config(GRPOConfig, None, ["--report_to", "none"]).trackers == []
    assert load_config(GRPOConfig, None, ["--report_to", "wandb"]).trackers == ["visualdl", "wandb"]
    assert load_config(GRPOConfig, None, ["--report_to", "swanlab", "--use_visualdl", "false"]).trackers == ["swanlab"]


def test_a_tracker_that_cannot_start_is_one_line_naming_it(monkeypatch, tmp_path):
    from paddle_r1.telemetry.trackers import start_trackers

    pytest.importorskip("swanlab", reason="pip install 'paddle_r1[swanlab]'")
    monkeypatch.setenv("SWANLAB_MODE", "bogus")  # a value SwanLab's own settings refuse at init
    with pytest.raises(ConfigError, match=r"^config key 'report_to': swanlab could not start its run: "
                                          r"ValidationError: .*bogus.*; SWANLAB_MODE=offline writes"):
        start_trackers(["swanlab"], str(tmp_path))
