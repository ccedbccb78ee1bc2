"""AI Studio's file system: models and data on read-only mounts, large checkpoints in a small quota.

We run as root, so permissions stop nothing: each test checks that the model folder's contents (names and
hashes) are unchanged after the load; one also loads through a real read-only bind mount when the sandbox allows
``mount``.
"""
import hashlib
import os
import shutil
import subprocess

import pytest

from paddle_r1.config.jobs import GRPOConfig
from paddle_r1.models import loading
from paddle_r1.models.loading import load_model, load_models
from paddle_r1.trainer.grpo import GRPOTrainer


def contents(folder) -> dict:
    """relative path -> sha256 of every file under ``folder``."""
    found = {}
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, folder)] = hashlib.sha256(f.read()).hexdigest()
    return found


@pytest.fixture
def model_copy(tiny_model_dir, tmp_path):
    """A fresh copy of the tiny model (nothing loaded from it yet) and its contents."""
    folder = str(tmp_path / "model")
    shutil.copytree(tiny_model_dir, folder)
    return folder, contents(folder)


def _weights(model) -> dict:
    return {k: v.numpy() for k, v in model.state_dict().items()}


def test_loading_never_writes_into_the_model_folder(model_copy, tmp_path, monkeypatch):
    folder, before = model_copy
    # this test's own mirror folder: another process loading a model at the same time (the suite's other worker)
    # has its mirror in the shared one for a moment
    mirrors = tmp_path / "mirrors"
    monkeypatch.setattr(loading, "MIRROR_ROOT", str(mirrors))
    policy = load_model(folder)
    loaded = load_models(folder, beta=0.04)
    assert contents(folder) == before
    assert mirrors.is_dir() and not os.listdir(mirrors)  # the loads went through mirrors there, and removed them
    from safetensors.numpy import load_file

    published = load_file(os.path.join(folder, "model.safetensors"))
    # the weights came from the folder (not a fresh initialisation): the same sums under both loads
    total = sum(float(abs(v.astype("float64")).sum()) for v in published.values())
    for model in (policy, loaded.policy, loaded.reference):
        assert sum(float(abs(v.astype("float64")).sum()) for v in _weights(model).values()) == pytest.approx(total)


def test_training_and_resuming_never_write_into_the_model_or_data_folder(model_copy, rec_jsonl, tmp_path):
    folder, before = model_copy
    data_before = contents(os.path.dirname(rec_jsonl))
    config = dict(model_name_or_path=folder, data_path=rec_jsonl, output_dir=str(tmp_path / "out"),
                  reward_funcs=["format", "iou"], num_generations=2, per_device_train_batch_size=2,
                  max_completion_length=4, max_steps=1, save_steps=1, use_visualdl=False, disable_tqdm=True,
                  beta=0.04)
    GRPOTrainer(GRPOConfig(**config)).train()
    GRPOTrainer(GRPOConfig(**{**config, "max_steps": 2, "resume_from_checkpoint": "latest"})).train()
    assert contents(folder) == before
    assert contents(os.path.dirname(rec_jsonl)) == data_before


def _bind_read_only(source: str, target: str):
    """``mount --bind -o ro``; the reason it was refused, or None once mounted."""
    os.makedirs(target)
    try:
        done = subprocess.run(["mount", "--bind", "-o", "ro", source, target], capture_output=True, text=True)
    except FileNotFoundError:
        return "no mount command"
    if done.returncode != 0:
        return f"mount --bind -o ro refused here: {done.stderr.strip()}"
    try:
        open(os.path.join(target, "probe"), "w").close()
    except OSError:
        return None
    subprocess.run(["umount", target], check=False)
    return "the bind mount is writable (mount ignored -o ro)"


def test_a_model_on_a_read_only_mount_loads(model_copy, tmp_path):
    folder, before = model_copy
    mounted = str(tmp_path / "read_only_model")
    refused = _bind_read_only(folder, mounted)
    if refused:
        pytest.skip(refused)
    try:
        with pytest.raises(OSError, match="Read-only file system"):  # what paddleformers does on its own
            open(os.path.join(mounted, "flex-ckpt.auto_generated.metadata"), "w")
        loaded = load_models(mounted, beta=0.0)
        assert loaded.family == "qwen2_5_vl"
    finally:
        subprocess.run(["umount", mounted], check=True)
    assert contents(folder) == before


def test_save_only_model_checkpoints_hold_no_optimizer_and_resume_as_a_warm_start(tiny_model_dir, rec_jsonl,
                                                                                  tmp_path, capsys):
    out = tmp_path / "out"
    config = dict(model_name_or_path=tiny_model_dir, data_path=rec_jsonl, output_dir=str(out),
                  reward_funcs=["format", "iou"], num_generations=2, per_device_train_batch_size=2,
                  max_completion_length=4, max_steps=3, save_steps=1, save_total_limit=2, save_only_model=True,
                  use_visualdl=False, disable_tqdm=True, beta=0.04, sync_ref_model=True, ref_model_sync_steps=1,
                  lr_scheduler_type="linear")
    trainer = GRPOTrainer(GRPOConfig(**config))
    trainer.train()
    assert sorted(p for p in os.listdir(out) if p.startswith("checkpoint-")) == ["checkpoint-2", "checkpoint-3"]
    saved = os.listdir(out / "checkpoint-3")
    assert not [name for name in saved if name.endswith(".pdopt")] and "ref_model" not in saved
    load_models(str(out / "checkpoint-3"), beta=0.0)  # the loadable model folder
    capsys.readouterr()
    resumed = GRPOTrainer(GRPOConfig(**{**config, "max_steps": 4, "resume_from_checkpoint": "latest"}))
    assert "save_only_model: no optimizer state, so this is a warm start" in capsys.readouterr().out
    assert resumed.step == 3
    assert resumed.scheduler.last_epoch == 3  # the learning-rate schedule continues from step 3
    assert all(float(abs(v).sum()) == 0 for k, v in resumed.optimizer.state_dict().items() if "moment" in k)
    resumed.train()
    assert resumed.step == 4
