"""The launch scripts' CPU smoke run (GPUS=0), as a user types it."""
import json
import os
import subprocess
import sys

import pytest
import yaml

from paddle_r1.config.jobs import GRPOConfig, SFTConfig
from paddle_r1.config.reading.loading import load_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("script", ["run_grpo_rec.sh", "run_grpo_counting.sh", "run_grpo_geometry.sh"])
def test_cpu_smoke_run(tmp_path, script):
    out = tmp_path / "out"
    env = {**os.environ, "GPUS": "0", "OUTPUT_DIR": str(out), "PYTHON": sys.executable}
    result = subprocess.run(["bash", os.path.join(ROOT, "scripts", script), "--seed", "3"], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "CPU smoke run" in result.stdout
    steps = [json.loads(line) for line in open(out / "metrics.jsonl")]
    assert [s["step"] for s in steps] == [1, 2]
    assert os.path.isfile(out / "checkpoint-2" / "config.json") and os.path.getsize(out / "train.log") > 0
    config = json.load(open(out / "checkpoint-2" / "trainer_state.json"))["config"]
    assert config["seed"] == 3  # extra arguments reach paddle-r1 train


def test_cpu_smoke_run_on_two_ranks_with_stage1_sharding(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "GPUS": "0", "CPU_RANKS": "2", "OUTPUT_DIR": str(out), "PYTHON": sys.executable}
    result = subprocess.run(["bash", os.path.join(ROOT, "scripts", "run_grpo_rec.sh"), "--sharding", "stage1"],
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "2 process(es)" in result.stdout
    checkpoint = out / "checkpoint-2"
    assert sorted(f for f in os.listdir(checkpoint) if f.startswith("optimizer")) == \
        ["optimizer.shard0.pdopt", "optimizer.shard1.pdopt"]
    assert json.load(open(checkpoint / "trainer_state.json"))["world_size"] == 2
    assert [json.loads(line)["step"] for line in open(out / "metrics.jsonl")] == [1, 2]


@pytest.mark.parametrize("variables, error", [
    ({"GPUS": "0,1"}, "GPUS=0,1: give a whole number from 0 (GPUs per node, e.g. GPUS=4; CUDA_VISIBLE_DEVICES picks "
                      "which)"),
    ({"GPUS": "0", "CPU_RANKS": "two"}, "CPU_RANKS=two: give a whole number from 1 (processes of the CPU smoke run)"),
    ({"NNODES": "2", "NODE_RANK": "2"}, "NODE_RANK=2: give a whole number from 0 to 1"),
    ({"GPUS": "0", "BATCH_SIZE": "-8"}, "BATCH_SIZE=-8: give a whole number from 1 (completions per optimizer step "
                                        "over all GPUs)"),
], ids=["device list as GPUS", "CPU_RANKS word", "NODE_RANK past NNODES", "negative BATCH_SIZE"])
def test_a_launch_variable_that_is_not_a_count_stops_before_anything_runs(tmp_path, variables, error):
    """bash arithmetic gave $((GPUS - 1)) = 0 for GPUS=0,1 (one GPU launched where two were meant) and read
    CPU_RANKS=two as 0 (one process); nothing may start, not even the output folder."""
    out = tmp_path / "out"
    env = {**os.environ, "OUTPUT_DIR": str(out), "PYTHON": sys.executable, **variables}
    result = subprocess.run(["bash", os.path.join(ROOT, "scripts", "run_grpo_rec.sh")], env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1] == error
    assert not out.exists()


@pytest.mark.parametrize("name", ["grpo_counting.yaml", "grpo_geometry.yaml"])
def test_task_configs_load(name):
    """Through load_config, as ``paddle-r1 train --config`` reads them (peer keys translated, sources named)."""
    path = os.path.join(ROOT, "configs", name)
    config = load_config(GRPOConfig, path)
    assert config.data_path and config.reward_funcs == yaml.safe_load(open(path))["reward_funcs"]


def test_sft_config_loads():
    config = load_config(SFTConfig, os.path.join(ROOT, "configs", "sft_rec.yaml"))
    assert config.learning_rate == yaml.safe_load(open(os.path.join(ROOT, "configs", "sft_rec.yaml")))["learning_rate"]


LAYOUTS = [  # (script, a path present under DATA_DIR, the data path and image root it gets)
    ("run_grpo_rec.sh", "REC/rec_jsons_processed/refcoco_train.json", "REC/rec_jsons_processed/refcoco_train.json",
     "REC"),
    ("run_grpo_rec.sh", "rec_jsons_processed/refcoco_train.json", "rec_jsons_processed/refcoco_train.json", "coco"),
    ("run_grpo_counting.sh", "Counting/clevr_cogen_a_train/data", "Counting/clevr_cogen_a_train", "Counting"),
    ("run_grpo_geometry.sh", "GEOQA_R1V_Train_8K/data", "GEOQA_R1V_Train_8K", ""),
]


@pytest.mark.parametrize("script, present, data_path, image_root", LAYOUTS)
def test_default_data_paths_follow_the_unpacked_layout(tmp_path, script, present, data_path, image_root):
    """The scripts' default data: PaddleMIX's tarballs (data/REC/..., data/Counting/...) when unpacked, else the
    separate downloads; DATA_DIR moves both. An invalid override stops the run right after the line naming them."""
    data = tmp_path / "data"
    os.makedirs(data / present)
    env = {**os.environ, "GPUS": "0", "DATA_DIR": str(data), "OUTPUT_DIR": str(tmp_path / "out"),
           "PYTHON": sys.executable}
    result = subprocess.run(["bash", os.path.join(ROOT, "scripts", script), "--num_generations", "1"], env=env,
                            capture_output=True, text=True, timeout=300)
    root = str(data / image_root) if image_root else str(data)
    assert f"(synthetic data in place of {data / data_path}, images: {root})" in result.stdout, result.stdout


def test_paddlemix_rec_recipe():
    """PaddleMIX's published REC recipe: 500 steps, vision trained, 256 completion tokens, refcoco/+/g."""
    from paddle_r1.data.loader import sources_from

    config = load_config(GRPOConfig, os.path.join(ROOT, "configs", "grpo_rec_paddlemix.yaml"))
    assert (config.max_steps, config.freeze_vision, config.max_completion_length) == (500, False, 256)
    # PaddleMIX's global batch, 16 completions = 2 prompts x 8, on its 8 GPUs of 2 (a group on 4 of them)
    assert config.per_device_train_batch_size * 8 * config.gradient_accumulation_steps == 16
    assert (config.prompts_per_device, config.generations_per_device) == (1, 2)
    config.check_ranks(8)
    paths = [s.path for s in sources_from(os.path.join(ROOT, config.data_path))]
    assert [os.path.basename(p) for p in paths] == ["refcoco_train.json", "refcocop_train.json", "refcocog_train.json"]
