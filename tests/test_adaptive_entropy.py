"""Adaptive entropy control (TRL 1.16's ``use_adaptive_entropy``): against TRL's own ``_compute_loss`` over several
optimizer steps (tests/fixtures/make_trl_loss_reference.py), and in a run, saved and restored on resume."""
import dataclasses
import json
import os
import shutil

import numpy as np
import paddle
import pytest

from paddle_r1.algorithms.entropy_control import AdaptiveEntropy
from paddle_r1.algorithms.loss import LossSettings, entropy_threshold, grpo_loss, high_entropy_mask
from paddle_r1.config.jobs import GRPOConfig
from paddle_r1.trainer.grpo import GRPOTrainer

with open(os.path.join(os.path.dirname(__file__), "fixtures", "trl_loss_reference.json"), encoding="utf-8") as _f:
    _TRL = json.load(_f)
_SETTING_KEYS = {f.name for f in dataclasses.fields(LossSettings)}


@pytest.mark.parametrize("case", _TRL["adaptive_entropy"], ids=lambda c: c["name"])
def test_the_coefficient_and_the_loss_follow_trls_over_steps(case):
    """Six optimizer steps of two micro-batches whose entropies lie above the target, then below, then above: the
    coefficient rises to its ceiling and falls to its floor as TRL's, the bonus applies only after a step at or below
    the target, and every micro-batch's loss and gradient to the entropies equal TRL's."""
    arrays = {k: np.array(v, dtype="float64") for k, v in _TRL["inputs"].items()}
    control = AdaptiveEntropy(case["control"]["entropy_coef"], case["control"]["entropy_target"],
                              case["control"]["entropy_coef_delta"], case["control"]["entropy_coef_min"],
                              case["control"]["entropy_coef_max"])
    base = LossSettings(**{k: v for k, v in case["settings"].items() if k in _SETTING_KEYS},
                        use_adaptive_entropy=True, gradient_accumulation_steps=2)
    quantile, tokens = case["settings"]["top_entropy_quantile"], float(arrays["mask"].sum())
    for step in case["steps"]:
        settings = dataclasses.replace(base, entropy_coef=control.applied())
        sums = np.zeros(2)
        for rows, expected in zip((slice(0, 3), slice(3, 6)), step["micro_batches"]):
            t = {k: paddle.to_tensor(v[rows]) for k, v in arrays.items()}
            entropies = paddle.to_tensor(arrays["entropies"][rows] * step["scale"])
            entropies.stop_gradient = False
            mask = t["mask"]
            entropy_mask = None
            if quantile < 1.0:
                threshold = entropy_threshold(entropies.numpy()[mask.numpy() > 0], quantile)
                entropy_mask = high_entropy_mask(entropies.detach(), mask, threshold)
            loss, _ = grpo_loss(t["logp"], t["old_logp"], t["ref_logp"], t["advantages"], mask, settings,
                                num_items_in_batch=tokens, entropies=entropies, entropy_mask=entropy_mask)
            loss.backward()
            assert float(loss) == pytest.approx(expected["loss"], rel=1e-12, abs=1e-15)
            np.testing.assert_allclose(entropies.grad.numpy(), expected["entropy_grad"], rtol=1e-10, atol=1e-15)
            bonus = mask if entropy_mask is None else mask * entropy_mask
            sums += [float((entropies.detach() * bonus).sum()), float(bonus.sum())]
        control.update(sums[0] / max(sums[1], 1.0))
        assert control.coef == pytest.approx(step["entropy_coef"], rel=1e-12)
        assert control.last_entropy == pytest.approx(step["last_world_entropy"], rel=1e-12)


def _config(model_dir, out, **kw):
    return GRPOConfig(**{**dict(model_name_or_path=model_dir, output_dir=str(out), reward_funcs=["iou"],
                                num_generations=2, per_device_train_batch_size=4, max_completion_length=6,
                                max_steps=3, save_steps=100, use_visualdl=False, disable_tqdm=True, seed=7, beta=0.0,
                                learning_rate=5e-3, use_adaptive_entropy=True, entropy_coef=0.1,
                                entropy_coef_delta=0.05), **kw})


def _history(model_dir, out, samples, **kw):
    return GRPOTrainer(_config(model_dir, out, **kw), samples=samples).train()["history"]


def test_a_run_moves_the_coefficient_and_a_resume_continues_it(tiny_model_dir, rec_samples, tmp_path):
    """Target above the tiny model's entropy: the coefficient rises every step (logged after the update) and the
    bonus changes the losses from the second step on; a target below it: it falls. A run resumed from its step-2
    checkpoint logs what the uninterrupted run logs."""
    rising = _history(tiny_model_dir, tmp_path / "rising", rec_samples, entropy_target=100.0)
    assert [h["entropy_coef"] for h in rising] == pytest.approx([0.15, 0.2, 0.25])
    falling = _history(tiny_model_dir, tmp_path / "falling", rec_samples, entropy_target=0.0)
    assert [h["entropy_coef"] for h in falling] == pytest.approx([0.05, 0.0, 0.0])
    assert rising[0]["loss"] == pytest.approx(falling[0]["loss"], rel=1e-6)  # no bonus before a measurement
    assert rising[1]["loss"] < falling[1]["loss"] - 1e-3  # minus c * entropy
    split = tmp_path / "split"
    _history(tiny_model_dir, split, rec_samples, entropy_target=100.0, save_steps=2)
    shutil.rmtree(split / "checkpoint-3")
    rest = _history(tiny_model_dir, split, rec_samples, entropy_target=100.0, resume_from_checkpoint="latest")
    assert len(rest) == 1 and rest[0]["entropy_coef"] == pytest.approx(0.25)
    assert rest[0]["loss"] == pytest.approx(rising[2]["loss"], rel=1e-6, abs=1e-7)
