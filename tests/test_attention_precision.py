"""Attention kernel and precision choice: fused attention equals eager on CPU, and the decision
table that picks dtype / attention / loss scaling from a GPU's compute capability."""
import numpy as np
import paddle
import pytest
from paddle.amp.auto_cast import amp_state

from paddle_r1.errors import ConfigError
from paddle_r1.generation.generator import build_prompt_batch
from paddle_r1.generation.rollout import SamplingParams, sample_completions
from paddle_r1.models.loading import load_model, load_processor
from paddle_r1.models.precision import choose_precision
from paddle_r1.testing.tiny import make_tiny_model
from paddle_r1.algorithms.logprobs import completion_logprobs


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen2_vl"])
def test_sdpa_and_eager_attention_give_the_same_logprobs_and_gradients(family, rec_samples, tmp_path, monkeypatch):
    folder = make_tiny_model(str(tmp_path / family), family=family)
    processor = load_processor(folder)
    prompt, _ = build_prompt_batch(rec_samples[:2], processor, "{Question}")
    assert bool((prompt.attention_mask == 0).any())  # left padding: the masked path, not only the causal one
    eager, sdpa = load_model(folder, attn_implementation="eager"), load_model(folder, attn_implementation="sdpa")
    for config in (sdpa.config, sdpa.config.text_config, sdpa.config.vision_config):
        assert config._attn_implementation == "sdpa"
    paddle.seed(3)
    with paddle.no_grad():
        rollout = sample_completions(eager, prompt, 3, SamplingParams(8, temperature=1.0),
                                     [processor.tokenizer.eos_token_id], processor.tokenizer.pad_token_id)

    calls = []
    fused = paddle.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(paddle.nn.functional, "scaled_dot_product_attention",
                        lambda *a, **k: calls.append(a[0].shape) or fused(*a, **k))
    results = {}
    for name, model in (("eager", eager), ("sdpa", sdpa)):
        calls.clear()
        logp = completion_logprobs(model, rollout, chunk_size=7)
        (logp * rollout.completion_mask.astype(logp.dtype)).sum().backward()
        grads = {n: p.grad.numpy() for n, p in model.named_parameters() if p.grad is not None}
        results[name] = (logp.numpy(), grads, len(calls))
    assert results["eager"][2] == 0
    # every decoder layer twice (the prompts once, then the completions over their shared K/V), and every vision
    # block once per image
    assert results["sdpa"][2] == 2 * sdpa.config.text_config.num_hidden_layers + 2 * sdpa.config.vision_config.depth
    np.testing.assert_allclose(results["sdpa"][0], results["eager"][0], rtol=1e-5, atol=1e-5)
    assert results["sdpa"][1].keys() == results["eager"][1].keys()
    for name, grad in results["eager"][1].items():
        np.testing.assert_allclose(results["sdpa"][1][name], grad, rtol=1e-4, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("requested, capability, expected", [
    ("float32", None, ("float32", "eager", False, None)),           # CPU: no fused kernel, eager is exact and faster
    ("bfloat16", None, ("bfloat16", "eager", False, None)),
    ("bfloat16", (9, 0), ("bfloat16", "sdpa", False, None)),        # H100
    ("bfloat16", (8, 0), ("bfloat16", "sdpa", False, None)),        # A100
    ("bfloat16", (7, 0), ("float32", "sdpa", True, "float16")),     # V100 (AI Studio): no native bf16, Paddle's O1
    ("bfloat16", (7, 5), ("float32", "sdpa", True, "float16")),     # T4
    ("bfloat16", (6, 0), ("float32", "sdpa", False, None)),         # P100: no fp16 tensor cores either
    ("float16", (8, 6), ("float32", "sdpa", True, "float16")),      # float16 asked for: the same O1 recipe
    ("float32", (7, 0), ("float32", "sdpa", False, None)),
])
def test_precision_decision_table(requested, capability, expected):
    choice = choose_precision(requested, capability)
    assert (choice.dtype, choice.attention, choice.grad_scaler, choice.autocast) == expected
    assert choice.reason  # said at start-up
    assert (choice.make_grad_scaler() is not None) == choice.grad_scaler
    with choice.compute():
        state = amp_state()
    assert (state is not None) == (choice.autocast is not None)
    if state is not None:
        assert (state["dtype"], state["level"]) == ("float16", "O1")


def test_attention_from_the_config_wins_and_is_checked():
    assert choose_precision("bfloat16", (8, 0), "eager").attention == "eager"
    assert choose_precision("float32", None, "sdpa").attention == "sdpa"
    with pytest.raises(ConfigError, match="attn_implementation"):
        choose_precision("float32", None, "flash")


def test_float16_training_runs_every_forward_under_auto_cast(tiny_model_dir, rec_samples, tmp_path, monkeypatch):
    """A V100's decision (float32 weights, float16 O1 auto_cast, a loss scaler) reaches every forward of a GRPO
    step: the rollout, the old log-probs and the training forward all run the LM head inside Paddle's auto_cast,
    and the update goes through the scaler. On CPU auto_cast casts nothing, so this shows where the context is
    entered, not float16 numbers (those run in ``paddle-r1 selftest`` on the GPU)."""
    from paddle.amp.auto_cast import amp_state

    from paddle_r1.config.jobs import GRPOConfig
    from paddle_r1.trainer import base
    from paddle_r1.trainer.grpo import GRPOTrainer

    v100 = choose_precision("bfloat16", (7, 0), "eager")
    monkeypatch.setattr(base, "precision_for_this_device", lambda dtype, attention: v100)
    config = GRPOConfig(model_name_or_path=tiny_model_dir, output_dir=str(tmp_path), num_generations=2,
                        per_device_train_batch_size=2, max_completion_length=4, max_steps=1, num_iterations=2,
                        beta=0.0, use_visualdl=False, disable_tqdm=True)
    trainer = GRPOTrainer(config, samples=rec_samples)
    assert trainer.config.dtype == "float32" and trainer.scaler is not None
    states = []
    trainer.policy.lm_head.register_forward_pre_hook(lambda layer, inputs: states.append(amp_state()))
    trainer.train()
    assert len(states) >= 3  # the rollout's steps, the old log-probs (num_iterations 2), the training forward
    assert all(state is not None and (state["dtype"], state["level"]) == ("float16", "O1") for state in states)
    assert amp_state() is None


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_16_bit_training_on_cpu_is_refused_before_the_model_loads(tiny_model_dir, rec_samples, tmp_path, dtype,
                                                                  monkeypatch):
    """It used to load the model and then fail at the first rollout: ``kernel conv3d ... bfloat16 is not
    registered``."""
    from paddle_r1.config.jobs import GRPOConfig
    from paddle_r1.trainer import base
    from paddle_r1.trainer.grpo import GRPOTrainer

    loads = []
    monkeypatch.setattr(base.Trainer, "load_models", lambda self: loads.append(self))
    config = GRPOConfig(model_name_or_path=tiny_model_dir, output_dir=str(tmp_path), dtype=dtype, num_generations=2,
                        max_completion_length=4, max_steps=1, beta=0.0, use_visualdl=False)
    with pytest.raises(ConfigError, match=f"config key 'dtype': {dtype} does not run on a CPU.*use dtype float32"):
        GRPOTrainer(config, samples=rec_samples)
    assert not loads
