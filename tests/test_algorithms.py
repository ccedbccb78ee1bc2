"""The algorithm options, each against values computed by hand, and dynamic sampling through the trainer
(deterministic, resumable)."""
import json
import math
import shutil

import numpy as np
import paddle
import pytest

from paddle_r1.config.jobs import GRPOConfig
from paddle_r1.models.loading import load_model
from paddle_r1.algorithms.dynamic_sampling import kept_groups
from paddle_r1.algorithms.groups import GroupTable
from paddle_r1.trainer.grpo import GRPOTrainer
from paddle_r1.algorithms.advantages import advantages_for, longest_turns, overlong_penalty
from paddle_r1.algorithms.loss import LossSettings, grpo_loss, kl_divergence

T = paddle.to_tensor


def test_rloo_baseline_leaves_each_completion_out():
    rewards = T([1.0, 0.0, 2.0, 5.0, float("nan"), 3.0])  # groups of 3; one unscored
    got = advantages_for("rloo", rewards, 3, lengths=paddle.full([6], 2.0))
    # group 0: 1 - (0 + 2) / 2 = 0, 0 - 1.5 = -1.5, 2 - 0.5 = 1.5; group 1 (5, 3 scored): 5 - 3 = 2, 3 - 5 = -2
    np.testing.assert_allclose(got.numpy(), [0.0, -1.5, 1.5, 2.0, 0.0, -2.0], rtol=1e-6)


def test_reinforce_plus_plus_whitens_over_tokens_of_the_batch():
    rewards = T([1.0, 0.0, 0.0, 0.0])
    mask = T([[1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 0, 0]])  # 3 + 1 + 2 + 1 = 7 tokens
    token_returns = np.array([1, 1, 1, 0, 0, 0, 0], dtype="float64")
    mean, var = token_returns.mean(), token_returns.var(ddof=1)
    expected = (np.array([1.0, 0, 0, 0]) - mean) / math.sqrt(var + 1e-8)
    np.testing.assert_allclose(advantages_for("reinforce_plus_plus", rewards, 2, lengths=mask.sum(axis=1)).numpy(),
                               expected, rtol=1e-5)


def test_dr_grpo_estimator_does_not_divide_by_std():
    got = advantages_for("dr_grpo", T([1.0, 3.0, 2.0, 2.0]), 2, lengths=paddle.ones([4]), scale_rewards="group")
    np.testing.assert_allclose(got.numpy(), [-1.0, 1.0, 0.0, 0.0])


def test_kl_estimators():
    logp, ref = T([math.log(0.5)]), T([math.log(0.25)])
    d = math.log(0.25) - math.log(0.5)
    np.testing.assert_allclose(kl_divergence(logp, ref, "k1").numpy(), [-d], rtol=1e-6)
    np.testing.assert_allclose(kl_divergence(logp, ref, "k2").numpy(), [0.5 * d * d], rtol=1e-6)
    np.testing.assert_allclose(kl_divergence(logp, ref, "k3").numpy(), [math.exp(d) - d - 1], rtol=1e-6)


def test_sequence_level_importance_ratio_is_the_mean_log_ratio():
    logp = T([[-1.0, -2.0, -3.0]])
    old = T([[-1.5, -2.0, -2.0]])  # log ratios 0.5, 0, -1 -> masked mean over the first two: 0.25
    mask = T([[1, 1, 0]])
    args = dict(epsilon_low=0.5, epsilon_high=0.5, loss_type="grpo", max_completion_length=3)
    loss, _ = grpo_loss(logp, old, None, T([1.0]), mask, LossSettings(importance_sampling_level="sequence", **args))
    assert float(loss) == pytest.approx(-math.exp(0.25), rel=1e-6)
    token_loss, _ = grpo_loss(logp, old, None, T([1.0]), mask, LossSettings(**args))
    assert float(token_loss) == pytest.approx(-(1.5 + 1.0) / 2, rel=1e-6)  # exp(0.5) > 1 + eps: clipped to 1.5


def test_overlong_penalty_is_soft_in_the_buffer():
    assert overlong_penalty([4, 6, 7, 8], max_completion_length=8, buffer=4, factor=0.5) == [0.0, -0.25, -0.375, -0.5]


def test_the_overlong_penalty_measures_an_episode_by_its_longest_turn():
    """A single-turn row's length is its completion's; an episode of turns of 3 and 4 tokens around a tool result is
    4 tokens long for the penalty (each turn is bounded by max_completion_length), not its 7 model tokens."""
    masks = np.asarray([[1, 1, 1, 1, 1, 0, 0, 0, 0, 0],
                        [1, 1, 1, 0, 0, 1, 1, 1, 1, 0],
                        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0]])
    assert longest_turns(masks).tolist() == [5, 4, 0]
    assert overlong_penalty(longest_turns(masks).tolist(), max_completion_length=6, buffer=2, factor=1.0) == \
        [-0.5, 0.0, 0.0]


def _table(rewards, scores=None) -> GroupTable:
    rewards = np.asarray(rewards, dtype="float64")
    scores = rewards[..., None] if scores is None else np.asarray(scores, dtype="float64")
    return GroupTable(rewards, scores, np.ones_like(rewards), local=np.arange(rewards.size))


def test_loss_settings_take_every_loss_key_from_the_config():
    config = GRPOConfig(loss_type="vespo", beta=0.3, epsilon=0.1, epsilon_high=0.4, delta=2.0, max_completion_length=9,
                        kl_estimator="k2", importance_sampling_level="sequence", sapo_temperature_pos=0.7,
                        sapo_temperature_neg=1.3, vespo_k_pos=1.1, vespo_lambda_pos=1.2, vespo_k_neg=1.3,
                        vespo_lambda_neg=1.4, off_policy_mask_threshold=0.2, use_bias_correction_kl=True,
                        entropy_coef=0.01, gradient_accumulation_steps=3)
    assert LossSettings.of(config) == LossSettings(
        loss_type="vespo", beta=0.3, epsilon_low=0.1, epsilon_high=0.4, max_completion_length=9, kl_estimator="k2",
        importance_sampling_level="sequence", delta=2.0, sapo_temperature_pos=0.7, sapo_temperature_neg=1.3,
        vespo_k_pos=1.1, vespo_lambda_pos=1.2, vespo_k_neg=1.3, vespo_lambda_neg=1.4, off_policy_mask_threshold=0.2,
        use_bias_correction_kl=True, entropy_coef=0.01, gradient_accumulation_steps=3)
    assert LossSettings.of(GRPOConfig(beta=0.3, use_kl_loss=False)).beta == 0.0  # the KL is in the reward then
    assert LossSettings.of(GRPOConfig(epsilon=0.3)).epsilon_high == 0.3


def test_kept_groups_have_untied_scored_rewards():
    assert kept_groups(_table([[1, 1, 1], [0, 1, 0], [np.nan, 2, np.nan]])).tolist() == [False, True, False]


def _config(model_dir, out, **kw):
    base = dict(model_name_or_path=model_dir, output_dir=str(out), reward_funcs=["reward_helpers:short_reward"],
                num_generations=3, per_device_train_batch_size=6, max_completion_length=6, learning_rate=5e-3,
                max_steps=3, save_steps=100, use_visualdl=False, disable_tqdm=True, seed=9, beta=0.05)
    base.update(kw)
    return GRPOConfig(**base)


def _weights(trainer):
    return {k: v.numpy().copy() for k, v in trainer.policy.state_dict().items()}


def test_dynamic_sampling_drops_tied_groups_deterministically_and_resumes(tiny_model_dir, rec_samples, tmp_path):
    # counting scores a box solution as bad data -> None; on three samples the reward is a constant 1.0 instead
    samples = [dict(s, tied=i % 2 == 0) for i, s in enumerate(rec_samples)]
    settings = dict(reward_funcs=["reward_helpers:short_reward_unless_tied"], dynamic_sampling=True,
                    max_num_gen_batches=3, save_steps=2, max_steps=3)
    first = GRPOTrainer(_config(tiny_model_dir, tmp_path / "a", **settings), samples=samples)
    history = first.train()["history"]
    assert all(h["num_gen_batches"] >= 1 for h in history)
    assert any(h["frac_reward_zero_std"] > 0 for h in history)
    rows = [json.loads(line) for line in open(tmp_path / "a" / "completions.jsonl")]
    assert rows and not any(r["tied"] for r in rows if r["step"] == 1 and history[0]["num_gen_batches"] < 3)
    again = GRPOTrainer(_config(tiny_model_dir, tmp_path / "b", **settings), samples=samples)
    assert [h["loss"] for h in again.train()["history"]] == [h["loss"] for h in history]
    # resume from step 2 continues exactly
    shutil.rmtree(tmp_path / "b" / "checkpoint-3")
    resumed = GRPOTrainer(_config(tiny_model_dir, tmp_path / "b", **settings, resume_from_checkpoint="latest"),
                          samples=samples)
    last = resumed.train()["history"]
    assert len(last) == 1 and last[0]["loss"] == pytest.approx(history[-1]["loss"], rel=1e-6, abs=1e-9)
    for key, value in _weights(first).items():
        np.testing.assert_allclose(_weights(resumed)[key], value, rtol=1e-6, atol=1e-7, err_msg=key)


def test_the_filtering_band_keeps_groups_whose_mean_lies_inside(tiny_model_dir, rec_samples, tmp_path):
    """EasyR1's online filtering: every other sample's rewards are shifted by 1 (group means about 0.9 against
    -0.1); with the band (0.5, 2) only the shifted samples' groups are trained on, as long as the refills found
    enough of them; without it, dynamic sampling keeps both kinds (each group's rewards differ)."""
    samples = [dict(s, shift=float(i % 2)) for i, s in enumerate(rec_samples)]
    common = dict(reward_funcs=["reward_helpers:shifted_short_reward"], dynamic_sampling=True, max_num_gen_batches=4,
                  max_steps=2)
    for band, out in ((dict(filter_low=0.5, filter_high=2.0), "band"), ({}, "no_band")):
        history = GRPOTrainer(_config(tiny_model_dir, tmp_path / out, **common, **band), samples=samples).train()
        rows = [json.loads(line) for line in open(tmp_path / out / "completions.jsonl")]
        full = {step for step, h in enumerate(history["history"], 1) if h["num_gen_batches"] < 4}  # enough found
        rewards = np.array([r["reward"] for r in rows if r["step"] in full])
        assert rewards.size and ((rewards > 0.5).all() if band else (rewards < 0.5).any())


_BASELINES: dict = {}


def _train(model_dir, samples, out, **options) -> tuple[list, dict, GRPOTrainer]:
    trainer = GRPOTrainer(_config(model_dir, out, max_steps=2, **options), samples=samples)
    history = trainer.train()["history"]
    assert all(np.isfinite(h["loss"]) for h in history)
    return history, _weights(trainer), trainer


# (the option, the run it is compared with, what the option must change: the weights, or a logged metric at step 2)
@pytest.mark.parametrize("options,without,changes", [
    (dict(adv_estimator="rloo"), {}, "weights"),
    (dict(adv_estimator="reinforce_plus_plus"), {}, "weights"),
    (dict(kl_estimator="k2"), {}, "kl"),  # the default is k3; both are 0 at step 1, where policy = reference
    (dict(use_kl_loss=False, kl_estimator="k1"), dict(kl_estimator="k1"), "reward"),  # r - beta * KL
    # on-policy the sequence-level weight has the token level's gradient: the second of num_iterations=2 is off-policy
    (dict(importance_sampling_level="sequence", num_iterations=2), dict(num_iterations=2), "weights"),
    (dict(overlong_buffer=3), {}, "reward"),  # completions within 3 tokens of max_completion_length are penalised
    (dict(ref_model_update="ema", ref_ema_decay=0.5), {}, "reference"),
    # TRL 1.16's loss family (their values against TRL's own code: test_loss.py). On-policy, with completions of one
    # length, each has grpo's gradient up to a factor Adam divides out: the second of num_iterations=2 is off-policy
    (dict(loss_type="cispo", epsilon_high=1.0, num_iterations=2), dict(num_iterations=2), "weights"),
    (dict(loss_type="sapo", num_iterations=2), dict(num_iterations=2), "weights"),
    (dict(loss_type="luspo", importance_sampling_level="sequence", num_iterations=2), dict(num_iterations=2),
     "weights"),
    (dict(loss_type="vespo", num_iterations=2), dict(num_iterations=2), "weights"),
    (dict(top_entropy_quantile=0.2), {}, "weights"),
    (dict(entropy_coef=0.5), {}, "weights"),  # through the entropy's own gradient
    (dict(use_bias_correction_kl=True), {}, "weights"),  # beta 0.05: the KL's gradient changes on-policy too
    (dict(off_policy_mask_threshold=0.0, num_iterations=2), dict(num_iterations=2), "weights"),
    (dict(multi_objective_aggregation="normalize_then_sum"), {}, "weights"),
], ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) if isinstance(o, dict) else None)
def test_each_option_changes_what_it_should(tiny_model_dir, rec_samples, tmp_path, options, without, changes):
    """Each option against the same run without it: a trainer that ignored the option would fail here."""
    key = tuple(sorted(without.items()))
    if key not in _BASELINES:
        _BASELINES[key] = _train(tiny_model_dir, rec_samples, tmp_path / "without", **without)[:2]
    base_history, base_weights = _BASELINES[key]
    history, weights, trainer = _train(tiny_model_dir, rec_samples, tmp_path / "with", **options)
    if changes == "weights":
        assert any(not np.allclose(weights[k], v, rtol=1e-6, atol=1e-8) for k, v in base_weights.items())
    elif changes == "reference":  # ref <- 0.5 ref + 0.5 policy after each step: moved halfway, the frozen one not
        assert trainer.reference is not None
        initial = {k: v.numpy() for k, v in load_model(tiny_model_dir).state_dict().items()}
        ref = {k: v.numpy() for k, v in trainer.reference.state_dict().items()}
        moved = [k for k in ref if not np.allclose(weights[k], initial[k])]
        assert moved and all(not np.allclose(ref[k], initial[k]) and not np.allclose(ref[k], weights[k]) for k in moved)
    else:
        assert history[1][changes] != pytest.approx(base_history[1][changes], rel=1e-6, abs=1e-9), changes


def test_every_algorithm_name_has_an_implementation_and_every_implementation_a_name():
    """The names config checks its keys against (paddle_r1/algorithms/names.py) are the keys of the implementations'
    tables: a name added to one side only fails here."""
    from paddle_r1.algorithms import names as algorithms
    from paddle_r1.algorithms.advantages import ADVANTAGE_ESTIMATORS, group_advantages
    from paddle_r1.algorithms.loss import KL_ESTIMATES, LOG_RATIO_LEVELS, LOSS_TYPE_RULES
    from paddle_r1.parallel.sharding import UPDATES

    assert set(LOSS_TYPE_RULES) == set(algorithms.LOSS_TYPES)
    assert set(ADVANTAGE_ESTIMATORS) == set(algorithms.ADV_ESTIMATORS)
    assert set(KL_ESTIMATES) == set(algorithms.KL_ESTIMATORS)
    assert set(LOG_RATIO_LEVELS) == set(algorithms.IMPORTANCE_SAMPLING_LEVELS)
    assert set(UPDATES) == set(algorithms.SHARDING_STAGES)
    rewards = T([1.0, 2.0, 3.0, 5.0])
    scaled = {name: group_advantages(rewards, 2, name).numpy().tolist() for name in algorithms.SCALE_REWARDS}
    assert len({str(v) for v in scaled.values()}) == len(algorithms.SCALE_REWARDS)  # each divides differently
    with pytest.raises(ValueError, match="scale_rewards"):
        group_advantages(rewards, 2, "tokens")


def test_an_algorithm_is_one_registered_object_the_config_reads():
    """A loss type, estimator or level is one ``Registry`` entry: the key's choices, its help and its rules come from
    it, and the config reads them without importing Paddle (the command line stays quick)."""
    import dataclasses
    import subprocess
    import sys

    from paddle_r1.algorithms.names import REGISTRIES
    from paddle_r1.algorithms.registry import Need, Registry
    from paddle_r1.config.jobs import GRPOConfig
    from paddle_r1.errors import ConfigError

    fields = {f.name: f for f in dataclasses.fields(GRPOConfig)}
    for registry in REGISTRIES:
        assert fields[registry.key].metadata["choices"] == registry.names
        assert registry.choices_help() in fields[registry.key].metadata["help"]
    toy = Registry("loss_type")
    toy.register("capped", "l = -min(w, epsilon_high) A", needs=(Need("epsilon_high", "caps w at it"),))(abs)
    with pytest.raises(ValueError, match="registered twice"):
        toy.add("capped", abs, "again")
    assert toy.implementation("capped") is abs and toy.choices_help().endswith("(needs epsilon_high set)")
    with pytest.raises(ConfigError, match="^config keys 'loss_type' and 'epsilon_high': capped caps w at it$"):
        toy.check(type("Config", (), {"loss_type": "capped", "epsilon_high": None})())
    with pytest.raises(ValueError, match="unknown loss_type 'nope'"):
        toy.implementation("nope")
    quiet = subprocess.run([sys.executable, "-c", "import sys, paddle_r1.config.jobs; print('paddle' in sys.modules)"],
                           capture_output=True, text=True, check=True)
    assert quiet.stdout.strip() == "False"
