"""LoRA through paddleformers.peft: only adapters train, the checkpoint is the merged model, resume is exact."""

import numpy as np
import paddle
import pytest

from paddle_r1.config.jobs import GRPOConfig
from paddle_r1.models.loading import load_model
from paddle_r1.models.lora import adapter_state, adapters_disabled, apply_lora, lora_layers, merged_state_dict
from paddle_r1.trainer.grpo import GRPOTrainer
from paddle_r1.generation.generator import build_prompt_batch


def _config(model_dir, out, **kw):
    base = dict(model_name_or_path=model_dir, output_dir=str(out), reward_funcs=["reward_helpers:short_reward"],
                num_generations=3, per_device_train_batch_size=6, max_completion_length=6, learning_rate=2e-2,
                max_steps=2, save_steps=100, use_visualdl=False, disable_tqdm=True, seed=5, beta=0.1, lora=True,
                lora_rank=4, lora_alpha=8)
    base.update(kw)
    return GRPOConfig(**base)


@paddle.no_grad()
def _logits(model, prompt):
    model.model.rope_deltas = None
    return model(input_ids=prompt.input_ids, attention_mask=prompt.attention_mask,
                 pixel_values=prompt.pixel_values, image_grid_thw=prompt.image_grid_thw).logits.numpy()


def test_lora_trains_only_adapters_and_saves_the_merged_model(tiny_model_dir, rec_samples, tmp_path):
    base = {k: v.numpy().copy() for k, v in load_model(tiny_model_dir).state_dict().items()}
    trainer = GRPOTrainer(_config(tiny_model_dir, tmp_path / "run"), samples=rec_samples)
    assert trainer.reference is None  # beta > 0, yet no second copy: the reference is the policy without adapters
    trainable = [n for n, p in trainer.policy.named_parameters() if not p.stop_gradient]
    assert trainable and all("lora_" in n for n in trainable)
    result = trainer.train()
    assert result["history"][1]["kl"] > 0  # the adapters moved the policy away from the reference
    state = trainer.policy.state_dict()
    for name, value in base.items():
        np.testing.assert_array_equal(state[name].numpy(), value, err_msg=name)  # base weights untouched
    assert any(np.abs(p.numpy()).sum() > 0 for n, p in trainer.policy.named_parameters() if "lora_B" in n)

    prompt, _ = build_prompt_batch(rec_samples[:2], trainer.processor, "{Question}")
    with_adapter = _logits(trainer.policy, prompt)
    merged = load_model(result["checkpoint"])  # a plain model folder: from_pretrained loads it as it is
    np.testing.assert_allclose(_logits(merged, prompt), with_adapter, rtol=1e-4, atol=1e-5)
    with adapters_disabled(trainer.policy):
        np.testing.assert_allclose(_logits(trainer.policy, prompt), _logits(load_model(tiny_model_dir), prompt),
                                   rtol=1e-5, atol=1e-6)
    assert not np.allclose(with_adapter, _logits(load_model(tiny_model_dir), prompt), atol=1e-5)


def test_lora_resume_is_exact(tiny_model_dir, rec_samples, tmp_path):
    straight = GRPOTrainer(_config(tiny_model_dir, tmp_path / "a", max_steps=3), samples=rec_samples)
    straight_losses = [h["loss"] for h in straight.train()["history"]]
    first = GRPOTrainer(_config(tiny_model_dir, tmp_path / "b", max_steps=3, save_steps=2), samples=rec_samples)
    first.train()
    import shutil

    shutil.rmtree(tmp_path / "b" / "checkpoint-3")
    resumed = GRPOTrainer(_config(tiny_model_dir, tmp_path / "b", max_steps=3, resume_from_checkpoint="latest"),
                          samples=rec_samples)
    rest = [h["loss"] for h in resumed.train()["history"]]
    np.testing.assert_allclose(rest, straight_losses[2:], rtol=1e-6, atol=1e-7)
    for (name, a), b in zip(straight.policy.named_parameters(), resumed.policy.parameters()):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-6, atol=1e-7, err_msg=name)


def test_merged_state_is_w_plus_ab_scaled(tiny_model_dir):
    model = load_model(tiny_model_dir)
    apply_lora(model, rank=2, alpha=6)
    name, layer = next(iter(lora_layers(model).items()))
    layer.lora_B.set_value(paddle.full(layer.lora_B.shape, 0.5))
    merged = merged_state_dict(model)
    expected = layer.weight.numpy() + (layer.lora_A.numpy() @ layer.lora_B.numpy()) * 3.0
    np.testing.assert_allclose(merged[f"{name}.weight"].numpy(), expected, rtol=1e-6)
    assert not any("lora_" in k for k in merged)


@pytest.mark.parametrize("update", ["sync", "ema"])
def test_with_lora_a_following_reference_updates_its_own_adapters(tiny_model_dir, rec_samples, tmp_path, update):
    """sync_ref_model (TR-DPO) and ref_model_update: ema with LoRA: the reference is the base model plus its own
    adapter values, mixed toward the policy's; no second model. Resumed from a checkpoint, it continues."""
    settings = dict(sync_ref_model=update == "sync", ref_model_update=update, ref_model_sync_steps=1,
                    ref_model_mixup_alpha=0.25, ref_ema_decay=0.75, max_steps=2, save_steps=1)
    trainer = GRPOTrainer(_config(tiny_model_dir, tmp_path / "run", **settings), samples=rec_samples)
    assert trainer.reference is None
    start = {k: v.numpy().copy() for k, v in trainer.reference_adapters.items()}
    trainer.train()
    policy = {k: v.numpy() for k, v in adapter_state(trainer.policy).items()}
    moved = [k for k in start if not np.allclose(policy[k], start[k])]
    assert moved
    resumed = GRPOTrainer(_config(tiny_model_dir, tmp_path / "run", **settings,
                                  resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-2")), samples=rec_samples)
    for key in moved:
        now = trainer.reference_adapters[key].numpy()
        assert not np.allclose(now, start[key]) and not np.allclose(now, policy[key]), key  # between the two
        np.testing.assert_array_equal(resumed.reference_adapters[key].numpy(), now, err_msg=key)


def test_gradient_checkpointing_gives_the_same_step(tiny_model_dir, rec_samples, tmp_path):
    settings = dict(lora=False, beta=0.0, max_steps=1)
    plain = GRPOTrainer(_config(tiny_model_dir, tmp_path / "a", **settings), samples=rec_samples)
    recomputed = GRPOTrainer(_config(tiny_model_dir, tmp_path / "b", gradient_checkpointing=True, **settings),
                             samples=rec_samples)
    assert recomputed.policy.model.language_model.config.recompute_granularity == "full"
    a, b = plain.train()["history"][0], recomputed.train()["history"][0]
    assert b["loss"] == pytest.approx(a["loss"], rel=1e-5, abs=1e-7)
    assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-5)
    # without recompute a prompt's K/V are computed once and shared by its completions, with it each row runs
    # whole: the same sums in another order. Adam's m / sqrt(v) turns that into up to ~7e-5 for near-zero gradients,
    # so weights agree to 1% of one Adam step (lr 2e-2); the gradient norm above agrees to 1e-5
    for (name, x), y in zip(plain.policy.named_parameters(), recomputed.policy.parameters()):
        np.testing.assert_allclose(y.numpy(), x.numpy(), rtol=1e-4, atol=2e-4, err_msg=name)


def test_the_reference_is_weights_only(tiny_model_dir, rec_samples, tmp_path):
    """beta > 0 without LoRA: the reference is a frozen copy of the weights, with no gradients and no optimizer
    state (a weight-sized copy, not an optimizer-sized one)."""
    trainer = GRPOTrainer(_config(tiny_model_dir, tmp_path / "run", lora=False, max_steps=1), samples=rec_samples)
    trainer.train()
    reference = list(trainer.reference.parameters())
    assert reference and all(p.stop_gradient and p.grad is None for p in reference)
    assert not trainer.reference.training
    optimized = {id(p) for p in trainer.optimizer._parameter_list}
    assert not optimized & {id(p) for p in reference}
    state_names = [k for k in trainer.optimizer.state_dict() if k != "LR_Scheduler"]
    reference_names = {p.name for p in reference}
    assert state_names and not [k for k in state_names if any(k.startswith(n + "_") for n in reference_names)]
