"""The correction of the mismatch between the rollout's sampler and the training forward (TRL 1.16's vLLM importance
sampling, ``importance_sampling_*`` here): the rollout's own log-probs, rho's modes and bounds, the loss, the metrics,
against TRL's own code (tests/fixtures/make_trl_loss_reference.py) and in a run."""
import dataclasses
import json
import math
import os

import numpy as np
import paddle
import pytest

from paddle_r1.algorithms.loss import (LossSettings, grpo_loss, sampler_ratio, sampler_statistics, sampler_values)
from paddle_r1.algorithms.logprobs import completion_logprobs
from paddle_r1.config.jobs import GRPOConfig
from paddle_r1.config.reading.peer_keys import from_source_keys
from paddle_r1.errors import ConfigError
from paddle_r1.generation.generator import build_prompt_batch
from paddle_r1.generation.rollout import SamplingParams, sample_completions
from paddle_r1.trainer.grpo import GRPOTrainer

with open(os.path.join(os.path.dirname(__file__), "fixtures", "trl_loss_reference.json"), encoding="utf-8") as _f:
    _TRL = json.load(_f)
_SETTING_KEYS = {f.name for f in dataclasses.fields(LossSettings)}
T = paddle.to_tensor


@pytest.mark.parametrize("case", _TRL["sampler"]["cases"], ids=lambda c: c["name"])
def test_correction_loss_and_metrics_equal_trls(case):
    """TRL 1.16's own lines making vllm_importance_sampling_ratio and its sampling/* metrics, then its _compute_loss
    with use_vllm, on the same float64 tensors (one sampled log-prob NaN): rho, the loss, its gradient, every
    metric."""
    inputs = {k: T(np.array(v, dtype="float64")) for k, v in _TRL["inputs"].items()}
    sampled = T(np.array(_TRL["sampler"]["sampling_logp"], dtype="float64"))
    logp, mask, vllm = inputs["logp"], inputs["mask"], case["vllm"]
    logp.stop_gradient = False
    ratio = sampler_ratio(inputs["old_logp"], sampled, mask, vllm["mode"], vllm["clip_min"], vllm["clip_max"])
    np.testing.assert_allclose(ratio.numpy(), case["ratio"], rtol=1e-12)
    settings = LossSettings(**{k: v for k, v in case["settings"].items() if k in _SETTING_KEYS})
    loss, stats = grpo_loss(logp, inputs["old_logp"], inputs["ref_logp"], inputs["advantages"], mask, settings,
                            num_items_in_batch=float(mask.sum()), entropies=inputs["entropies"],
                            sampler_ratio=ratio, sampling_logp=sampled)
    loss.backward()
    assert float(loss) == pytest.approx(case["loss"], rel=1e-12, abs=1e-15)
    np.testing.assert_allclose(logp.grad.numpy(), case["grad"], rtol=1e-10, atol=1e-15)
    stats.update(sampler_statistics(*sampler_values(inputs["old_logp"], sampled, ratio, mask)))
    for name, value in case["metrics"].items():
        assert stats[name] == pytest.approx(value, rel=1e-6), name


def test_each_mode_and_bound_by_hand():
    """d = (log 4, log 0.25, log 2) on one completion of three tokens and one of a single token (log 0.5): the
    modes truncate or zero per token or per completion, at the bounds given; NaN (not sampled) counts as d = 0."""
    old = T([[math.log(4), math.log(0.25), math.log(2)], [math.log(0.5), 0.0, 0.0]])
    sampled = T([[0.0, 0.0, 0.0], [0.0, float("nan"), 5.0]])
    mask = T([[1, 1, 1], [1, 0, 0]])

    def rho(mode, low=None, high=None):
        return sampler_ratio(old, sampled, mask, mode, low, high).numpy()

    np.testing.assert_allclose(rho("token_truncate", high=3.0), [[3, 0.25, 2], [0.5, 1, 1]], rtol=1e-6)
    np.testing.assert_allclose(rho("token_truncate", low=0.5, high=3.0), [[3, 0.5, 2], [0.5, 1, 1]], rtol=1e-6)
    np.testing.assert_allclose(rho("token_mask", high=3.0), [[0, 0.25, 2], [0.5, 1, 1]], rtol=1e-6)
    np.testing.assert_allclose(rho("token_mask", low=0.3), [[4, 0, 2], [0.5, 1, 1]], rtol=1e-6)
    np.testing.assert_allclose(rho("sequence_truncate", high=1.5), [[1.5], [0.5]], rtol=1e-6)  # 4 * 0.25 * 2 = 2
    np.testing.assert_allclose(rho("sequence_mask", high=3.0), [[2], [0.5]], rtol=1e-6)
    np.testing.assert_allclose(rho("sequence_mask", low=0.6, high=3.0), [[2], [0]], rtol=1e-6)


def test_rho_weighs_each_tokens_loss_and_vespo_takes_it_into_its_weight():
    """On-policy (w = 1) a token's bnpo loss is -A; with rho it is -rho A, and rho 0 takes the token out; vespo's
    phi(W) moves with log rho instead."""
    logp = T([[-1.0, -2.0]])
    settings = LossSettings(loss_type="bnpo")
    plain, _ = grpo_loss(logp, logp, None, T([1.0]), T([[1, 1]]), settings)
    weighted, _ = grpo_loss(logp, logp, None, T([1.0]), T([[1, 1]]), settings, sampler_ratio=T([[0.5, 0.0]]))
    assert float(plain) == pytest.approx(-1.0) and float(weighted) == pytest.approx(-0.25)
    vespo = LossSettings(loss_type="vespo")
    _, on_policy = grpo_loss(logp, logp, None, T([1.0]), T([[1, 1]]), vespo)
    _, corrected = grpo_loss(logp, logp, None, T([1.0]), T([[1, 1]]), vespo, sampler_ratio=T([[0.5, 1.0]]))
    w = 0.5  # phi(w) = exp(lambda + k ln w - lambda w), k 2, lambda 3
    assert on_policy["vespo/phi_seq_mean"] == pytest.approx(1.0)
    assert corrected["vespo/phi_seq_mean"] == pytest.approx(math.exp(3 + 2 * math.log(w) - 3 * w), rel=1e-5)


def test_off_policy_mask_measures_from_the_samplers_log_probs_when_given():
    logp = T([[-1.0, -1.0]])
    settings = LossSettings(loss_type="bnpo", off_policy_mask_threshold=0.1)
    kept, _ = grpo_loss(logp, logp, None, T([-1.0]), T([[1, 1]]), settings)
    dropped, _ = grpo_loss(logp, logp, None, T([-1.0]), T([[1, 1]]), settings, sampling_logp=T([[-0.5, -0.5]]))
    assert float(kept) == pytest.approx(1.0) and float(dropped) == 0.0


@pytest.mark.parametrize("params", [SamplingParams(8, temperature=0.7), SamplingParams(8, temperature=0.0),
                                    SamplingParams(8, temperature=1.3, top_k=5)], ids=["t0.7", "greedy", "top_k"])
def test_the_rollout_keeps_each_tokens_log_prob_from_the_logits_it_sampled_from(tiny, rec_samples, params):
    """The rollout's log-probs equal the training forward's at the sampling temperature (float32 CPU: ~1e-6) when
    it samples from the whole vocabulary; with top_k they are those of the truncated distribution, above the
    forward's."""
    model, processor = tiny
    prompt, _ = build_prompt_batch(rec_samples[:2], processor, "{Question}")
    eos, pad = [processor.tokenizer.eos_token_id], processor.tokenizer.pad_token_id
    paddle.seed(3)
    rollout = sample_completions(model, prompt, 2, params, eos, pad)
    mask = rollout.completion_mask.numpy() > 0
    sampled = rollout.sampling_logp.numpy()
    assert (sampled[~mask] == 0).all()
    with paddle.no_grad():
        trained = completion_logprobs(model, rollout, 4096, params.temperature).numpy()
    if params.top_k:
        assert (sampled[mask] > trained[mask] + 1e-3).mean() > 0.5 and (sampled[mask] >= trained[mask] - 1e-5).all()
    else:
        np.testing.assert_allclose(sampled[mask], trained[mask], atol=2e-5)


def _config(model_dir, out, **kw):
    return GRPOConfig(**{**dict(model_name_or_path=model_dir, output_dir=str(out), reward_funcs=["iou"],
                                num_generations=2, per_device_train_batch_size=4, max_completion_length=6,
                                max_steps=1, save_steps=100, use_visualdl=False, disable_tqdm=True, seed=7, beta=0.0,
                                gradient_accumulation_steps=2), **kw})


def test_a_run_logs_the_difference_and_the_ratio(tiny_model_dir, rec_samples, tmp_path):
    """With the correction on, a step logs TRL's sampling/* metrics (float32 CPU: rho ~1, a difference ~1e-6); off,
    none; the loss moves by no more than rho does."""
    on = GRPOTrainer(_config(tiny_model_dir, tmp_path / "on", importance_sampling_correction=True,
                             importance_sampling_mode="token_truncate"), samples=rec_samples).train()["history"][0]
    off = GRPOTrainer(_config(tiny_model_dir, tmp_path / "off"), samples=rec_samples).train()["history"][0]
    assert 0 < on["sampling/sampling_logp_difference/mean"] <= on["sampling/sampling_logp_difference/max"] < 1e-4
    assert 1 - 1e-4 < on["sampling/importance_sampling_ratio/min"] <= on["sampling/importance_sampling_ratio/max"] \
        < 1 + 1e-4
    assert not any(key.startswith("sampling/") for key in off)
    assert on["loss"] == pytest.approx(off["loss"], rel=1e-3, abs=1e-6)


def test_trls_vllm_keys_are_read_as_the_projects_and_the_rules_hold(tmp_path):
    values = {"vllm_importance_sampling_correction": True, "vllm_importance_sampling_mode": "token_mask",
              "vllm_importance_sampling_cap": 2.0, "vllm_importance_sampling_clip_min": 0.5}
    assert from_source_keys(values, "cfg", values) == {
        "importance_sampling_correction": True, "importance_sampling_mode": "token_mask",
        "importance_sampling_clip_max": 2.0, "importance_sampling_clip_min": 0.5}
    base = dict(model_name_or_path=str(tmp_path), output_dir=str(tmp_path), reward_funcs=["iou"],
                importance_sampling_correction=True)
    with pytest.raises(ConfigError, match="vespo"):
        GRPOConfig(**base, loss_type="vespo").check_own_keys()
    with pytest.raises(ConfigError, match="neither is set"):
        GRPOConfig(**base, importance_sampling_mode="token_truncate",
                   importance_sampling_clip_max=None).check_own_keys()
    with pytest.raises(ConfigError, match="is above"):
        GRPOConfig(**base, importance_sampling_clip_min=4.0).check_own_keys()
    GRPOConfig(**base, loss_type="vespo", importance_sampling_mode="token_mask").check_own_keys()


@pytest.mark.parametrize("num_iterations", [1, 2])
def test_with_dynamic_sampling_and_a_reused_rollout(tiny_model_dir, rec_samples, tmp_path, num_iterations):
    """The rollout's log-probs follow the groups dynamic sampling keeps. A rollout reused by num_iterations steps is
    corrected with the rho made at rollout time, and logged once, at the step that made it (as TRL logs it); one
    trained once (rho from the training forward) is logged at every step, each making its own."""
    history = GRPOTrainer(_config(tiny_model_dir, tmp_path, importance_sampling_correction=True, dynamic_sampling=True,
                                  num_iterations=num_iterations, max_steps=2, max_num_gen_batches=2),
                          samples=rec_samples).train()["history"]
    for step in history[:3 - num_iterations]:
        assert 0 < step["sampling/sampling_logp_difference/max"] < 1e-4
        assert step["sampling/importance_sampling_ratio/mean"] == pytest.approx(1.0, abs=1e-4)
    if num_iterations == 2:
        assert not any(key.startswith("sampling/") for key in history[1])


@pytest.mark.parametrize("steps_per_generation", [None, 1])
def test_on_policy_the_correction_reads_the_training_forward_and_runs_no_forward_of_its_own(
        tiny_model_dir, rec_samples, tmp_path, monkeypatch, steps_per_generation):
    """Where every micro-batch is trained before an optimizer step follows its rollout (the default), rho is made from
    the training forward's log-probs, detached: no forward at rollout time (TRL runs one), and the loss and the
    sampling/* metrics of two steps equal those of the forward at rollout time (forced here) to float rounding; also
    with two generation batches in a step (steps_per_generation 1), each logged as its own."""
    from paddle_r1.trainer import grpo

    forwards = []
    counted = grpo.completion_logprobs
    monkeypatch.setattr(grpo, "completion_logprobs", lambda *a, **k: (forwards.append(1), counted(*a, **k))[1])
    runs = {}
    for from_training in (True, False):
        monkeypatch.setattr(GRPOTrainer, "_rho_from_training_forward", property(lambda self, on=from_training: on))
        forwards.clear()
        config = _config(tiny_model_dir, tmp_path / str(from_training), importance_sampling_correction=True,
                         importance_sampling_mode="token_truncate", max_steps=2,
                         steps_per_generation=steps_per_generation)
        runs[from_training] = (GRPOTrainer(config, samples=rec_samples).train()["history"], len(forwards))
    (trained, no_forwards), (at_rollout, rollout_forwards) = runs[True], runs[False]
    assert no_forwards == 0 and rollout_forwards == 4  # 2 steps x 2 micro-batches
    for step_trained, step_at_rollout in zip(trained, at_rollout):
        for key in ("loss", "sampling/sampling_logp_difference/mean", "sampling/sampling_logp_difference/max",
                    "sampling/importance_sampling_ratio/min", "sampling/importance_sampling_ratio/max"):
            assert step_trained[key] == pytest.approx(step_at_rollout[key], rel=1e-4, abs=1e-6), key
