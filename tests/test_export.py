"""``paddle-r1 export`` (``checkpoints/export.py``): a checkpoint's model alone, in the source's dtype or the one asked
for, split as huggingface_hub splits a state dict, refused before anything is written when it cannot be done; and a
hub id's source files taken from the hub's download cache (``models/source_files.py``). What transformers makes of
exported folders (bfloat16, sharded): tests/test_checkpoint_goldens.py."""
import hashlib
import json
import os
import re
import shutil

import numpy as np
import pytest

from model_checks import folder_weights
from paddle_r1.checkpoints.export import ExportError, export_checkpoint, parse_size, weight_files
from paddle_r1.checkpoints.manifest import CheckpointError, write_manifest
from paddle_r1.cli import main
from paddle_r1.config.jobs import GRPOConfig
from paddle_r1.models.source_files import CARRIED_OVER, source_files, write_source_files
from paddle_r1.trainer.grpo import GRPOTrainer

# what a published model folder holds, and nothing a resume reads
PUBLISHED = {"config.json", "generation_config.json", "preprocessor_config.json", "tokenizer.json",
             "tokenizer_config.json", "chat_template.json", "README.md"}


@pytest.fixture(scope="module")
def run(tiny_model_dir, rec_samples, tmp_path_factory):
    """A 2-step LoRA run saving at both steps, from a copy of the tiny model whose config.json says bfloat16 (as the
    published Qwen-VL models' do; the run itself trains in float32)."""
    root = tmp_path_factory.mktemp("export")
    source = str(root / "source")
    shutil.copytree(tiny_model_dir, source)
    config = json.loads(open(os.path.join(source, "config.json")).read())
    with open(os.path.join(source, "config.json"), "w") as f:
        json.dump({**config, "torch_dtype": "bfloat16"}, f)
    out = str(root / "out")
    GRPOTrainer(GRPOConfig(model_name_or_path=source, output_dir=out, num_generations=2, per_device_train_batch_size=2,
                           max_completion_length=4, max_steps=2, save_steps=1, beta=0.0, lora=True,
                           reward_funcs=["reward_helpers:short_reward"], use_visualdl=False, disable_tqdm=True),
                samples=rec_samples).train()
    return source, out


def test_a_runs_folder_exports_its_newest_checkpoint_in_the_sources_dtype_with_nothing_of_the_training(
        run, tmp_path, capsys):
    source, out = run
    dest = export_checkpoint(out, str(tmp_path / "model"))
    said = capsys.readouterr().out
    assert "checkpoint-2, the most recently written checkpoint" in said
    assert f"dtype bfloat16: the source model's ({source})" in said
    assert set(os.listdir(dest)) == PUBLISHED | {"model.safetensors"}  # no adapter/, optimizer, RNG, trainer state
    config = json.loads(open(os.path.join(dest, "config.json")).read())
    assert config["torch_dtype"] == "bfloat16" and "dtype" not in config
    for name in PUBLISHED - {"config.json"}:
        with open(os.path.join(out, "checkpoint-2", name), "rb") as f:
            assert open(os.path.join(dest, name), "rb").read() == f.read(), name
    trained, exported = folder_weights(os.path.join(out, "checkpoint-2")), folder_weights(dest)
    assert set(exported) == set(trained)
    for key, value in exported.items():  # the checkpoint's (merged) weights, rounded once to bfloat16
        assert str(value.dtype) == "paddle.bfloat16", key
        np.testing.assert_array_equal(value.astype("float32").numpy(),
                                      trained[key].astype("bfloat16").astype("float32").numpy(), err_msg=key)
    assert os.stat(os.path.join(dest, "model.safetensors")).st_mode & 0o044  # readable by a server's user


def test_shards_are_huggingface_hubs_split_and_load_back(run, tmp_path):
    from huggingface_hub.serialization import split_state_dict_into_shards_factory

    from paddle_r1.models.loading import load_model

    checkpoint = os.path.join(run[1], "checkpoint-1")
    dest = export_checkpoint(checkpoint, str(tmp_path / "model"), dtype="float32", max_shard_size="60KB")
    trained = folder_weights(checkpoint)
    expected = split_state_dict_into_shards_factory(
        {key: trained[key] for key in sorted(trained)}, get_storage_size=lambda t: int(np.prod(t.shape)) * 4,
        filename_pattern="model{suffix}.safetensors", max_shard_size=60_000)
    with open(os.path.join(dest, "model.safetensors.index.json")) as f:
        index = json.load(f)
    assert len(expected.filename_to_tensors) > 3
    assert index == {"metadata": {"total_parameters": sum(int(np.prod(t.shape)) for t in trained.values()),
                                  "total_size": expected.metadata["total_size"]},
                     "weight_map": expected.tensor_to_filename}
    assert sorted(f for f in os.listdir(dest) if f.endswith(".safetensors")) == sorted(expected.filename_to_tensors)
    model = load_model(dest)  # paddleformers reads the index
    for key, value in load_model(checkpoint).state_dict().items():
        np.testing.assert_array_equal(model.state_dict()[key].numpy(), value.numpy(), err_msg=key)


@pytest.mark.parametrize("size, expected", [("5GB", 5 * 10**9), ("500MiB", 500 * 2**20), ("200kb", 200_000),
                                            ("1234", 1234), ("1.5GB", 1_500_000_000)])
def test_sizes_read_as_transformers_reads_them(size, expected):
    assert parse_size(size) == expected


def test_refusals_come_before_anything_is_written(run, tiny_model_dir, tmp_path):
    source, out = run
    checkpoint = os.path.join(out, "checkpoint-1")
    dest = tmp_path / "model"
    with pytest.raises(FileNotFoundError, match="nowhere does not exist"):
        export_checkpoint(str(tmp_path / "nowhere"), str(dest))
    with pytest.raises(CheckpointError, match="is a model folder, not a checkpoint"):
        export_checkpoint(tiny_model_dir, str(dest))
    with pytest.raises(CheckpointError, match="neither a checkpoint"):
        export_checkpoint(str(tmp_path), str(dest))
    with pytest.raises(ExportError, match="--max_shard_size '5 parsecs'"):
        export_checkpoint(checkpoint, str(dest), max_shard_size="5 parsecs")
    assert not dest.exists() and os.listdir(tmp_path) == []
    dest.mkdir()
    (dest / "keep.txt").write_text("mine")
    with pytest.raises(ExportError, match="is not empty"):
        export_checkpoint(checkpoint, str(dest))
    assert os.listdir(dest) == ["keep.txt"]
    assert main(["export", checkpoint, str(dest)]) == 2  # one line, exit code 2
    with pytest.raises(ExportError, match=re.escape(f"DEST {dest}/keep.txt/model: {dest}/keep.txt is a file, not a "
                                                    "folder")):  # was a NotADirectoryError from os.makedirs
        export_checkpoint(checkpoint, str(dest / "keep.txt" / "model"))


def test_a_damaged_checkpoint_or_a_weight_float16_cannot_hold_is_refused(run, tmp_path):
    checkpoint = str(tmp_path / "checkpoint")
    shutil.copytree(os.path.join(run[1], "checkpoint-1"), checkpoint, ignore=shutil.ignore_patterns("*.pdopt"))
    weights = next(iter(weight_files(checkpoint).values()))
    with open(weights, "r+b") as f:  # a flipped byte in the weights
        f.seek(-1, 2)
        last = f.read(1)
        f.seek(-1, 2)
        f.write(bytes([last[0] ^ 1]))
    with pytest.raises(CheckpointError, match="SHA-256 differs"):
        export_checkpoint(checkpoint, str(tmp_path / "model"))
    from safetensors.numpy import load_file, save_file

    tensors = load_file(weights)
    name = sorted(tensors)[0]
    tensors[name] = tensors[name] * 0 + np.float32(1e5)
    save_file(tensors, weights, metadata={"format": "pt"})
    write_manifest(checkpoint)
    with pytest.raises(ExportError, match=f"weight {name} holds values up to 1e\\+05, beyond what float16 holds"):
        export_checkpoint(checkpoint, str(tmp_path / "model"), dtype="float16")
    assert os.listdir(tmp_path) == ["checkpoint"]  # neither DEST nor the folder written beside it
    assert export_checkpoint(checkpoint, str(tmp_path / "model"), dtype="bfloat16")  # bfloat16 holds it


def _hub_cache(root, repo_id: str, folder: str, commit: str = "0" * 40, missing=()) -> None:
    """``folder``'s files laid out as huggingface_hub's cache holds a download of ``repo_id`` at ``commit``: content
    under blobs/<sha256>, linked from snapshots/<commit>/<name>, refs/main naming the commit; ``missing``: names
    recorded as not in the repository (.no_exist/<commit>/<name>)."""
    storage = os.path.join(root, "models--" + repo_id.replace("/", "--"))
    snapshot = os.path.join(storage, "snapshots", commit)
    for path in (os.path.join(storage, "blobs"), snapshot, os.path.join(storage, "refs"),
                 os.path.join(storage, ".no_exist", commit)):
        os.makedirs(path)
    with open(os.path.join(storage, "refs", "main"), "w") as f:
        f.write(commit)
    for name in os.listdir(folder):
        content = open(os.path.join(folder, name), "rb").read()
        blob = os.path.join(storage, "blobs", hashlib.sha256(content).hexdigest())
        with open(blob, "wb") as f:
            f.write(content)
        os.symlink(os.path.relpath(blob, snapshot), os.path.join(snapshot, name))
    for name in missing:
        open(os.path.join(storage, ".no_exist", commit, name), "w").close()


@pytest.mark.parametrize("offline", [True, False])
def test_a_hub_ids_files_come_from_the_hubs_download_cache(tiny_model_dir, tmp_path, monkeypatch, offline):
    """Offline (``HF_HUB_OFFLINE``), the cached snapshot is all there is; online, the names the cache records as
    missing are not asked for (nothing here can reach the hub: a request would fail the test)."""
    import huggingface_hub

    repo_id = f"tinyorg/tiny-qwen-{offline}"  # each its own: source_files keeps what it found per hub id
    held = sorted(os.listdir(tiny_model_dir))
    _hub_cache(tmp_path / "hub", repo_id, tiny_model_dir,
               missing=[] if offline else [name for name in CARRIED_OVER if name not in held])
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", offline)
    monkeypatch.delenv("DOWNLOAD_SOURCE", raising=False)
    found = source_files(repo_id)
    assert sorted(found) == sorted(set(held) - {"model.safetensors"})
    assert all(f"models--tinyorg--tiny-qwen-{offline}/snapshots/" in path for path in found.values())
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    write_source_files(repo_id, str(folder), dtype="bfloat16")
    for name in found:
        written, theirs = (folder / name).read_bytes(), open(os.path.join(tiny_model_dir, name), "rb").read()
        if name == "config.json":
            assert json.loads(written) == {**json.loads(theirs), "torch_dtype": "bfloat16"}
        else:
            assert written == theirs, name


def test_a_hub_id_without_its_config_in_the_cache_is_said(tmp_path, monkeypatch):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(FileNotFoundError, match="model tinyorg/absent: the hub repository has no config.json"):
        source_files("tinyorg/absent")
