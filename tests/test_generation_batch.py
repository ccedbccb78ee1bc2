"""TRL 1.16's generation batch (``steps_per_generation``, ``generation_batch_size``): the settings TRL refuses are
refused, the others resolve alike and are trained on in TRL's schedule (against ``fixtures/
trl_generation_batch_reference.json``, made by TRL's own config, sampler, dataloader sharding and ``_prepare_inputs``);
real runs whose groups span micro-steps and ranks compute each advantage over the whole group, and resume in the
middle of a generation batch as the uninterrupted run.

What the schedule test compares, and why: TRL's sampler permutes the prompts with torch's generator, paddle_r1's with
numpy's, so prompts are named by their place in the run's prompt order. TRL then shuffles each rank's share of a
generation batch with the process's torch generator before cutting it into micro-batches (``shuffle_sequence_dict``),
a draw paddle_r1 does not make (docs/reference.md says why). So compared exactly: which settings are refused, the
resolved steps_per_generation and generation_batch_size, the micro-steps that generate, which generation batch and
which of its micro-batches each micro-step trains on (TRL's cycle, num_iterations passes), and per generation batch
the prompts over all ranks, each with its whole group (num_generations completions, all in that batch). Per rank and
micro-step the prompts are the same when a generation batch is one micro-step; otherwise TRL's are a random cut of
the rank's share.
"""
import collections
import json
import os
import shutil

import numpy as np
import pytest

from dp_worker import train_each_and_dump
from forked_ranks import spawn_ranks
from paddle_r1.checkpoints.resume import BatchLayout, steps_to_finish_epochs
from paddle_r1.config.jobs import GRPOConfig
from paddle_r1.errors import ConfigError
from paddle_r1.trainer.grpo import GRPOTrainer
from paddle_r1.trainer.sampler import PromptSampler, generation_slot, rank_share

GOLDEN = os.path.join(os.path.dirname(__file__), "fixtures", "trl_generation_batch_reference.json")
with open(GOLDEN) as _f:
    CASES = json.load(_f)["cases"]
# what TRL's refusal says, and the keys paddle_r1's must name for it
TRL_BLAMES = {"must be divisible by num_generations": {"num_generations"},
              "must be divisible by the global batch size": {"generation_batch_size", "per_device_train_batch_size"},
              "can not be both configured": {"steps_per_generation", "generation_batch_size"}}


def _config(case) -> GRPOConfig:
    spelling = {key: case[key] for key in ("steps_per_generation", "generation_batch_size") if case[key] is not None}
    config = GRPOConfig(per_device_train_batch_size=case["per_device_train_batch_size"],
                        num_generations=case["num_generations"],
                        gradient_accumulation_steps=case["gradient_accumulation_steps"],
                        num_iterations=case["num_iterations"], **spelling)
    config.check_ranks(case["ranks"])
    return config


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_what_trl_refuses_is_refused_and_the_rest_resolves_alike(case):
    if case["refused"] is not None:
        with pytest.raises(ConfigError) as refused:
            _config(case)
        blamed = next(keys for said, keys in TRL_BLAMES.items() if said in case["refused"])
        assert blamed <= set(refused.value.keys), (case["refused"], str(refused.value))
        return
    config, ranks = _config(case), case["ranks"]
    steps = config.steps_per_generation_for(ranks)
    assert {"steps_per_generation": steps, "generation_batch_size": ranks * config.completions_per_device * steps} \
        == case["resolved"]


def _paddle_schedule(case):
    """The micro-steps that generate, and per rank and micro-step the places in the prompt order of the completions
    it trains on, as the trainer makes them (``generation_slot``, ``PromptSampler``, ``rank_share``); also checks
    that each generation batch holds every generation of each of its prompts once."""
    config = _config(case)
    layout = BatchLayout.of(config, case["ranks"])
    sampler = PromptSampler(case["num_samples"], layout.block_prompts, seed=0)
    generated, seen, buffer = [], [[] for _ in range(case["ranks"])], None
    for micro_step in range(len(case["per_rank"][0]["micro_steps"])):
        generates, slot = generation_slot(micro_step, layout.steps_per_generation, config.num_iterations)
        if generates:
            generated.append(micro_step)
            buffer, completions = [[] for _ in range(case["ranks"])], collections.Counter()
            for _ in range(layout.blocks):
                first = sampler.index  # the place in the prompt order of the draw's first prompt
                sampler.next_batch()
                for block_step in range(layout.block_steps):
                    for rank in range(case["ranks"]):
                        share = rank_share(layout, rank, block_step)
                        buffer[rank].append([first + place for place, gens in share for _ in gens])
                        completions.update((first + place, g) for place, gens in share for g in gens)
            prompts = {place for place, _ in completions}
            assert completions == collections.Counter((p, g) for p in prompts for g in range(config.num_generations))
        for rank in range(case["ranks"]):
            seen[rank].append(buffer[rank][slot])
    return generated, seen, layout.steps_per_generation


ACCEPTED = [case for case in CASES if case["refused"] is None]


@pytest.mark.parametrize("case", ACCEPTED, ids=[case["name"] for case in ACCEPTED])
def test_the_schedule_is_trls(case):
    place = {index: position for position, index in enumerate(case["order"])}
    trl = [[[place[i] for i in rows] for rows in rank["micro_steps"]] for rank in case["per_rank"]]
    generated, paddle, steps = _paddle_schedule(case)
    assert all(rank["generated_at"] == generated for rank in case["per_rank"])
    starts = generated + [len(trl[0])]
    for start, end in zip(starts, starts[1:]):
        # a generation batch: the same prompts over all ranks, each with its whole group
        first_pass = range(start, start + steps)
        assert sorted(p for rank in trl for t in first_pass for p in rank[t]) == \
            sorted(p for rank in paddle for t in first_pass for p in rank[t])
        for t in range(start, end):  # micro-step t trains on micro-batch (t - start) mod steps_per_generation
            _, slot = generation_slot(t, steps, case["num_iterations"])
            assert slot == (t - start) % steps
            assert all(rank[t] == rank[start + slot] for rank in trl)
            if steps == 1:  # the generation batch is the micro-step: each rank's prompts are TRL's
                assert [sorted(rank[t]) for rank in trl] == [sorted(rank[t]) for rank in paddle]


def test_epochs_count_generation_batches():
    """num_train_epochs: the generation batches of the epochs' prompts, each trained on for steps_per_generation x
    num_iterations micro-steps, gradient_accumulation_steps to an optimizer step."""
    default = BatchLayout(ranks=1, per_device_batch=4, group=2, accumulation=2, steps_per_generation=2)
    assert steps_to_finish_epochs(1, 12, default, passes=2) == 6  # 12 prompts, 4 a step, 2 passes: as before
    over_steps = BatchLayout(ranks=1, per_device_batch=3, group=2, accumulation=1, steps_per_generation=2)
    assert (over_steps.block_steps, over_steps.block_prompts, over_steps.generation_prompts) == (2, 3, 3)
    assert steps_to_finish_epochs(1, 12, over_steps, passes=1) == 8
    across_steps = BatchLayout(ranks=1, per_device_batch=2, group=2, accumulation=2, steps_per_generation=3)
    assert (across_steps.block_steps, across_steps.blocks, across_steps.global_batch) == (1, 3, 2)
    assert steps_to_finish_epochs(1, 12, across_steps, passes=1) == 6  # 4 generation batches of 3 micro-steps


# ---- bad settings ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("keys, ranks, said", [
    (dict(steps_per_generation=2, generation_batch_size=8), 1,
     "config keys 'steps_per_generation' and 'generation_batch_size': both are set (2 and 8); they are two spellings "
     "of one thing, generation_batch_size = ranks x per_device_train_batch_size x steps_per_generation: set one"),
    (dict(generation_batch_size=9), 1,
     "config keys 'generation_batch_size' and 'num_generations': a generation batch holds whole groups, and 9 "
     "completions are not a multiple of num_generations 2"),
    (dict(per_device_train_batch_size=4, generation_batch_size=6), 1,
     "config keys 'generation_batch_size' and 'per_device_train_batch_size': a generation batch is split into "
     "micro-batches of per_device_train_batch_size 4 on every rank, and 6 completions are not a multiple of it"),
    (dict(per_device_train_batch_size=4, generation_batch_size=8), 4,
     "config keys 'generation_batch_size' and 'per_device_train_batch_size': generation_batch_size 8 must be a "
     "multiple of ranks x per_device_train_batch_size = 4 x 4 = 16, the completions of one micro-step"),
    (dict(per_device_train_batch_size=3), 1,
     "config keys 'per_device_train_batch_size', 'num_generations' and 'gradient_accumulation_steps': a generation "
     "batch of ranks x per_device_train_batch_size x steps_per_generation (unset: gradient_accumulation_steps) = 1 x "
     "3 x 1 = 3 completions does not hold whole groups of num_generations 2 (TRL refuses it too); on 1 rank(s) of 3, "
     "steps_per_generation 2 or a multiple of it does"),
    (dict(per_device_train_batch_size=3, steps_per_generation=3), 1,
     "config keys 'per_device_train_batch_size', 'num_generations' and 'steps_per_generation': "),
    (dict(per_device_train_batch_size=3, steps_per_generation=2, dynamic_sampling=True), 2,
     "config keys 'dynamic_sampling' and 'per_device_train_batch_size': dynamic sampling refills each rank's share of "
     "the generation batch with the groups it keeps, which needs every group to lie alike on the ranks holding it: "
     "per_device_train_batch_size 3 must hold whole groups (a multiple of num_generations 2) or an equal part of one "
     "(a divisor of it, with ranks x per_device_train_batch_size, 6, a multiple or a divisor of 2), or the job run "
     "on one rank"),
    (dict(per_device_train_batch_size=2, num_generations=6, steps_per_generation=3, dynamic_sampling=True), 2, "config "
     "keys 'dynamic_sampling' and 'per_device_train_batch_size': "),
])
def test_bad_settings_are_refused_naming_the_keys(keys, ranks, said):
    with pytest.raises(ConfigError) as refused:
        GRPOConfig(**{"num_generations": 2, **keys}).check_ranks(ranks)
    assert str(refused.value).startswith(said), str(refused.value)
    assert set(refused.value.keys) <= set(keys) | {"num_generations", "per_device_train_batch_size",
                                                   "gradient_accumulation_steps"}


def test_dynamic_sampling_takes_the_layouts_every_rank_fills_alike():
    # one rank (groups cut between micro-steps); whole groups per rank; a group over two ranks; over four
    for per_device, ranks, steps in ((3, 1, 4), (4, 2, 1), (2, 2, 1), (1, 2, 2)):
        GRPOConfig(num_generations=4, per_device_train_batch_size=per_device, steps_per_generation=steps,
                   dynamic_sampling=True).check_ranks(ranks)


# ---- real runs ------------------------------------------------------------------------------------------------
def _settings(model_dir, out, **kw):
    return {**dict(model_name_or_path=model_dir, output_dir=str(out), num_generations=2,
                   reward_funcs=["reward_helpers:short_reward", "iou"], max_completion_length=6, learning_rate=5e-3,
                   max_steps=1, save_steps=100, use_visualdl=False, disable_tqdm=True, seed=11, beta=0.0,
                   temperature=1.5), **kw}


def _trainer(model_dir, out, samples, **kw) -> GRPOTrainer:
    return GRPOTrainer(GRPOConfig(**_settings(model_dir, out, **kw)), samples=samples)


def _weights(trainer) -> dict:
    return {k: v.numpy().copy() for k, v in trainer.policy.state_dict().items()}


def _group_advantages(batches) -> tuple[dict, set]:
    """Per group, over every micro-batch (and rank) given: its rewards and advantages in generation order; and the
    groups whose completions lie in more than one micro-batch."""
    groups, homes = collections.defaultdict(dict), collections.defaultdict(set)
    for home, batch in batches:
        for row in batch:
            key = tuple(row["key"])
            groups[key][row["generation"]] = (row["reward"], row["advantage"])
            homes[key].add(home)
    return ({key: np.array([rows[g] for g in sorted(rows)]) for key, rows in groups.items()},
            {key for key, where in homes.items() if len(where) > 1})


def _assert_whole_group_advantages(groups: dict, num_generations: int) -> None:
    """GRPO's (r - mean(group)) / (std(group) + 1e-4), std over the whole group."""
    for key, rows in groups.items():
        assert len(rows) == num_generations, key
        rewards, advantages = rows[:, 0], rows[:, 1]
        np.testing.assert_allclose(advantages, (rewards - rewards.mean()) / (rewards.std(ddof=1) + 1e-4),
                                   rtol=1e-4, atol=1e-5, err_msg=str(key))


def _rows(trainer) -> list:
    from dp_worker import last_generation_batch

    return list(enumerate(last_generation_batch(trainer)))


def test_a_group_over_two_micro_steps_is_one_group(tiny_model_dir, rec_samples, tmp_path):
    """3 completions per micro-step, groups of 2: the generation batch of 2 micro-steps holds 3 prompts, the middle
    one's group cut between the micro-steps. Its advantages are those of the whole group (one micro-step on its own
    would hold one completion of it, whose advantage would be 0)."""
    trainer = _trainer(tiny_model_dir, tmp_path, rec_samples, per_device_train_batch_size=3,
                       gradient_accumulation_steps=2)
    trainer.train()
    groups, spanning = _group_advantages(_rows(trainer))
    assert len(groups) == 3 and len(spanning) == 1
    _assert_whole_group_advantages(groups, 2)
    assert np.abs(groups[spanning.pop()][:, 1]).min() > 0.5


def test_dynamic_sampling_refills_a_generation_batch_of_groups_over_micro_steps(tiny_model_dir, rec_samples, tmp_path):
    """Every other sample's rewards tie (no learning signal): dynamic sampling draws generation batches of 3
    prompts (groups of 2 over 2 micro-steps of 3 completions) until 3 groups whose rewards differ are kept, and they
    make the 2 micro-batches, the middle group cut between them, its advantages those of the whole group."""
    samples = [dict(s, tied=i % 2 == 0) for i, s in enumerate(rec_samples)]
    trainer = _trainer(tiny_model_dir, tmp_path, samples, per_device_train_batch_size=3, steps_per_generation=2,
                       reward_funcs=["reward_helpers:short_reward_unless_tied"], dynamic_sampling=True,
                       max_num_gen_batches=4)
    history = trainer.train()["history"]
    assert history[0]["num_gen_batches"] > 1 and history[0]["frac_reward_zero_std"] > 0
    groups, spanning = _group_advantages(_rows(trainer))
    assert len(groups) == 3 and len(spanning) == 1 and [len(e.texts) for e in trainer.buffer] == [3, 3]
    assert not any(sample["tied"] for exp in trainer.buffer for sample in exp.samples)
    assert all(np.ptp(rows[:, 0]) > 0 for rows in groups.values())
    _assert_whole_group_advantages(groups, 2)


def test_a_batch_over_two_steps_is_generated_once_and_trained_off_policy(tiny_model_dir, rec_samples, tmp_path):
    """steps_per_generation 2 with one micro-step per step: step 2 trains on the second micro-batch of step 1's
    generation batch, sampled before step 1's update (its log-probs then kept as the old policy), where
    steps_per_generation 1 generates again; the weights differ."""
    runs = {}
    for steps in (1, 2):  # (made anew in step 2, old policy kept, step 2's metrics, weights after step 2)
        trainer = _trainer(tiny_model_dir, tmp_path / str(steps), rec_samples, per_device_train_batch_size=2,
                           steps_per_generation=steps, max_steps=2)
        trainer.training_step()
        first = trainer.buffer
        # dapo's token count: TRL's num_items_in_batch (the generation batch's) x accumulation / steps_per_generation
        tokens = sum(float(exp.mask.sum()) for exp in first)
        assert [exp.loss_tokens for exp in first] == [tokens / steps] * steps
        metrics = trainer.training_step()
        runs[steps] = (trainer.buffer is first, trainer.trained[0].old_logp is not None, metrics, _weights(trainer))
    assert runs[1][:2] == (False, False) and runs[2][:2] == (True, True)
    assert any(not np.allclose(runs[1][3][k], runs[2][3][k]) for k in runs[1][3])


def test_a_run_resumed_mid_generation_batch_equals_the_uninterrupted_run(tiny_model_dir, rec_samples, tmp_path):
    """A generation batch of 2 micro-steps (groups cut between them) trained on for 2 passes, one micro-step per
    step: it is made at step 1 and used by steps 1 to 4; the run stopped after step 1 or 3 resumes from the rollout
    buffer it saved."""
    extra = dict(per_device_train_batch_size=3, steps_per_generation=2, num_iterations=2, max_steps=4)
    straight = _trainer(tiny_model_dir, tmp_path / "straight", rec_samples, **extra)
    straight_losses = [m["loss"] for m in straight.train()["history"]]
    split = tmp_path / "split"
    first = [m["loss"] for m in _trainer(tiny_model_dir, split, rec_samples, save_steps=1, **extra).train()["history"]]
    for step in (2, 3, 4):
        shutil.rmtree(split / f"checkpoint-{step}")
    assert os.path.isfile(split / "checkpoint-1" / "extra_state_rank0.pdparams")
    resumed = _trainer(tiny_model_dir, split, rec_samples, resume_from_checkpoint="latest", **extra)
    rest = [m["loss"] for m in resumed.train()["history"]]
    assert len(rest) == 3
    np.testing.assert_allclose(first[:1] + rest, straight_losses, rtol=1e-6, atol=1e-7)
    resumed_weights = _weights(resumed)
    for key, value in _weights(straight).items():
        np.testing.assert_allclose(resumed_weights[key], value, rtol=1e-6, atol=1e-7, err_msg=key)


# ---- 2 ranks over gloo ---------------------------------------------------------------------------------------
def _dumped_groups(folder, ranks: int) -> tuple[dict, set]:
    """The last generation batch's groups over the ranks' dumps (``dp_worker.last_generation_batch``); a
    micro-batch is named by (rank, its index)."""
    return _group_advantages([((rank, i), batch) for rank in range(ranks)
                              for i, batch in enumerate(json.load(open(folder / f"rank{rank}_completions.json")))])


@pytest.fixture(scope="module")
def over_ranks(tmp_path_factory, tiny_model_dir, rec_jsonl):
    """One spawn of 2 ranks: a step of groups of 2 over 3 completions per rank (the middle group on both ranks), also
    with the sampler's importance-sampling correction (TRL's vllm_importance_sampling_correction); a
    step of a group of 4, one completion per rank and micro-step (the group over both ranks and both micro-steps);
    the same group with a micro-step per optimizer step, 2 steps, saved after step 1 (mid-way through its
    generation batch), and resumed from that checkpoint. Beside it, one process over each of the first two's
    generation batches."""
    out = tmp_path_factory.mktemp("over_ranks")

    def job(name, **kw):
        return _settings(tiny_model_dir, out / name / "run", data_path=rec_jsonl, **{"max_steps": 2, **kw}), \
            str(out / name)

    over_steps = dict(per_device_train_batch_size=1, num_generations=4)
    jobs = [job("ranks", per_device_train_batch_size=3, max_steps=1),
            job("ranks_corrected", per_device_train_batch_size=3, max_steps=1, importance_sampling_correction=True),
            job("ranks_and_steps", gradient_accumulation_steps=2, max_steps=1, **over_steps),
            job("mid_batch", steps_per_generation=2, save_steps=1, **over_steps),
            job("resumed", steps_per_generation=2, resume_from_checkpoint=str(out / "mid_batch" / "run" /
                                                                              "checkpoint-1"), **over_steps)]
    spawn_ranks(train_each_and_dump, args=(jobs,))
    train_each_and_dump([job("ranks_single", per_device_train_batch_size=6, max_steps=1),
                         job("ranks_corrected_single", per_device_train_batch_size=6, max_steps=1,
                             importance_sampling_correction=True),
                         job("ranks_and_steps_single", per_device_train_batch_size=4, num_generations=4,
                             max_steps=1)])
    return out


def _assert_weights(folder, reference, ranks: int, **tolerance) -> None:
    want = np.load(reference / "rank0.npz")
    for rank in range(ranks):
        got = np.load(folder / f"rank{rank}.npz")
        for key in want.files:
            np.testing.assert_allclose(got[key], want[key], **tolerance, err_msg=f"rank {rank}: {key}")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name, homes", [("ranks", 2), ("ranks_and_steps", 4), ("ranks_corrected", 2)])
def test_groups_over_ranks_and_micro_steps_train_as_one_process(over_ranks, tiny_model_dir, name, homes):
    groups, spanning = _dumped_groups(over_ranks / name, 2)
    assert spanning and all(len(groups[key]) > 1 for key in spanning)
    _assert_whole_group_advantages(groups, 4 if name == "ranks_and_steps" else 2)
    single, _ = _dumped_groups(over_ranks / f"{name}_single", 1)
    assert sorted(groups) == sorted(single)  # the same prompts, completions and advantages as in one process
    for key in groups:
        np.testing.assert_allclose(groups[key], single[key], rtol=1e-4, atol=1e-5, err_msg=str(key))
    # the same weights, up to the summation order of the gradients, which Adam's 1/sqrt(v) magnifies for near-zero
    # gradients (see test_distributed.py): far tighter than the two steps moved them
    from paddle_r1.models.loading import load_model

    initial = {k: v.numpy() for k, v in load_model(tiny_model_dir).state_dict().items()}
    single_weights = np.load(over_ranks / f"{name}_single" / "rank0.npz")
    assert max(float(np.abs(single_weights[k] - initial[k]).max()) for k in single_weights.files) > 4e-3
    _assert_weights(over_ranks / name, over_ranks / f"{name}_single", 2, rtol=1e-4, atol=1e-4)
    ranks_micro_batches = {(rank, i) for rank in range(2)
                           for i, _ in enumerate(json.load(open(over_ranks / name / f"rank{rank}_completions.json")))}
    assert len(ranks_micro_batches) == homes


@pytest.mark.timeout(600)
def test_two_ranks_resume_mid_generation_batch_as_the_uninterrupted_run(over_ranks):
    assert {f.name for f in (over_ranks / "mid_batch" / "run" / "checkpoint-1").glob("extra_state_rank*")} == \
        {"extra_state_rank0.pdparams", "extra_state_rank1.pdparams"}
    _assert_weights(over_ranks / "resumed", over_ranks / "mid_batch", 2, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.load(over_ranks / "resumed" / "rank0_rewards.npy"),
                               np.load(over_ranks / "mid_batch" / "rank0_rewards.npy")[1:], rtol=1e-6)


def test_a_batch_wide_statistic_is_the_generation_batchs(tiny_model_dir, rec_samples, tmp_path):
    """scale_rewards: batch over a generation batch of 2 micro-steps (TRL's default steps_per_generation =
    gradient_accumulation_steps): A = (r - mean(group)) / (std(every reward of the generation batch) + 1e-4), as TRL's
    _generate_and_score_completions computes it once per generation batch, not per micro-step."""
    trainer = _trainer(tiny_model_dir, tmp_path, rec_samples, per_device_train_batch_size=4,
                       gradient_accumulation_steps=2, scale_rewards="batch")
    trainer.train()
    batches = _rows(trainer)
    assert len(batches) == 2
    rows = [row for _, batch in batches for row in batch]
    rewards = np.array([row["reward"] for row in rows])
    by_group = collections.defaultdict(list)
    for row in rows:
        by_group[tuple(row["key"])].append(row["reward"])
    means = np.array([np.mean(by_group[tuple(row["key"])]) for row in rows])
    want = (rewards - means) / (rewards.std(ddof=1) + 1e-4)
    np.testing.assert_allclose([row["advantage"] for row in rows], want, rtol=1e-4, atol=1e-5)
    first = np.array([row["reward"] for row in batches[0][1]])  # what one micro-step's own std would give
    assert abs(first.std(ddof=1) - rewards.std(ddof=1)) > 1e-3
