"""Checkpoint folders under interruptions, resumes from older steps, a full disk and sharded optimizer state;
and the run logs after a resume."""
import json
import os

import numpy as np
import paddle
import pytest

from paddle_r1.errors import ConfigError
from paddle_r1.checkpoints import folders as ckpt, training_state
from paddle_r1.telemetry.metrics import MetricsLogger


def model_folder_writer(model, processor):
    """Writes what the trainer's model folder holds from paddleformers (a source that is no local folder)."""
    def write(folder):
        model.save_pretrained(folder)
        processor.save_pretrained(folder)
    return write


@pytest.fixture
def saver(tiny):
    """save(output_dir, step) writes a real checkpoint of the tiny model, as the trainer does."""
    model, processor = tiny
    optimizer = paddle.optimizer.AdamW(learning_rate=1e-3, parameters=model.parameters())

    def save(output_dir, step, limit=None):
        tmp = ckpt.begin_checkpoint(str(output_dir), step)
        return ckpt.finish_checkpoint(tmp, ckpt.checkpoint_dir(str(output_dir), step),
                                      write_model=model_folder_writer(model, processor), policy=model,
                                      optimizer=optimizer, trainer_state={"global_step": step},
                                      save_total_limit=limit)
    return save


def _steps(paths):
    return [ckpt.load_trainer_state(p)["global_step"] for p in paths]


def test_rotation_and_latest_follow_the_resumed_run_not_the_highest_step(saver, tmp_path):
    # a run saved steps 3 and 6 (save_total_limit 2); the user resumed from checkpoint-3 and saves 4, then 5
    for step in (3, 6, 4, 5):
        saver(tmp_path, step, limit=2)
    assert _steps(ckpt.list_checkpoints(str(tmp_path))) == [4, 5]
    assert ckpt.resolve_checkpoint("latest", str(tmp_path)) == str(tmp_path / "checkpoint-5")


def test_resaving_a_step_keeps_a_complete_copy_until_the_new_one_is_in(saver, tmp_path, monkeypatch):
    saver(tmp_path, 2, limit=1)
    real_replace = os.replace

    def killed_at_rename_in(src, dst):
        if str(src).endswith(".tmp"):
            raise KeyboardInterrupt("killed between moving the old folder and renaming the new one in")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", killed_at_rename_in)
    with pytest.raises(KeyboardInterrupt):
        saver(tmp_path, 2, limit=1)
    monkeypatch.undo()
    # the old step-2 folder survives (moved aside), and resuming finds it by "latest" or by its name
    found = ckpt.list_checkpoints(str(tmp_path))
    assert _steps(found) == [2] and os.path.isfile(os.path.join(found[0], "model.safetensors.index.json"))
    assert ckpt.resolve_checkpoint("latest", str(tmp_path)) == found[0]
    assert ckpt.resolve_checkpoint(str(tmp_path / "checkpoint-2"), str(tmp_path)) == found[0]
    # the next save of that step completes and leaves exactly one folder
    saver(tmp_path, 2, limit=1)
    assert sorted(os.listdir(tmp_path)) == ["checkpoint-2"]


def test_a_leftover_aside_copy_is_ignored_while_its_replacement_is_complete(saver, tmp_path):
    # killed after renaming the new folder in but before deleting the aside copy
    saver(tmp_path, 2)
    saver(tmp_path, 3)
    os.rename(tmp_path / "checkpoint-3", tmp_path / "checkpoint-2.old")
    saver(tmp_path, 3)
    assert ckpt.list_checkpoints(str(tmp_path)) == [str(tmp_path / "checkpoint-2"), str(tmp_path / "checkpoint-3")]
    saver(tmp_path, 4, limit=1)  # rotating step 2 out removes its aside copy too
    assert sorted(os.listdir(tmp_path)) == ["checkpoint-4"]


def test_a_full_disk_removes_the_partial_save_and_names_the_newest_complete_checkpoint(saver, tiny, tmp_path):
    saver(tmp_path, 1)
    model, processor = tiny
    tmp = ckpt.begin_checkpoint(str(tmp_path), 2)
    # a real ENOSPC from the kernel: the optimizer file is written through a link to /dev/full
    os.symlink("/dev/full", os.path.join(tmp, "optimizer.pdopt"))
    optimizer = paddle.optimizer.AdamW(learning_rate=1e-3, parameters=model.parameters())
    with pytest.raises(ckpt.NoSpaceError, match="no space left while saving checkpoint-2; checkpoint-1 is the "
                                                "newest complete one"):
        ckpt.finish_checkpoint(tmp, ckpt.checkpoint_dir(str(tmp_path), 2),
                               write_model=model_folder_writer(model, processor), policy=model, optimizer=optimizer,
                               trainer_state={"global_step": 2})
    assert sorted(os.listdir(tmp_path)) == ["checkpoint-1"]


# ---- optimizer state: host memory, one shard per rank ----------------------------------------------------------
def _trained(seed=0):
    paddle.seed(seed)
    model = paddle.nn.Sequential(paddle.nn.Linear(4, 3), paddle.nn.Linear(3, 2))
    optimizer = paddle.optimizer.AdamW(learning_rate=0.1, parameters=model.parameters())
    return model, optimizer


def _step(model, optimizer, x):
    model(x).square().mean().backward()
    optimizer.step()
    optimizer.clear_grad()


def _write_two_shards(folder, model, optimizer, first_share=2):
    """What two sharded ranks write: each the moments of its own weights (rank 0 the first ``first_share``
    weights), both the scheduler."""
    state = training_state.optimizer_state(optimizer, model)
    names = [name for name, _ in model.named_parameters()]
    for rank, own in enumerate((names[:first_share], names[first_share:])):
        share = {k: v for k, v in state.items() if k == "LR_Scheduler" or any(k.startswith(n + "_") for n in own)}
        paddle.save(share, os.path.join(folder, f"optimizer.shard{rank}.pdopt"))
    return state


def test_a_rank_reads_only_its_own_shard_to_host_memory(tmp_path):
    model, optimizer = _trained()
    _step(model, optimizer, paddle.randn([5, 4]))
    whole = _write_two_shards(str(tmp_path), model, optimizer)
    (tmp_path / "optimizer.shard1.pdopt").write_bytes(b"rank 1's file: rank 0 must not open it")

    # rank 0 of a sharded run with the saved layout keeps the state of the first two weights
    state = training_state.read_optimizer_state(str(tmp_path), ["0.weight", "0.bias"], first_shard=0)
    moments = {k: v for k, v in state.items() if k != "LR_Scheduler"}
    assert moments and all(k.startswith(("0.weight_", "0.bias_")) for k in moments)
    assert all(isinstance(v, np.ndarray) for v in moments.values())  # host arrays, not device tensors
    for key, value in moments.items():
        np.testing.assert_array_equal(value, whole[key].numpy())


def test_a_sharded_rank_gathers_its_share_from_shards_split_another_way(tmp_path):
    """The same number of shards, split another way (what stage 1 and stage 2, or another set of trainable
    weights, give): rank 0's own file does not hold all of its new share, so the rest comes from rank 1's."""
    model, optimizer = _trained()
    _step(model, optimizer, paddle.randn([5, 4]))
    whole = _write_two_shards(str(tmp_path), model, optimizer, first_share=1)  # rank 0 saved "0.weight" only
    share = ["0.weight", "0.bias", "1.weight"]
    state = training_state.read_optimizer_state(str(tmp_path), share, first_shard=0)
    expected = {k for k in whole if any(k.startswith(n + "_") for n in share)}
    assert set(state) - {"LR_Scheduler"} == expected  # all of the share, nothing of "1.bias"
    for key in expected:
        np.testing.assert_array_equal(state[key], whole[key].numpy())


def test_weights_the_checkpoint_has_no_state_for_are_named(tmp_path):
    model, optimizer = _trained()
    _step(model, optimizer, paddle.randn([5, 4]))
    _write_two_shards(str(tmp_path), model, optimizer)
    with pytest.raises(ConfigError, match=r"resume_from_checkpoint.*optimizer.shard0.pdopt, optimizer.shard1.pdopt.*"
                                          r"nothing for 1 weight\(s\) this run trains \(2.weight\)"):
        training_state.read_optimizer_state(str(tmp_path), ["0.weight", "2.weight"], first_shard=0)


def test_shards_merged_for_another_rank_count_resume_exactly(tmp_path):
    model, optimizer = _trained()
    x = paddle.randn([5, 4])
    _step(model, optimizer, x)
    _write_two_shards(str(tmp_path), model, optimizer)
    weights = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    _step(model, optimizer, x)

    resumed, resumed_optimizer = _trained(seed=1)
    resumed.set_state_dict({k: paddle.to_tensor(v) for k, v in weights.items()})
    # one replicated rank keeps the state of every weight: both shards, merged
    names = [name for name, _ in resumed.named_parameters()]
    state = training_state.read_optimizer_state(str(tmp_path), names, first_shard=0)
    assert all(isinstance(v, np.ndarray) for k, v in state.items() if k != "LR_Scheduler")
    training_state.load_optimizer_state(resumed_optimizer, resumed, state)
    _step(resumed, resumed_optimizer, x)
    for key, value in model.state_dict().items():
        np.testing.assert_array_equal(resumed.state_dict()[key].numpy(), value.numpy(), err_msg=key)


# ---- logs after a resume -----------------------------------------------------------------------------------------
def _rows(path):
    return [json.loads(line) for line in open(path, encoding="utf-8")]


def test_resumed_logs_drop_the_rows_of_redone_steps(tmp_path):
    logger = MetricsLogger(str(tmp_path))
    for step in range(0, 6):  # step 0: the held-out score training starts from
        logger.log(step, {"loss": float(step)}, echo=lambda _: None)
        logger.log_completions([{"step": step, "completion": f"c{step}-{g}"} for g in range(2)])
    with open(tmp_path / "metrics.jsonl", "a", encoding="utf-8") as f:
        f.write('{"step": 6, "lo')  # a row cut off by the kill
    logger.close()

    resumed = MetricsLogger(str(tmp_path), resume_step=3)
    for step in (4, 5):
        resumed.log(step, {"loss": 10.0 + step}, echo=lambda _: None)
        resumed.log_completions([{"step": step, "completion": "again"}])
    assert [(r["step"], r["loss"]) for r in _rows(tmp_path / "metrics.jsonl")] == \
        [(0, 0.0), (1, 1.0), (2, 2.0), (3, 3.0), (4, 14.0), (5, 15.0)]
    assert [r["step"] for r in _rows(tmp_path / "completions.jsonl")] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 5]
    assert not os.path.exists(tmp_path / "metrics.jsonl.tmp")


def test_a_resumed_grpo_run_rotates_out_the_abandoned_higher_step(tiny_model_dir, rec_samples, tmp_path):
    from paddle_r1.config.jobs import GRPOConfig
    from paddle_r1.trainer.grpo import GRPOTrainer

    def run(**kw):
        config = GRPOConfig(model_name_or_path=tiny_model_dir, output_dir=str(tmp_path), reward_funcs=["iou"],
                            num_generations=2, per_device_train_batch_size=2, max_completion_length=4,
                            use_visualdl=False, disable_tqdm=True, beta=0.0, save_total_limit=2, **kw)
        GRPOTrainer(config, samples=rec_samples).train()

    run(max_steps=6, save_steps=3)  # checkpoints 3 and 6
    # the user goes back to step 3 and runs to step 5, saving every step: 6 belongs to the abandoned run
    run(max_steps=5, save_steps=1, resume_from_checkpoint=str(tmp_path / "checkpoint-3"))
    assert _steps(ckpt.list_checkpoints(str(tmp_path))) == [4, 5]
    assert ckpt.resolve_checkpoint("latest", str(tmp_path)) == str(tmp_path / "checkpoint-5")
