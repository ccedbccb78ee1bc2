"""Data parallel and stage-1 sharding on CPU: 2 processes over gloo equal one process over the same global batch;
the overlapping gradient reducer equals averaging each gradient after the backward; a checkpoint saved in any of
these layouts resumes in any of them as the uninterrupted run, and a resume with another global batch says how it
goes on."""
import glob
import json
import os

import numpy as np
import paddle
import pytest

from dp_worker import reduce_and_dump, train_and_dump, train_commands, train_each_and_dump
from forked_ranks import spawn_ranks
from test_source_keys import paddlemix_rec_args


def _settings(model_dir, data, out, prompts, **extra):
    return {**dict(model_name_or_path=model_dir, data_path=data, output_dir=str(out),
                   reward_funcs=["reward_helpers:short_reward", "iou"], num_generations=3,
                   per_device_train_batch_size=3 * prompts, max_completion_length=6, learning_rate=5e-3, max_steps=2,
                   save_steps=100, use_visualdl=False, disable_tqdm=True, seed=11, beta=0.02, loss_type="grpo",
                   max_grad_norm=0.5, eval_steps=2, eval_data_path=data, eval_sample_num=5,
                   eval_reward="reward_helpers:short_reward"), **extra}


# the runs of the three layouts save at step 1 too: the checkpoints the resumes below start from
SAVED = dict(save_steps=1)


@pytest.fixture(scope="module")
def single(tmp_path_factory, tiny_model_dir, rec_jsonl):
    """One process over the global batch of 2 prompts: the run every 2-rank run and every resume must equal."""
    out = tmp_path_factory.mktemp("single")
    train_and_dump(_settings(tiny_model_dir, rec_jsonl, out / "run", prompts=2, **SAVED), str(out))
    return out


def _two_ranks(tmp_path, tiny_model_dir, rec_jsonl, **extra):
    spawn_ranks(train_and_dump, args=(_settings(tiny_model_dir, rec_jsonl, tmp_path / "run", prompts=1, **extra),
                                     str(tmp_path)))
    return tmp_path


@pytest.fixture(scope="module")
def replicated(tmp_path_factory, tiny_model_dir, rec_jsonl):
    """2 ranks, plain data parallel, 1 prompt each."""
    return _two_ranks(tmp_path_factory.mktemp("replicated"), tiny_model_dir, rec_jsonl, **SAVED)


@pytest.fixture(scope="module")
def stage1(tmp_path_factory, tiny_model_dir, rec_jsonl):
    """2 ranks, optimizer state sharded (stage 1), 1 prompt each."""
    return _two_ranks(tmp_path_factory.mktemp("stage1"), tiny_model_dir, rec_jsonl, sharding="stage1", **SAVED)


def _assert_same_training(double, single, tiny_model_dir):
    one = np.load(single / "rank0.npz")
    rank0, rank1 = np.load(double / "rank0.npz"), np.load(double / "rank1.npz")
    from paddle_r1.models.loading import load_model

    initial = {k: v.numpy() for k, v in load_model(tiny_model_dir).state_dict().items()}
    moved = max(float(np.abs(one[k] - initial[k]).max()) for k in one.files)
    assert moved > 5e-3  # two Adam steps at lr 5e-3: the comparison below is far tighter than the change
    for key in one.files:
        np.testing.assert_array_equal(rank0[key], rank1[key], err_msg=f"ranks differ: {key}")
        # float tolerance: summation order differs (padding, all-reduce); Adam's 1/sqrt(v) magnifies it for
        # near-zero gradients, so a few elements differ by ~1e-5 on a 5e-3 step
        np.testing.assert_allclose(rank0[key], one[key], rtol=1e-4, atol=5e-5, err_msg=key)
    # the rewards, gradient norms and held-out scores (each rank answering its own slice of the held-out set)
    # logged by rank 0 cover both ranks: they equal the single process's
    for name in ("rewards", "grad_norms", "eval_scores"):
        np.testing.assert_allclose(np.load(double / f"rank0_{name}.npy"), np.load(single / f"rank0_{name}.npy"),
                                   rtol=1e-4, err_msg=name)
    assert (np.load(single / "rank0_grad_norms.npy") > 0.5).any()  # clipping (max_grad_norm 0.5) was exercised
    assert os.path.isdir(double / "run" / "checkpoint-2") and os.path.isfile(double / "run" / "metrics.jsonl")


def _reducer_counts(double) -> list[dict]:
    return [json.load(open(double / f"rank{r}_reducer.json")) for r in (0, 1)]


@pytest.mark.timeout(600)
def test_two_ranks_equal_one_process_over_the_same_global_batch(replicated, single, tiny_model_dir):
    double = replicated
    _assert_same_training(double, single, tiny_model_dir)
    assert os.listdir(double / "run" / "checkpoint-2").count("optimizer.pdopt") == 1
    # the tiny model's gradients fit one 32 MB bucket, launched from the backward in both steps; the LM head's
    # is reduced after it
    for counts in _reducer_counts(double):
        assert counts == {"buckets": 2, "after_backward": 1, "launched_in_backward": 2, "late_gradients": 0}


# gradient accumulation (only the last micro-batch's backward launches buckets), the LM head in recomputed
# log-prob chunks (4 tokens; a rank has 3 x 6), every decoder and vision block recomputed, and small buckets so
# that there are many to launch while the backward runs
ACCUMULATING = dict(gradient_accumulation_steps=2, logprob_chunk_size=4, gradient_checkpointing=True)


@pytest.fixture(scope="module")
def single_accumulating(tmp_path_factory, tiny_model_dir, rec_jsonl):
    out = tmp_path_factory.mktemp("single_accumulating")
    train_and_dump(_settings(tiny_model_dir, rec_jsonl, out / "run", prompts=2, **ACCUMULATING), str(out))
    return out


@pytest.mark.timeout(600)
def test_gradients_reduced_during_the_backward_train_as_one_process(tmp_path, single_accumulating, tiny_model_dir,
                                                                     rec_jsonl):
    double = _two_ranks(tmp_path, tiny_model_dir, rec_jsonl, bucket_bytes=4096, **ACCUMULATING)
    _assert_same_training(double, single_accumulating, tiny_model_dir)
    for counts in _reducer_counts(double):
        # every bucket but the LM head's was launched from a hook of the last backward, in both steps, and no
        # gradient arrived after its bucket left
        assert counts["buckets"] > 20 and counts["after_backward"] == 1, counts
        assert counts["launched_in_backward"] == 2 * (counts["buckets"] - 1), counts
        assert counts["late_gradients"] == 0, counts


@pytest.mark.timeout(300)
def test_late_and_missing_gradients_are_reduced_like_after_the_backward(tmp_path):
    """The reducer against averaging each finished gradient after the backward, on a small model whose ranks
    differ (``dp_worker.reduce_and_dump``): a layer not declared repeated runs in 3 recomputed chunks on rank 0
    and once on rank 1, a layer has a gradient on rank 0 only, one has none anywhere."""
    spawn_ranks(reduce_and_dump, args=(str(tmp_path),))
    ranks = [json.load(open(tmp_path / f"rank{r}_reducer.json")) for r in (0, 1)]
    for rank, report in enumerate(ranks):
        first, second = report["steps"]
        # step 1: the shared layer's bucket left after its first chunk; its other two chunks (weight and bias
        # each) were kept aside and averaged on their own: equal up to rounding, nothing lost
        assert first["late_gradients"] == (4 if rank == 0 else 0)
        assert first["bitwise_differ"] in ([], ["shared.weight", "shared.bias"]) and first["max_abs_diff"] < 1e-5
        # a gradient on one rank only is averaged with zeros on the other; none anywhere stays none
        for step in (first, second):
            assert step["missing"] == [] and step["none"] == ["unused.weight", "unused.bias"]
        # both ranks then leave the repeated and the gradient-less buckets for after the backward, and step 2
        # is exact, though rank 1 (no vision gradient) launches fewer buckets from its backward than rank 0
        assert first["after_backward"] == second["after_backward"] == sorted(
            f"{layer}.{p}" for layer in ("head", "shared", "unused") for p in ("weight", "bias"))
        assert second["bitwise_differ"] == [] and second["late_gradients"] == first["late_gradients"]
    launched = [r["steps"][1]["launched_in_backward"] - r["steps"][0]["launched_in_backward"] for r in ranks]
    assert launched == [5, 2], launched


def _moments(state: dict) -> dict:
    return {k: np.asarray(v) for k, v in state.items() if k.endswith(("_moment1_0", "_moment2_0"))}


@pytest.mark.timeout(600)
def test_stage1_sharding_splits_the_optimizer_state_and_trains_the_same(stage1, single, tiny_model_dir):
    double = stage1
    _assert_same_training(double, single, tiny_model_dir)

    checkpoint = double / "run" / "checkpoint-2"
    assert not (checkpoint / "optimizer.pdopt").exists()
    shards = [_moments(paddle.load(str(checkpoint / f"optimizer.shard{r}.pdopt"))) for r in (0, 1)]
    full = _moments(paddle.load(str(single / "run" / "checkpoint-2" / "optimizer.pdopt")))
    # each rank holds the moments of its own weights only: disjoint shares that together are the whole state
    assert shards[0] and shards[1] and not set(shards[0]) & set(shards[1])
    assert set(shards[0]) | set(shards[1]) == set(full)
    sizes = [sum(v.size for v in shard.values()) for shard in shards]
    assert max(sizes) < 0.75 * sum(sizes), sizes  # split roughly evenly, not all on one rank
    # the merged shards are the single process's state (read back as a resume on any number of ranks reads it)
    from paddle_r1.checkpoints.training_state import read_optimizer_state

    merged = _moments(read_optimizer_state(str(checkpoint)))
    for key, value in full.items():
        np.testing.assert_allclose(merged[key], value, rtol=1e-3, atol=1e-7, err_msg=key)


# ---- resume: every saved layout in every layout, on 1 and 2 ranks ------------------------------------------------
# (layout name, ranks, settings); on one rank stage 1 has nothing to shard and saves one optimizer.pdopt, as "1 rank"
LAYOUTS = {"1 rank": (1, {}), "2 ranks": (2, {}), "2 ranks stage1": (2, {"sharding": "stage1"})}
# steps 1 -> 2 only: no held-out evaluation (it runs after step 2 and changes no weight)
RESUME = dict(eval_steps=0)


@pytest.fixture(scope="module")
def saved(single, replicated, stage1):
    """Each layout's run folder; its checkpoint-1 is the save every resume starts from."""
    return {"1 rank": single, "2 ranks": replicated, "2 ranks stage1": stage1}


def _resume_settings(tiny_model_dir, rec_jsonl, out, checkpoint, layout, **extra):
    ranks, settings = LAYOUTS[layout]
    return _settings(tiny_model_dir, rec_jsonl, out / "run", prompts=2 // ranks, resume_from_checkpoint=str(checkpoint),
                     **RESUME, **settings, **extra)


@pytest.fixture(scope="module")
def mid_iteration(tmp_path_factory, tiny_model_dir, rec_jsonl):
    """A one-rank checkpoint saved mid-way through num_iterations 2: it holds rank 0's rollout buffer."""
    out = tmp_path_factory.mktemp("mid_iteration")
    train_and_dump(_settings(tiny_model_dir, rec_jsonl, out / "run", prompts=2, num_iterations=2, max_steps=1,
                             **RESUME), str(out))
    checkpoint = out / "run" / "checkpoint-1"
    assert (checkpoint / "extra_state_rank0.pdparams").is_file()
    return checkpoint


@pytest.fixture(scope="module")
def resumed_on_two_ranks(tmp_path_factory, saved, mid_iteration, tiny_model_dir, rec_jsonl):
    """One spawn: each saved layout's checkpoint-1 resumed on 2 ranks, replicated and stage 1; then the
    mid-iteration checkpoint resumed on 2 ranks (refused)."""
    out = tmp_path_factory.mktemp("resumed_on_two_ranks")
    jobs = [(_resume_settings(tiny_model_dir, rec_jsonl, out / f"{old} to {new}", saved[old] / "run" / "checkpoint-1",
                              new), str(out / f"{old} to {new}"))
            for old in LAYOUTS for new in LAYOUTS if LAYOUTS[new][0] == 2]
    jobs.append((_resume_settings(tiny_model_dir, rec_jsonl, out / "mid_iteration", mid_iteration, "2 ranks",
                                  num_iterations=2), str(out / "mid_iteration")))
    spawn_ranks(train_each_and_dump, args=(jobs,))
    return out


def _assert_resumed_as_uninterrupted(resumed, single, ranks):
    one = np.load(single / "rank0.npz")
    for rank in range(ranks):
        after = np.load(resumed / f"rank{rank}.npz")
        for key in one.files:  # step 2 from checkpoint-1 == the uninterrupted run's step 2
            np.testing.assert_allclose(after[key], one[key], rtol=1e-4, atol=5e-5, err_msg=f"rank {rank}: {key}")
    # step 2's reward, logged for the whole global batch: the same completions as the uninterrupted run's
    np.testing.assert_allclose(np.load(resumed / "rank0_rewards.npy"), np.load(single / "rank0_rewards.npy")[1:],
                               rtol=1e-5)


@pytest.mark.timeout(600)
def test_stage1_undoes_a_non_finite_update_on_every_rank(tmp_path, tiny_model_dir, rec_jsonl):
    """Each rank updates only its share of the weights and broadcasts it: the verdict on the new weights is agreed
    over ranks, each owner puts back its weights and AdamW state, and the restored weights are broadcast again
    (learning_rate 1e39: finite loss and gradient norm, an infinite update)."""
    double = _two_ranks(tmp_path, tiny_model_dir, rec_jsonl, sharding="stage1", learning_rate=1e39, eval_steps=0,
                        max_skipped_steps=5)
    from paddle_r1.models.loading import load_model

    initial = {k: v.numpy() for k, v in load_model(tiny_model_dir).state_dict().items()}
    for rank in (0, 1):
        assert np.isfinite(np.load(double / f"rank{rank}_grad_norms.npy")).all()
        np.testing.assert_array_equal(np.load(double / f"rank{rank}_skipped.npy"), [1, 2])
        weights = np.load(double / f"rank{rank}.npz")
        for key, value in initial.items():
            np.testing.assert_array_equal(weights[key], value, err_msg=f"rank {rank}: {key}")
    # each rank's share of the AdamW state is as before any step: zero moments, beta powers not yet multiplied
    checkpoint = double / "run" / "checkpoint-2"
    for rank in (0, 1):
        state = paddle.load(str(checkpoint / f"optimizer.shard{rank}.pdopt"))
        assert _moments(state) and all(not np.asarray(v).any() for v in _moments(state).values())
        powers = [float(np.asarray(v)) for k, v in state.items() if k.endswith("_beta1_pow_acc_0")]
        assert powers and set(powers) == {float(np.float32(0.9))}, rank  # adam_beta1, in float32


@pytest.mark.timeout(600)
@pytest.mark.parametrize("new", [layout for layout, (ranks, _) in LAYOUTS.items() if ranks == 2])
@pytest.mark.parametrize("old", list(LAYOUTS))
def test_every_saved_layout_resumes_on_two_ranks_as_the_uninterrupted_run(resumed_on_two_ranks, single, old, new):
    """Includes the reported crash: stage 1 saved on 2 ranks, resumed on 2 ranks without sharding (each rank read
    its own shard, and the replicated optimizer missed the other half of the state)."""
    _assert_resumed_as_uninterrupted(resumed_on_two_ranks / f"{old} to {new}", single, ranks=2)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("old", list(LAYOUTS))
def test_every_saved_layout_resumes_on_one_rank_as_the_uninterrupted_run(tmp_path, saved, single, old, tiny_model_dir,
                                                                        rec_jsonl, capsys):
    train_and_dump(_resume_settings(tiny_model_dir, rec_jsonl, tmp_path, saved[old] / "run" / "checkpoint-1",
                                    "1 rank"), str(tmp_path))
    _assert_resumed_as_uninterrupted(tmp_path, single, ranks=1)
    note = capsys.readouterr().out
    if LAYOUTS[old][0] == 2:  # said once, with what changed and that the run goes on as before
        assert note.count("with another batch layout") == 1, note
        assert "ranks 2 -> 1, per_device_train_batch_size 3 -> 6, gradient_accumulation_steps 1; global batch 2" \
               in note and "the same prompts and completions as an uninterrupted run" in note, note
    else:
        assert "with another batch layout" not in note, note


def test_a_mid_iteration_checkpoint_is_refused_on_another_rank_count(resumed_on_two_ranks, mid_iteration):
    for rank in (0, 1):
        error = (resumed_on_two_ranks / "mid_iteration" / f"rank{rank}_error.txt").read_text()
        assert error.startswith(f"config key 'resume_from_checkpoint': {mid_iteration} was saved mid-way through "
                                "num_iterations (its rollout buffers extra_state_rank0.pdparams are per rank"), error
        assert "1 rank(s) x 6 completion(s) x 1 micro-step(s)); this run has 2 x 3 x 1" in error, error
    assert not list((resumed_on_two_ranks / "mid_iteration").glob("rank*.npz"))  # refused before training


def test_another_global_batch_says_how_it_goes_on_and_takes_the_prompts_left(tmp_path, single, tiny_model_dir,
                                                                             rec_jsonl, capsys):
    """Saved after 1 step of 2 prompts; resumed with 1 prompt per step for half an epoch of the 12 prompts: the 4
    prompts left take 4 more steps, and the sampler ends exactly at prompt 6."""
    from paddle_r1.config.jobs import GRPOConfig
    from paddle_r1.trainer.grpo import GRPOTrainer

    trainer = GRPOTrainer(GRPOConfig(**_resume_settings(
        tiny_model_dir, rec_jsonl, tmp_path, single / "run" / "checkpoint-1", "1 rank", per_device_train_batch_size=3,
        max_steps=-1, num_train_epochs=0.5, save_steps=0)))
    note = capsys.readouterr().out
    assert note.count("with another batch layout") == 1, note
    for said in ("ranks 1, per_device_train_batch_size 6 -> 3, gradient_accumulation_steps 1; "
                 "global batch 2 -> 1 prompts per optimizer step",
                 "the next batch starts at epoch 0, index 2 of its 12-prompt seeded order",
                 "the completions (and the weights) will not match an uninterrupted run's",
                 "the prompts left take 4 more steps (the run and its learning-rate schedule end at step 5)"):
        assert said in note, note
    history = trainer.train()["history"]
    assert len(history) == 4 and trainer.step == 5
    assert trainer.sampler.state_dict() == {"epoch": 0, "index": 6}


# ---- a group across ranks: the peers' commands whose devices hold part of a group ---------------------------------
def _command(base: list, **changes) -> list:
    """``base`` (a command line's ``--key value`` arguments) with the values of ``changes`` put in place (a bare
    flag's value: True), or appended when the key is not there."""
    args, changes = list(base), {k: str(v) for k, v in changes.items()}
    for i, arg in enumerate(args):
        key = arg[2:] if arg.startswith("--") else None
        if key in changes:
            args[i + 1] = changes.pop(key)
    return args + [item for key, value in changes.items() for item in (f"--{key}", value)]


# what every run below changes, for a tiny model on a 2-core CPU: few steps of short completions, a reward its random
# text differs in (the shipped ones score it 0, and advantages of 0 would compare nothing), a learning rate that moves
# the weights; VisualDL off
ON_THIS_MACHINE = dict(max_steps=2, max_completion_length=6, reward_funcs="reward_helpers:short_reward",
                       learning_rate=5e-3, use_visualdl="false", device="cpu", log_completions_steps=1)


def paddlemix_rec_command(model, mixture, out, per_device=2, sharding="stage1") -> list:
    """PaddleMIX r1_mllm's scripts/run_grpo_rec.sh as it calls grpo_rec.py (test_source_keys.paddlemix_rec_args): 2
    completions per device, on 2 ranks here, so a group of 4 (it has 8 on 8 GPUs: 4 ranks a group) spans both;
    sharding stage1 for its stage2 (GPU/XPU only), bf16 off (Paddle's CPU kernels have no bfloat16 conv3d); and
    top_entropy_quantile 0.5, whose quantile needs the other rank's tokens."""
    base = paddlemix_rec_args(model, mixture, out, num_generations=4)
    return _command(base, per_device_train_batch_size=per_device, sharding=sharding, bf16="False",
                    top_entropy_quantile=0.5, **ON_THIS_MACHINE)


def vlm_r1_rec_command(model, mixture, out, per_device=1, **changes) -> list:
    """VLM-R1's src/open-r1-multimodal/run_scripts/run_grpo_rec.sh for 2 GPUs (om-ai-lab/VLM-R1 7029f70: torchrun
    --nproc_per_node 2 src/open_r1/grpo_rec.py): 1 completion per device, a group of 2 over both ranks, 4
    accumulation steps; without --bf16 --torch_dtype bfloat16 (CPU) and --report_to wandb (read in
    test_source_keys)."""
    base = ["--deepspeed", "local_scripts/zero2.json", "--output_dir", out, "--model_name_or_path", model,
            "--dataset_name", mixture, "--image_root", os.path.dirname(mixture), "--max_prompt_length", "1024",
            "--num_generations", "2", "--per_device_train_batch_size", "1", "--gradient_accumulation_steps", "4",
            "--logging_steps", "1", "--data_seed", "42", "--gradient_checkpointing", "false",
            "--attn_implementation", "flash_attention_2", "--num_train_epochs", "2", "--run_name", "rec",
            "--save_steps", "100", "--beta", "0.0", "--epsilon_high", "0.28"]
    return _command(base, per_device_train_batch_size=per_device, **{**ON_THIS_MACHINE, **changes})


@pytest.fixture(scope="module")
def rec_mixture(rec_jsonl):
    """PaddleMIX's and VLM-R1's data_config/rec.yaml shape (datasets with json_path), beside the images (their
    --image_root)."""
    path = os.path.join(os.path.dirname(rec_jsonl), "rec.yaml")
    with open(path, "w") as f:
        f.write(f"datasets:\n  - json_path: {rec_jsonl}\n")
    return path


@pytest.fixture(scope="module")
def tied_mixture(rec_jsonl):
    """The REC samples, every other one marked ``tied`` (``reward_helpers.short_reward_unless_tied`` gives its
    group one reward: dynamic sampling drops it)."""
    folder = os.path.dirname(rec_jsonl)
    with open(rec_jsonl) as f, open(os.path.join(folder, "tied.jsonl"), "w") as out:
        for i, line in enumerate(f):
            out.write(json.dumps({**json.loads(line), "tied": i % 2 == 0}) + "\n")
    path = os.path.join(folder, "tied.yaml")
    with open(path, "w") as f:
        f.write(f"datasets:\n  - json_path: {os.path.join(folder, 'tied.jsonl')}\n")
    return path


# dynamic sampling, tied groups dropped and refilled (at most 3 prompt batches per micro-step)
DYNAMIC = dict(dynamic_sampling="true", max_num_gen_batches=3, reward_funcs="reward_helpers:short_reward_unless_tied")
# a target above the tiny model's entropy: the coefficient rises each step, and the bonus is in the second step's loss
ENTROPY_CONTROL = dict(use_adaptive_entropy="true", entropy_coef=0.1, entropy_coef_delta=0.05, entropy_target=100.0)


@pytest.fixture(scope="module")
def across_ranks(tmp_path_factory, tiny_model_dir, rec_mixture, tied_mixture):
    """One spawn of 2 ranks: PaddleMIX's command, VLM-R1's (saving at step 1), VLM-R1's resumed from that
    checkpoint-1, VLM-R1's with a group of 8 and 2 accumulation steps refused (a generation batch of 2 ranks x 1 x 2
    completions), VLM-R1's with dynamic sampling (a group across ranks), with dynamic sampling and whole groups (a rank
    may be full while the other draws on) and with adaptive entropy control; then the one-process runs over the same
    global batch."""
    out = tmp_path_factory.mktemp("across_ranks")
    model, mixture = tiny_model_dir, rec_mixture
    vlm_r1 = vlm_r1_rec_command(model, mixture, str(out / "vlm_r1"), save_steps=1)
    commands = [paddlemix_rec_command(model, mixture, str(out / "paddlemix")), vlm_r1,
                _command(vlm_r1, output_dir=out / "vlm_r1_resumed",
                         resume_from_checkpoint=out / "vlm_r1" / "checkpoint-1"),
                vlm_r1_rec_command(model, mixture, str(out / "refused"), num_generations=8,
                                   gradient_accumulation_steps=2),
                vlm_r1_rec_command(model, tied_mixture, str(out / "dynamic"), gradient_accumulation_steps=2, **DYNAMIC),
                vlm_r1_rec_command(model, tied_mixture, str(out / "dynamic_whole_groups"), per_device=2,
                                   gradient_accumulation_steps=1, **DYNAMIC),
                vlm_r1_rec_command(model, mixture, str(out / "entropy_control"), save_steps=2, **ENTROPY_CONTROL)]
    spawn_ranks(train_commands, args=(commands, str(out)))
    from paddle_r1.cli import main

    assert main(["train", *paddlemix_rec_command(model, mixture, str(out / "paddlemix_one"), per_device=4,
                                                 sharding="")]) == 0
    assert main(["train", *vlm_r1_rec_command(model, mixture, str(out / "vlm_r1_one"), per_device=2)]) == 0
    assert main(["train", *vlm_r1_rec_command(model, tied_mixture, str(out / "dynamic_one"), per_device=2,
                                              gradient_accumulation_steps=2, **DYNAMIC)]) == 0
    assert main(["train", *vlm_r1_rec_command(model, mixture, str(out / "entropy_control_one"), per_device=2,
                                              save_steps=2, **ENTROPY_CONTROL)]) == 0
    return out


def _rows(path) -> list[dict]:
    return [json.loads(line) for line in open(path)]


def _weights_in(folder) -> dict:
    """The weights of a model folder as its safetensors files hold them."""
    from safetensors.numpy import load_file

    return {name: value for path in sorted(glob.glob(os.path.join(folder, "*.safetensors")))
            for name, value in load_file(path).items()}


def _final_weights(run) -> dict:
    return _weights_in(run / "checkpoint-2")


# the numbers of the whole global batch (TRL's), which a rank's own completions alone would get wrong (and each
# reward's rewards/<name>/mean and /std)
GLOBAL_METRICS = ("loss", "reward", "reward_std", "frac_reward_zero_std", "kl", "entropy", "clip_ratio/region_mean",
                  "completion_length", "grad_norm")


def _global_metrics(rows: list[dict]) -> list[str]:
    return [*GLOBAL_METRICS, *sorted(k for k in rows[0] if k.startswith("rewards/"))]


def _assert_one_rank_and_two_agree(two, one, tiny_model_dir):
    """Completions (sorted: the 2-rank file holds rank 0's rows, then rank 1's), their rewards and advantages, every
    logged number of the global batch, and the trained weights."""
    def key(row):
        return row["step"], row["problem"], row["completion"]

    rows_two, rows_one = sorted(_rows(two / "completions.jsonl"), key=key), sorted(_rows(one / "completions.jsonl"),
                                                                                    key=key)
    assert [key(r) for r in rows_two] == [key(r) for r in rows_one]
    np.testing.assert_allclose([r["reward"] for r in rows_two], [r["reward"] for r in rows_one], rtol=1e-6)
    advantages = np.array([r["advantage"] for r in rows_two])
    assert np.abs(advantages).max() > 0.5  # the groups' rewards differ: the advantages are not all 0
    np.testing.assert_allclose(advantages, [r["advantage"] for r in rows_one], rtol=1e-5, atol=1e-6)
    metrics_two, metrics_one = _rows(two / "metrics.jsonl"), _rows(one / "metrics.jsonl")
    assert [m["step"] for m in metrics_two] == [m["step"] for m in metrics_one] == [1, 2]
    for name in _global_metrics(metrics_one):
        np.testing.assert_allclose([m[name] for m in metrics_two], [m[name] for m in metrics_one], rtol=1e-4,
                                   atol=1e-7, err_msg=name)
    initial, weights_two, weights_one = _weights_in(tiny_model_dir), _final_weights(two), _final_weights(one)
    assert set(initial) == set(weights_one)
    assert max(float(np.abs(weights_one[k] - initial[k]).max()) for k in weights_one) > 5e-3
    # summation order differs (the gradient all-reduce, padding); Adam's m / sqrt(v) turns it into up to ~1e-4 for an
    # embedding row whose gradient is near 0 (1% of the 2 x 5e-3 step; one element of 32,448 seen)
    for name, value in weights_one.items():
        np.testing.assert_allclose(weights_two[name], value, rtol=1e-4, atol=1e-4, err_msg=name)


@pytest.mark.timeout(600)
def test_paddlemix_rec_command_with_a_group_across_ranks_equals_one_rank(across_ranks, tiny_model_dir):
    """2 completions per device and a group of 4: both ranks hold half of each group; the rewards are gathered, the
    advantages computed on the whole group and each rank keeps its own (TRL's way), the entropy quantile is taken
    over both ranks' tokens; stage 1 sharding. Against one process holding the whole group."""
    assert [json.load(open(across_ranks / f"rank{r}_codes.json"))[0] for r in (0, 1)] == [0, 0]
    _assert_one_rank_and_two_agree(across_ranks / "paddlemix", across_ranks / "paddlemix_one", tiny_model_dir)


@pytest.mark.timeout(600)
def test_vlm_r1_rec_command_with_a_completion_per_device_equals_one_rank(across_ranks, tiny_model_dir):
    assert [json.load(open(across_ranks / f"rank{r}_codes.json"))[1] for r in (0, 1)] == [0, 0]
    _assert_one_rank_and_two_agree(across_ranks / "vlm_r1", across_ranks / "vlm_r1_one", tiny_model_dir)


@pytest.mark.timeout(600)
def test_a_group_across_ranks_resumes_in_the_middle_as_the_uninterrupted_run(across_ranks):
    """VLM-R1's command resumed from its checkpoint-1 on 2 ranks: step 2 (4 micro-steps of a group over both
    ranks) equals the uninterrupted run's: weights, completions, advantages and logged numbers."""
    resumed, uninterrupted = across_ranks / "vlm_r1_resumed", across_ranks / "vlm_r1"
    assert [json.load(open(across_ranks / f"rank{r}_codes.json"))[2] for r in (0, 1)] == [0, 0]
    step2 = [r for r in _rows(uninterrupted / "completions.jsonl") if r["step"] == 2]
    assert _rows(resumed / "completions.jsonl") == step2
    after, before = _rows(resumed / "metrics.jsonl"), _rows(uninterrupted / "metrics.jsonl")[1:]
    for name in _global_metrics(before):
        np.testing.assert_allclose([m[name] for m in after], [m[name] for m in before], rtol=1e-6, err_msg=name)
    weights = _final_weights(uninterrupted)
    for name, value in _final_weights(resumed).items():
        np.testing.assert_allclose(value, weights[name], rtol=1e-6, atol=1e-7, err_msg=name)


def test_a_group_the_ranks_cannot_hold_is_refused_before_loading(across_ranks):
    """VLM-R1's command with a group of 8 and 2 accumulation steps on 2 ranks: its generation batch of 2 ranks x 1
    completion x 2 micro-steps holds half a group (TRL refuses it too): exit code 2, nothing written."""
    assert [json.load(open(across_ranks / f"rank{r}_codes.json"))[3] for r in (0, 1)] == [2, 2]
    assert not (across_ranks / "refused").exists() or not list((across_ranks / "refused").glob("checkpoint-*"))


@pytest.mark.timeout(600)
def test_dynamic_sampling_decides_on_the_whole_group_across_ranks(across_ranks, tiny_model_dir):
    """VLM-R1's command with dynamic sampling: each group lies on both ranks, which keep or drop it alike (decided
    on the gathered rewards) and refill together: the run equals one process's. Then with a whole group per rank,
    where a rank whose group was kept draws the refill batches without generating while the other generates: both
    ranks end, and every step trains on a full batch."""
    assert [json.load(open(across_ranks / f"rank{r}_codes.json"))[4:6] for r in (0, 1)] == [[0, 0], [0, 0]]
    _assert_one_rank_and_two_agree(across_ranks / "dynamic", across_ranks / "dynamic_one", tiny_model_dir)
    assert any(m["frac_reward_zero_std"] > 0 for m in _rows(across_ranks / "dynamic" / "metrics.jsonl"))
    metrics = _rows(across_ranks / "dynamic_whole_groups" / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2] and max(m["num_gen_batches"] for m in metrics) > 1
    rows = _rows(across_ranks / "dynamic_whole_groups" / "completions.jsonl")
    assert [sum(r["step"] == step for r in rows) for step in (1, 2)] == [4, 4]  # 2 ranks x a group of 2


@pytest.mark.timeout(600)
def test_adaptive_entropy_moves_on_the_entropy_of_both_ranks(across_ranks, tiny_model_dir):
    """VLM-R1's command with adaptive entropy control, a group over both ranks: the step's entropy the control
    measures is summed over both ranks' tokens, so its last entropy, the coefficient, the second step's loss (with
    the bonus) and the weights equal one process's over the same global batch."""
    assert [json.load(open(across_ranks / f"rank{r}_codes.json"))[6] for r in (0, 1)] == [0, 0]
    two, one = across_ranks / "entropy_control", across_ranks / "entropy_control_one"
    _assert_one_rank_and_two_agree(two, one, tiny_model_dir)
    assert [m["entropy_coef"] for m in _rows(two / "metrics.jsonl")] == pytest.approx([0.15, 0.2])
    states = [json.load(open(run / "checkpoint-2" / "trainer_state.json"))["adaptive_entropy"] for run in (two, one)]
    assert 0 < states[0]["last_world_entropy"] == pytest.approx(states[1]["last_world_entropy"], rel=1e-6)


def test_ranks_that_read_different_rows_stop_before_the_model_loads(tmp_path, tiny_model_dir):
    """Rank 1 reads its images from a copy that lacks one (a node whose copy of the dataset is incomplete), so it
    skips that row where rank 0 keeps it: every rank stops with one ``DataError`` naming the row, before any model
    loads and without waiting for another (they used to train, the sampler's shared indices splitting one prompt's
    group across two different prompts). The held-out set likewise (each rank scores its slice of it)."""
    import shutil

    from paddle_r1.synthetic import make_synthetic_rec

    data = make_synthetic_rec(str(tmp_path / "full"), num_samples=6, seed=3)
    shutil.copytree(tmp_path / "full" / "images", tmp_path / "partial" / "images")
    shutil.copy(data, tmp_path / "partial")
    lost = json.loads(open(data).read().splitlines()[2])["image"]
    os.remove(tmp_path / "partial" / lost)
    training = _settings(tiny_model_dir, data, tmp_path / "run", prompts=1, eval_steps=0, eval_data_path=None,
                         image_root_of_rank=[str(tmp_path / "full"), str(tmp_path / "partial")])
    other = make_synthetic_rec(str(tmp_path / "other"), num_samples=6, seed=4)
    heldout = _settings(tiny_model_dir, other, tmp_path / "run_heldout", prompts=1, eval_sample_num=None,
                        eval_data_path_of_rank=[data, str(tmp_path / "partial" / "rec.jsonl")])
    spawn_ranks(train_each_and_dump, args=([(training, str(tmp_path / "out")), (heldout, str(tmp_path / "eval"))],))
    errors = [open(tmp_path / "out" / f"rank{rank}_error.txt").read() for rank in (0, 1)]
    assert errors[0] == errors[1]
    assert errors[0].startswith("the ranks read different samples from the same config") and \
        errors[0].endswith(f"rank 1: 5 samples against rank 0's 6; lacks {data}:3, which rank 0 kept"), errors[0]
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())
    errors = [open(tmp_path / "eval" / f"rank{rank}_error.txt").read() for rank in (0, 1)]
    assert errors[0] == errors[1]
    assert errors[0].startswith("the ranks read different held-out samples (eval_data_path) from the same config") \
        and "rank 1: 5 samples against rank 0's 6" in errors[0], errors[0]
