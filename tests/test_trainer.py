import json
import os
import pickle
import re
import shutil

import numpy as np
import pytest

from paddle_r1.config.jobs import GRPOConfig
from paddle_r1.errors import ConfigError
from paddle_r1.models.loading import load_model
from paddle_r1.checkpoints.folders import list_checkpoints, resolve_checkpoint
from paddle_r1.checkpoints.training_state import rng_state
from paddle_r1.trainer.grpo import GRPOTrainer


def _config(model_dir, out, **kw):
    base = dict(model_name_or_path=model_dir, output_dir=str(out), reward_funcs=["reward_helpers:short_reward", "iou"],
                num_generations=3, per_device_train_batch_size=6, max_completion_length=8, learning_rate=5e-3,
                max_steps=2, save_steps=100, use_visualdl=False, disable_tqdm=True, seed=7, beta=0.0)
    base.update(kw)
    return GRPOConfig(**base)


def _weights(model):
    return {k: v.numpy().copy() for k, v in model.state_dict().items()}


def test_steps_log_save_and_reload(tiny_model_dir, rec_samples, tmp_path):
    # chunks of 16 completion tokens: the training forward's log-probs and entropies are recomputed chunks
    trainer = GRPOTrainer(_config(tiny_model_dir, tmp_path, use_visualdl=True, beta=0.04, logprob_chunk_size=16),
                          samples=rec_samples)
    before = _weights(trainer.policy)
    result = trainer.train()
    after = _weights(trainer.policy)
    assert any(not np.array_equal(before[k], after[k]) for k in before)

    metrics = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
    assert [m["step"] for m in metrics] == [1, 2]
    for key in ("loss", "reward", "reward_std", "kl", "entropy", "clip_ratio/region_mean", "completion_length",
                "learning_rate", "grad_norm", "step_seconds", "tokens_per_second",
                "rewards/reward_helpers:short_reward/mean", "rewards/iou/std"):
        assert key in metrics[0], key
    assert metrics[0]["grad_norm"] > 0 and metrics[1]["kl"] > 0
    vocab = trainer.policy.config.vocab_size
    assert all(0 < m["entropy"] <= np.log(vocab) for m in metrics), [m["entropy"] for m in metrics]
    completions = [json.loads(line) for line in open(tmp_path / "completions.jsonl")]
    assert len(completions) == 2 * 2 * 3
    assert {"problem", "completion", "reward", "advantage", "reward/iou"} <= set(completions[0])
    assert os.listdir(tmp_path / "visualdl")

    # the checkpoint is a model folder from_pretrained loads as it is, equal to the trained policy
    assert result["checkpoint"] == str(tmp_path / "checkpoint-2")
    reloaded = _weights(load_model(result["checkpoint"]))
    for key, value in after.items():
        np.testing.assert_array_equal(reloaded[key], value, err_msg=key)


def test_a_fresh_start_in_another_runs_folder_stops_unless_told_to_overwrite(tiny_model_dir, rec_samples, tmp_path):
    """A run started again without ``--resume`` (a notebook cell run twice, a job relaunched) appended its rows to the
    old run's logs (steps 1, 2, 1, ...) and saved over its checkpoints one by one. It now stops before the model
    loads and leaves the folder as it was; ``overwrite_output_dir`` (TRL's key) removes the old run and starts over;
    ``resume_from_checkpoint`` continues it, as before."""
    GRPOTrainer(_config(tiny_model_dir, tmp_path, max_steps=2, save_steps=1, use_visualdl=True),
                samples=rec_samples).train()
    before = {name: os.path.getmtime(tmp_path / name) for name in os.listdir(tmp_path)}
    with pytest.raises(ConfigError, match=re.escape(
            f"config key 'output_dir': {tmp_path} holds another run (checkpoint-1, checkpoint-2, metrics.jsonl, "
            "completions.jsonl); resume_from_checkpoint latest")):
        GRPOTrainer(_config(tiny_model_dir, tmp_path, max_steps=1), samples=rec_samples)
    assert {name: os.path.getmtime(tmp_path / name) for name in os.listdir(tmp_path)} == before

    GRPOTrainer(_config(tiny_model_dir, tmp_path, max_steps=1, overwrite_output_dir=True), samples=rec_samples).train()
    assert [json.loads(line)["step"] for line in open(tmp_path / "metrics.jsonl")] == [1]
    assert sorted(n for n in os.listdir(tmp_path) if n.startswith("checkpoint-")) == ["checkpoint-1"]
    assert not os.path.exists(tmp_path / "visualdl")  # the old run's curves went with it (this run writes none)
    GRPOTrainer(_config(tiny_model_dir, tmp_path, max_steps=2, resume_from_checkpoint="latest"),
                samples=rec_samples).train()
    assert [json.loads(line)["step"] for line in open(tmp_path / "metrics.jsonl")] == [1, 2]

    # resume_from_checkpoint auto after a run killed before its first save (rows, no checkpoint): a fresh start, which
    # continues from nothing, so those rows go (they were kept, and the new run's followed them)
    for name in os.listdir(tmp_path):
        if name.startswith("checkpoint-"):
            shutil.rmtree(tmp_path / name)
    GRPOTrainer(_config(tiny_model_dir, tmp_path, max_steps=1, resume_from_checkpoint="auto"),
                samples=rec_samples).train()
    assert [json.loads(line)["step"] for line in open(tmp_path / "metrics.jsonl")] == [1]


def _run(model_dir, out, samples, **kw):
    trainer = GRPOTrainer(_config(model_dir, out, **kw), samples=samples)
    losses = [h["loss"] for h in trainer.train()["history"]]
    return losses, _weights(trainer.policy)


@pytest.mark.parametrize("extra", [
    dict(),
    dict(beta=0.05, sync_ref_model=True, ref_model_sync_steps=1, num_iterations=2, lr_scheduler_type="linear",
         warmup_steps=1),
], ids=["plain", "ref-sync-reuse-schedule"])
def test_resume_is_exact(tiny_model_dir, rec_samples, tmp_path, extra):
    straight_losses, straight_weights = _run(tiny_model_dir, tmp_path / "straight", rec_samples, max_steps=4, **extra)
    # a run that stopped after its step-3 checkpoint (step 4's is removed as if it never happened) ...
    split = tmp_path / "split"
    first, _ = _run(tiny_model_dir, split, rec_samples, max_steps=4, save_steps=3, **extra)
    shutil.rmtree(split / "checkpoint-4")
    # ... resumed from the newest complete checkpoint continues exactly as the uninterrupted run
    rest, resumed_weights = _run(tiny_model_dir, split, rec_samples, max_steps=4, resume_from_checkpoint="latest",
                                 **extra)
    assert len(rest) == 1
    np.testing.assert_allclose(first[:3] + rest, straight_losses, rtol=1e-6, atol=1e-7)
    for key, value in straight_weights.items():
        np.testing.assert_allclose(resumed_weights[key], value, rtol=1e-6, atol=1e-7, err_msg=key)


def test_interrupted_save_is_never_the_latest(tmp_path):
    complete = tmp_path / "checkpoint-2"
    complete.mkdir()  # the files resuming parses (a checkpoint of before manifests: not verified)
    (complete / "trainer_state.json").write_text('{"global_step": 2}')
    (complete / "config.json").write_text("{}")
    with open(complete / "rng_state.pkl", "wb") as f:
        pickle.dump(rng_state(), f)
    (tmp_path / "checkpoint-4.tmp").mkdir()  # a save cut off half way
    (tmp_path / "checkpoint-6").mkdir()  # renamed but without state: not complete
    assert list_checkpoints(str(tmp_path)) == [str(complete)]
    assert resolve_checkpoint("latest", str(tmp_path)) == str(complete)
    with pytest.raises(FileNotFoundError, match="not a complete checkpoint"):
        resolve_checkpoint(str(tmp_path / "checkpoint-6"), str(tmp_path))


def test_freeze_vision(tiny_model_dir, rec_samples, tmp_path):
    trainer = GRPOTrainer(_config(tiny_model_dir, tmp_path, freeze_vision=True, max_steps=1), samples=rec_samples)
    before = _weights(trainer.policy)
    trainer.train()
    after = _weights(trainer.policy)
    vision = [k for k in before if ".visual." in k or k.startswith("visual.")]
    text = [k for k in before if "language_model.layers" in k]
    assert vision and text
    assert all(np.array_equal(before[k], after[k]) for k in vision)
    assert any(not np.array_equal(before[k], after[k]) for k in text)


def test_sync_ref_model_mixes_weights(tiny_model_dir, rec_samples, tmp_path):
    trainer = GRPOTrainer(_config(tiny_model_dir, tmp_path, beta=0.1, sync_ref_model=True, ref_model_sync_steps=1,
                                  ref_model_mixup_alpha=0.25, max_steps=1), samples=rec_samples)
    ref_before = _weights(trainer.reference)
    trainer.train()
    policy, ref_after = _weights(trainer.policy), _weights(trainer.reference)
    for key in ref_before:
        np.testing.assert_allclose(ref_after[key], 0.25 * policy[key] + 0.75 * ref_before[key], rtol=1e-5, atol=1e-7)


def test_rewards_that_are_none_and_bad_setups(tiny_model_dir, rec_samples, tmp_path):
    trainer = GRPOTrainer(_config(tiny_model_dir, tmp_path, reward_funcs=["reward_helpers:none_for_all", "format"],
                                  max_steps=1), samples=rec_samples)
    metrics = trainer.train()["history"][0]
    assert np.isnan(metrics["rewards/reward_helpers:none_for_all/mean"]) and metrics["reward"] == 0.0
    with pytest.raises(ConfigError, match="the dataset is empty"):
        GRPOTrainer(_config(tiny_model_dir, tmp_path), samples=[])
    with pytest.raises(ConfigError, match="unknown reward .accurcy."):
        GRPOTrainer(_config(tiny_model_dir, tmp_path, reward_funcs=["accurcy"]), samples=rec_samples)
    with pytest.raises(FileNotFoundError, match="model folder not found: /no/such/model"):
        GRPOTrainer(_config("/no/such/model", tmp_path), samples=rec_samples)


def test_a_solution_a_reward_cannot_read_is_left_out_not_fatal(tiny_model_dir, rec_samples, tmp_path):
    # counting cannot read an integer from sample 1's solution: bad data, scored None and counted, not a crash
    samples = [{**s, "solution": "a box somewhere" if i == 1 else 3} for i, s in enumerate(rec_samples[:4])]
    trainer = GRPOTrainer(_config(tiny_model_dir, tmp_path, reward_funcs=["counting", "reward_helpers:short_reward"],
                                  max_steps=2, per_device_train_batch_size=12), samples=samples)
    metrics = trainer.train()["history"]
    assert sum(m.get("rewards/counting/bad_solutions", 0) for m in metrics) == 2 * 3  # one prompt x G, each step


def test_non_finite_steps_are_skipped_and_stop_the_run(tiny_model_dir, rec_samples, tmp_path):
    """--learning_rate 1e10 used to give loss=nan from then on, exit code 0 and a checkpoint of NaN weights.
    Now a step whose loss or gradient norm is not finite leaves weights and optimizer state untouched, is counted,
    and max_skipped_steps in a row stop the run with the newest checkpoint as it was."""
    from paddle_r1.trainer.base import TrainingDiverged

    trainer = GRPOTrainer(_config(tiny_model_dir, tmp_path, learning_rate=1e10, max_grad_norm=0.0, max_steps=12,
                                  save_steps=1, max_skipped_steps=2), samples=rec_samples)
    seen = []
    original = trainer.apply_update

    def watched(losses):
        before = (_weights(trainer.policy), {k: v.numpy().copy() for k, v in trainer.optimizer.state_dict().items()
                                            if hasattr(v, "numpy")})
        metrics = original(losses)
        seen.append((metrics, before, _weights(trainer.policy)))
        return metrics

    trainer.apply_update = watched
    with pytest.raises(TrainingDiverged, match="2 steps in a row .*max_skipped_steps.*newest checkpoint is"):
        trainer.train()
    skipped = [(m, before, after) for m, before, after in seen if not np.isfinite(m["grad_norm"])
               or not all(np.isfinite(v).all() for v in after.values())]
    assert skipped, "the run never produced a non-finite step"
    for metrics, (weights, _), after in skipped:
        for key, value in weights.items():
            np.testing.assert_array_equal(after[key], value, err_msg=key)
    assert seen[-1][0]["train/skipped_steps"] == 1 and trainer.skipped_steps == 2  # the second one stopped the run
    newest = list_checkpoints(str(tmp_path))[-1]
    assert all(np.isfinite(v).all() for v in _weights(load_model(newest)).values())


def test_an_update_that_writes_non_finite_weights_is_undone_and_never_saved(tiny_model_dir, rec_samples, tmp_path,
                                                                            capsys):
    """learning_rate 1e39 is a finite number, but infinite in AdamW's float32 kernel: the loss and the gradient norm
    are finite and the update writes inf and NaN into every weight. That used to train on, logging NaN, and save
    checkpoints of NaN weights with exit code 0. Now the step is undone (weights and AdamW state as they were),
    counted as skipped, and a save refuses weights that are not finite."""
    from paddle_r1.trainer.base import TrainingDiverged

    trainer = GRPOTrainer(_config(tiny_model_dir, tmp_path, learning_rate=1e39, max_grad_norm=0.0, max_steps=4,
                                  save_steps=1, max_skipped_steps=2), samples=rec_samples)
    weights = _weights(trainer.policy)
    state = {k: v.numpy().copy() for k, v in trainer.optimizer.state_dict().items() if hasattr(v, "numpy")}
    with pytest.raises(TrainingDiverged, match="2 steps in a row .*gradient norm or update.*newest checkpoint is "
                                               f"{tmp_path}/checkpoint-1"):
        trainer.train()
    printed = capsys.readouterr().out
    for step in (1, 2):  # finite loss and gradient norm: only the weights tell
        assert re.search(fr"step {step}: loss -?\d[^,]*, gradient norm \d[^:]*: the update made weights non-finite; "
                         fr"weights and optimizer state restored, update skipped \({step} in a row\)", printed), printed
    assert trainer.skipped_steps == 2
    saved = _weights(load_model(str(tmp_path / "checkpoint-1")))  # the step-1 checkpoint holds the restored weights
    for key, value in _weights(trainer.policy).items():
        np.testing.assert_array_equal(value, weights[key], err_msg=key)
        np.testing.assert_array_equal(saved[key], weights[key], err_msg=key)
    after = trainer.optimizer.state_dict()
    assert state and all(np.array_equal(after[k].numpy(), v) for k, v in state.items())  # moments, beta powers

    name, weight = next(iter(trainer.policy.named_parameters()))
    weight.set_value(np.full(weight.shape, np.nan, dtype="float32"))
    with pytest.raises(TrainingDiverged, match=f"step 2: 1 of \\d+ weight tensors \\({re.escape(name)}\\) hold NaN or "
                                               f"infinity; .*checkpoint-2 is not written"):
        trainer.save()
    assert sorted(f for f in os.listdir(tmp_path) if f.startswith("checkpoint")) == ["checkpoint-1"]


def test_without_the_undo_copy_a_non_finite_update_stops_the_run_unsaved(tiny_model_dir, rec_samples, tmp_path):
    """undo_non_finite_updates: false takes no copy before each step (large models): the same update is detected
    and stops the run at once, before a checkpoint of NaN weights could be written."""
    from paddle_r1.trainer.base import TrainingDiverged

    trainer = GRPOTrainer(_config(tiny_model_dir, tmp_path, learning_rate=1e39, max_grad_norm=0.0, max_steps=4,
                                  save_steps=1, undo_non_finite_updates=False), samples=rec_samples)
    with pytest.raises(TrainingDiverged, match="step 1: the update made weights non-finite and "
                                               "undo_non_finite_updates is false.*no checkpoint was saved"):
        trainer.train()
    assert "snapshot" not in vars(trainer.update)  # the host copy was never made
    assert not list(tmp_path.glob("checkpoint-*"))


def test_a_reward_returning_inf_is_a_counted_failure(tiny_model_dir, rec_samples, tmp_path):
    trainer = GRPOTrainer(_config(tiny_model_dir, tmp_path, reward_funcs=["reward_helpers:inf_for_first"],
                                  max_steps=1), samples=rec_samples)
    metrics = trainer.train()["history"][0]
    assert metrics["rewards/reward_helpers:inf_for_first/non_finite"] == 1
    assert np.isfinite(metrics["loss"]) and np.isfinite(metrics["reward"])
    assert all(np.isfinite(v).all() for v in _weights(trainer.policy).values())


def test_completions_no_reward_scored_get_reward_nan_and_no_gradient(tiny_model_dir, rec_samples, tmp_path):
    trainer = GRPOTrainer(_config(tiny_model_dir, tmp_path, reward_funcs=["reward_helpers:none_for_all"],
                                  max_steps=1), samples=rec_samples)
    before = _weights(trainer.policy)
    metrics = trainer.train()["history"][0]
    assert np.isnan(metrics["reward"]) and metrics["grad_norm"] == 0.0
    rows = [json.loads(line) for line in open(tmp_path / "completions.jsonl")]
    assert all(row["reward"] is None and row["advantage"] == 0.0 for row in rows)
    assert all(np.array_equal(before[k], v) for k, v in _weights(trainer.policy).items())


def test_a_resumed_run_logs_one_history(tiny_model_dir, rec_samples, tmp_path):
    _run(tiny_model_dir, tmp_path, rec_samples, max_steps=4, save_steps=2)
    _run(tiny_model_dir, tmp_path, rec_samples, max_steps=4, resume_from_checkpoint=str(tmp_path / "checkpoint-2"))
    steps = [json.loads(line)["step"] for line in open(tmp_path / "metrics.jsonl")]
    assert steps == [1, 2, 3, 4]
    completion_steps = [json.loads(line)["step"] for line in open(tmp_path / "completions.jsonl")]
    assert completion_steps == sorted(completion_steps) and len(completion_steps) == 4 * 2 * 3


def test_auto_keeps_the_undo_copy_only_within_its_budget(tiny_model_dir, rec_samples, tmp_path, monkeypatch):
    """undo_non_finite_updates: auto (the default) keeps the host copy while it fits the budget on every rank, so
    the tiny model's bad update is undone (the test above); with the budget below the copy's size it takes no copy
    and the same update stops the run, naming the budget."""
    from paddle_r1 import memory
    from paddle_r1.trainer.base import TrainingDiverged

    config = _config(tiny_model_dir, tmp_path, learning_rate=1e39, max_grad_norm=0.0, max_steps=4, save_steps=1)
    assert config.undo_non_finite_updates == "auto"
    kept = GRPOTrainer(config, samples=rec_samples)
    assert kept.update.undo_non_finite
    size = sum(int(p.numel()) * p.element_size() for p in kept.update.parameters)  # the weights alone: below the copy
    monkeypatch.setattr(memory, "UNDO_COPY_BUDGET_GIB", size / memory.GIB)
    trainer = GRPOTrainer(config.with_values(output_dir=str(tmp_path / "over")), samples=rec_samples)
    with pytest.raises(TrainingDiverged, match="step 1: the update made weights non-finite and undo_non_finite_updates "
                                               "is auto and the host copy .* is over its .* GiB budget"):
        trainer.train()
    assert "snapshot" not in vars(trainer.update)


def test_log_completions_prints_a_steps_completions(tiny_model_dir, rec_samples, tmp_path, capsys):
    """TRL's log_completions / num_completions_to_print: the first N completions of each logged step printed with
    their problem, rewards and advantage, as completions.jsonl holds them; nothing without the key."""
    GRPOTrainer(_config(tiny_model_dir, tmp_path / "quiet", max_steps=1), samples=rec_samples).train()
    assert "completions\n[1] reward" not in capsys.readouterr().out
    GRPOTrainer(_config(tiny_model_dir, tmp_path / "told", max_steps=2, log_completions=True,
                        num_completions_to_print=2), samples=rec_samples).train()
    printed = capsys.readouterr().out
    rows = [json.loads(line) for line in open(tmp_path / "told" / "completions.jsonl")]
    for step in (1, 2):
        first = next(row for row in rows if row["step"] == step)
        block = printed[printed.index(f"step {step}: 2 of 6 completions"):]
        assert block.splitlines()[1].startswith(f"[1] reward {first['reward']:.4g} (reward_helpers:short_reward ")
        assert f"advantage {first['advantage']:.4g}" in block.splitlines()[1]
        assert block.splitlines()[2:4] == [f"    problem: {first['problem']}", f"    completion: {first['completion']}"]
        assert "[3] reward" not in block.split(f"step {step + 1}:")[0]
