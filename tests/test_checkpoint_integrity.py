"""Verified checkpoints: every file of a real save (every rank's included) is in its manifest; a flipped byte, a cut
short, emptied or deleted file is named with its checkpoint, ``latest`` passes over it saying so, a checkpoint named
by path is refused, and all ranks resume from the same checkpoint. Checkpoints saved before manifests still load."""
import hashlib
import json
import os
import re
import shutil

import pytest

from checkpoint_worker import flip_byte, save_corrupt_and_resume
from forked_ranks import spawn_ranks
from paddle_r1.cli import main as paddle_r1_main
from paddle_r1.config.jobs import GRPOConfig
from paddle_r1.evaluation.cli import main as eval_main
from paddle_r1.checkpoints.folders import STATE_FILE, resolve_checkpoint, verify_checkpoint
from paddle_r1.trainer.grpo import GRPOTrainer
from paddle_r1.checkpoints.manifest import MANIFEST_FILE, CheckpointError
from test_cli import paddle_r1

# 3 steps, a checkpoint each; step 3 is mid-way through num_iterations 2, so it also holds each rank's rollout buffer
RUN = dict(reward_funcs=["iou"], num_generations=2, per_device_train_batch_size=2, max_completion_length=4,
           use_visualdl=False, disable_tqdm=True, max_steps=3, save_steps=1, num_iterations=2)
WEIGHTS = "model-00001-of-00001.safetensors"


def _single_config(model_dir, out, **kw):
    """One process, the reference synced into the policy's checkpoints (ref_model/)."""
    return GRPOConfig(model_name_or_path=model_dir, output_dir=str(out), beta=0.05, sync_ref_model=True,
                      ref_model_sync_steps=1, **RUN, **kw)


@pytest.fixture(scope="module")
def single(tmp_path_factory, tiny_model_dir, rec_samples):
    out = tmp_path_factory.mktemp("single") / "run"
    GRPOTrainer(_single_config(tiny_model_dir, out), samples=rec_samples).train()
    return out


@pytest.fixture(scope="module")
def sharded(tmp_path_factory, tiny_model_dir, rec_jsonl):
    """Two gloo ranks, stage-1 sharding: the run as saved (``saved/``), and what each rank chose once rank 1's
    optimizer shard of checkpoint-3 had a byte flipped (``rank0.json``, ``rank1.json``)."""
    dump = tmp_path_factory.mktemp("sharded")
    settings = dict(model_name_or_path=tiny_model_dir, data_path=rec_jsonl, output_dir=str(dump / "run"), beta=0.0,
                    sharding="stage1", **RUN)
    spawn_ranks(save_corrupt_and_resume, args=(settings, str(dump)))
    return dump


def _sharded_run(sharded):
    return sharded / "saved"


def _files(folder):
    return sorted(os.path.relpath(os.path.join(root, f), folder) for root, _, files in os.walk(folder) for f in files)


def test_every_file_of_every_rank_is_in_the_manifest(single, sharded):
    for checkpoint in (single / "checkpoint-3", _sharded_run(sharded) / "checkpoint-3"):
        manifest = json.load(open(checkpoint / MANIFEST_FILE))["files"]
        assert sorted(manifest) == [f for f in _files(checkpoint) if f != MANIFEST_FILE]
        for name, entry in manifest.items():
            data = (checkpoint / name).read_bytes()
            assert entry == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}, name
        assert json.load(open(checkpoint / STATE_FILE))["manifest"] == MANIFEST_FILE
    assert {"ref_model/" + WEIGHTS, "optimizer.pdopt", "extra_state_rank0.pdparams"} <= \
        set(_files(single / "checkpoint-3"))
    assert {"optimizer.shard0.pdopt", "optimizer.shard1.pdopt", "extra_state_rank1.pdparams"} <= \
        set(_files(_sharded_run(sharded) / "checkpoint-3"))


def test_all_ranks_resume_from_the_same_checkpoint_verified_once(sharded):
    chosen = [json.load(open(sharded / f"rank{rank}.json")) for rank in (0, 1)]
    damaged = sharded / "run" / "checkpoint-3"
    # rank 0 hashed checkpoint-3's files (all of them: their sizes match), then checkpoint-2's, then checkpoint-3's
    # again when it was named; rank 1 took rank 0's word
    files = {step: len(json.load(open(_sharded_run(sharded) / f"checkpoint-{step}" / MANIFEST_FILE))["files"])
             for step in (2, 3)}
    assert (chosen[0]["hashed"], chosen[1]["hashed"]) == (2 * files[3] + files[2], 0)
    for rank in chosen:
        assert rank["chosen"] == str(sharded / "run" / "checkpoint-2")
        assert rank["refused"] == (f"resume_from_checkpoint: checkpoint {damaged}: optimizer.shard1.pdopt: SHA-256 "
                                   "differs from the manifest's (the file changed after it was saved)")


def _truncate(path):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


DAMAGE = {  # how a file is damaged, and what the message says about it (given the size it was saved with)
    "flip": (flip_byte, lambda size: "SHA-256 differs from the manifest's (the file changed after it was saved)"),
    "truncate": (_truncate, lambda size: f"{size // 2} bytes, {size} when saved"),
    "empty": (lambda path: open(path, "w").close(), lambda size: f"0 bytes, {size} when saved"),
    "delete": (os.remove, lambda size: "missing"),
}
# (run, file, read by a model load: eval and serve refuse it too)
FILES = [("single", WEIGHTS, True), ("single", "model.safetensors.index.json", True), ("single", "config.json", True),
         ("single", "tokenizer.json", True), ("single", "preprocessor_config.json", True),
         ("single", "trainer_state.json", True), ("single", "optimizer.pdopt", False),
         ("single", "rng_state.pkl", False), ("single", "ref_model/" + WEIGHTS, False),
         ("single", "extra_state_rank0.pdparams", False), ("sharded", "optimizer.shard1.pdopt", False),
         ("sharded", "extra_state_rank1.pdparams", False)]


def _copy_run(run, tmp_path, steps=(2, 3)):
    out = tmp_path / "run"
    for step in steps:
        shutil.copytree(run / f"checkpoint-{step}", out / f"checkpoint-{step}")
    return out


@pytest.mark.parametrize("damage", DAMAGE)
@pytest.mark.parametrize("run, name, model_reads", FILES, ids=[f"{r}:{n}" for r, n, _ in FILES])
def test_a_damaged_file_is_named_latest_passes_over_it_and_a_named_path_refuses(request, tmp_path, run, name,
                                                                                 model_reads, damage):
    source = request.getfixturevalue(run)
    out = _copy_run(_sharded_run(source) if run == "sharded" else source, tmp_path)
    damaged, previous = out / "checkpoint-3", out / "checkpoint-2"
    size = os.path.getsize(damaged / name)
    spoil, what = DAMAGE[damage]
    spoil(str(damaged / name))
    problem = f"checkpoint {damaged}: {name}: {what(size)}"

    said = []
    assert resolve_checkpoint("latest", str(out), echo=said.append) == str(previous)
    assert said == [f"resume_from_checkpoint latest: skipping {problem}",
                    f"resume_from_checkpoint latest: resuming from {previous}, the newest checkpoint that verifies"]
    with pytest.raises(CheckpointError) as refused:
        resolve_checkpoint(str(damaged), str(out))
    assert str(refused.value) == f"resume_from_checkpoint: {problem}"
    # eval and serve check what loading the model reads, and only that
    if model_reads:
        with pytest.raises(CheckpointError, match=f"^{re.escape(problem)}$"):
            verify_checkpoint(str(damaged), model_only=True)
    else:
        verify_checkpoint(str(damaged), model_only=True)


def _saved_before_manifests(checkpoint):
    """The checkpoint as paddle_r1 saved it before manifests: no manifest, no mention of one in the state."""
    os.remove(checkpoint / MANIFEST_FILE)
    state = json.load(open(checkpoint / STATE_FILE))
    del state["manifest"]
    (checkpoint / STATE_FILE).write_text(json.dumps(state))


def _set_step(step):
    def spoil(path):
        state = json.load(open(path))
        state["global_step"] = step
        open(path, "w").write(json.dumps(state))
    return spoil


OLD_FORMAT_DAMAGE = [  # file, damage, what the message says (its start)
    (STATE_FILE, lambda path: open(path, "w").close(), "empty"),
    (STATE_FILE, _truncate, "not valid JSON ("),  # json's own words depend on where the cut lands
    (STATE_FILE, _set_step("3"), "global_step is '3', not a whole number of steps"),
    (STATE_FILE, _set_step(2.5), "global_step is 2.5, not a whole number of steps"),
    ("rng_state.pkl", _truncate, "unreadable (UnpicklingError: pickle data was truncated)"),
    ("config.json", _truncate, "not valid JSON ("),
    (WEIGHTS, _truncate, "unreadable (Error while deserializing header: incomplete metadata, file not fully covered)"),
    (WEIGHTS, os.remove, "missing (named by model.safetensors.index.json)"),
]


@pytest.mark.parametrize("name, spoil, what", OLD_FORMAT_DAMAGE,
                         ids=[f"{name}:{what.split(' (')[0]}" for name, _, what in OLD_FORMAT_DAMAGE])
def test_a_checkpoint_without_manifest_is_parsed_and_a_bad_file_named(single, tmp_path, name, spoil, what):
    out = _copy_run(single, tmp_path)
    damaged, previous = out / "checkpoint-3", out / "checkpoint-2"
    for checkpoint in (damaged, previous):
        _saved_before_manifests(checkpoint)
    spoil(str(damaged / name))
    notice = "no manifest.json (saved before checkpoints carried one): its files are parsed, not verified"

    said = []
    assert resolve_checkpoint("latest", str(out), echo=said.append) == str(previous)
    expected = [f"{damaged}: {notice}", f"resume_from_checkpoint latest: skipping checkpoint {damaged}: {name}: {what}",
                f"{previous}: {notice}",
                f"resume_from_checkpoint latest: resuming from {previous}, the newest checkpoint that verifies"]
    assert len(said) == len(expected) and all(line.startswith(start) for line, start in zip(said, expected)), said
    with pytest.raises(CheckpointError, match=f"^resume_from_checkpoint: checkpoint {damaged}: {name}: "):
        resolve_checkpoint(str(damaged), str(out), echo=lambda line: None)


def test_a_deleted_or_unreadable_manifest_is_named(single, tmp_path):
    out = _copy_run(single, tmp_path, steps=(3,))
    checkpoint = out / "checkpoint-3"
    _truncate(checkpoint / MANIFEST_FILE)
    with pytest.raises(CheckpointError, match=f"^checkpoint {checkpoint}: manifest.json: unreadable "
                                              r"\(JSONDecodeError: "):
        verify_checkpoint(str(checkpoint))
    os.remove(checkpoint / MANIFEST_FILE)
    with pytest.raises(CheckpointError, match=f"^checkpoint {checkpoint}: manifest.json: missing "
                                              r"\(trainer_state.json says one was saved with it\)$"):
        verify_checkpoint(str(checkpoint))


def test_a_run_resumes_from_latest_past_a_damaged_checkpoint_and_an_old_one_loads(single, tiny_model_dir,
                                                                                   rec_samples, tmp_path, capsys):
    out = _copy_run(single, tmp_path)
    flip_byte(out / "checkpoint-3" / WEIGHTS)
    _saved_before_manifests(out / "checkpoint-2")
    trainer = GRPOTrainer(_single_config(tiny_model_dir, out, resume_from_checkpoint="latest"), samples=rec_samples)
    printed = capsys.readouterr().out
    assert trainer.resume_path == str(out / "checkpoint-2") and trainer.step == 2
    assert f"skipping checkpoint {out / 'checkpoint-3'}: {WEIGHTS}: SHA-256 differs" in printed
    assert printed.count("no manifest.json (saved before checkpoints carried one)") == 1
    trainer.train()  # step 3 again: its checkpoint is replaced by one that verifies
    verify_checkpoint(str(out / "checkpoint-3"))


def test_the_commands_refuse_a_damaged_checkpoint_in_one_line(single, tiny_model_dir, rec_jsonl, tmp_path, capsys):
    out = _copy_run(single, tmp_path, steps=(3,))
    damaged = out / "checkpoint-3"
    flip_byte(damaged / WEIGHTS)
    problem = (f"checkpoint {damaged}: {WEIGHTS}: SHA-256 differs from the manifest's (the file changed after it was "
               "saved)")
    result = paddle_r1("train", "--model_name_or_path", tiny_model_dir, "--data_path", rec_jsonl,
                       "--output_dir", str(out), "--resume", str(damaged))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == f"paddle-r1 train: error: resume_from_checkpoint: {problem}"

    capsys.readouterr()
    assert paddle_r1_main(["serve", str(damaged)]) == 2
    assert capsys.readouterr().err.strip() == f"paddle-r1 serve: error: {problem}"
    assert eval_main("rec", ["--model_path", str(out), "--data_root", str(tmp_path), "--test_datasets", "refcoco"]) == 2
    assert capsys.readouterr().err.strip() == f"error: {problem}"
