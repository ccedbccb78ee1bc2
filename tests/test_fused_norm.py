"""The GPU-side configuration of the norms, reproduced on CPU: paddleformers' fused RMSNorm kernel
(``fused_rms_norm_ext``, registered for GPUs only) replaced by its reference, so a model loads as it does on a GPU
(``fuse_rms_norm`` true, paddleformers' own ``RMSNorm`` left in place) and the rollout must still pick and run the
one-token decode step exactly."""
import numpy as np
import paddle
import pytest
from paddleformers.nn import norm as paddleformers_norm
from paddleformers.nn.norm import RMSNorm

from paddle_r1.config.jobs import GRPOConfig
from paddle_r1.generation import decoder as decoders
from paddle_r1.generation.decoder import LayerDecoder, OneTokenDecoder, make_decoder, supports
from paddle_r1.generation.generator import build_prompt_batch
from paddle_r1.generation.rollout import SamplingParams, prefill, sample_completions
from paddle_r1.models.forward import RepeatedPrompt, repeat_rows
from paddle_r1.models.loading import load_model
from paddle_r1.models.rms_norm import FastRMSNorm, fused_norm_runs
from paddle_r1.trainer.grpo import GRPOTrainer


def reference_fused_rms_norm_ext(x, scale, epsilon):
    """What the GPU kernel computes (Paddle's ``fused_rms_norm_ext``): y = x * rsqrt(mean(x^2) + epsilon) * scale
    with the statistics in float32, and the inverse root [rows]."""
    x32 = x.astype("float32")
    invvar = paddle.rsqrt((x32 * x32).mean(-1) + epsilon)
    return (x32 * invvar.unsqueeze(-1) * scale.astype("float32")).astype(x.dtype), invvar


@pytest.fixture
def fused_kernel(monkeypatch):
    monkeypatch.setattr(paddleformers_norm, "fused_rms_norm_ext", reference_fused_rms_norm_ext)


@pytest.fixture
def gpu_side_model(tiny_model_dir, fused_kernel):
    model = load_model(tiny_model_dir)
    model.eval()
    return model


def test_the_probe_asks_the_kernel(fused_kernel, monkeypatch):
    assert fused_norm_runs()
    monkeypatch.undo()  # Paddle's own kernel: not registered on CPU
    assert not fused_norm_runs()


def test_loads_with_the_fused_norm_where_the_kernel_runs(gpu_side_model, tiny):
    """fuse_rms_norm follows the kernel, not the device's name: paddleformers' RMSNorm stays where it runs, and the
    CPU load (``tiny``) takes FastRMSNorm; both compute the same logits."""
    norms = [layer for layer in gpu_side_model.sublayers() if isinstance(layer, RMSNorm)]
    assert norms and all(type(layer) is RMSNorm for layer in norms)
    assert gpu_side_model.config.fuse_rms_norm and gpu_side_model.config.vision_config.fuse_rms_norm
    assert type(tiny[0].model.language_model.norm) is FastRMSNorm
    ids = paddle.to_tensor([[3, 17, 42, 7, 99]])
    with paddle.no_grad():
        np.testing.assert_allclose(gpu_side_model(input_ids=ids).logits.numpy(), tiny[0](input_ids=ids).logits.numpy(),
                                   rtol=1e-5, atol=1e-5)


def test_one_token_decoder_runs_under_the_fused_norm(gpu_side_model, tiny, rec_samples, monkeypatch):
    """``rollout_engine: auto`` picks the one-token step for a model loaded as on a GPU, and its logits equal the
    model's own layers' (which run the fused norm) step by step, over a left-padded prompt batch."""
    model, processor = gpu_side_model, tiny[1]
    assert supports(model)
    prompt, _ = build_prompt_batch(rec_samples[:2], processor, "{Question} Answer with a box.")
    g, steps = 2, 4
    tokens = paddle.to_tensor(np.random.default_rng(0).integers(0, 100, [prompt.size * g, steps]))
    monkeypatch.setattr(decoders, "packed", lambda *args, **kwargs: None)  # the weights as a GPU uses them
    with paddle.no_grad():
        cache, _, next_position = prefill(model, prompt)
        mask, next_position = repeat_rows(prompt.attention_mask, g), repeat_rows(next_position, g)
        chosen = make_decoder(model, RepeatedPrompt(cache, g), mask, next_position, steps, engine="auto")
        layers = LayerDecoder(model, RepeatedPrompt(cache, g), mask, next_position, steps)
        assert type(chosen) is OneTokenDecoder
        for step in range(steps):
            np.testing.assert_allclose(chosen.step(tokens[:, step]).numpy(), layers.step(tokens[:, step]).numpy(),
                                       rtol=1e-5, atol=2e-5)


def test_the_gpu_side_load_samples_the_cpu_loads_completions(gpu_side_model, tiny, rec_samples):
    model, processor = tiny
    prompt, _ = build_prompt_batch(rec_samples[:2], processor, "{Question} Answer with a box.")
    uniforms = paddle.to_tensor(np.random.default_rng(1).random([prompt.size * 3, 12]).astype("float32"))
    eos, pad = [processor.tokenizer.eos_token_id], processor.tokenizer.pad_token_id
    fused, unfused = (sample_completions(m, prompt, 3, SamplingParams(12, temperature=1.0), eos, pad, uniforms=uniforms)
                      for m in (gpu_side_model, model))
    np.testing.assert_array_equal(fused.completion_ids.numpy(), unfused.completion_ids.numpy())


def test_the_trainer_takes_the_one_token_step_under_the_fused_norm(tiny_model_dir, rec_samples, fused_kernel,
                                                                    tmp_path, capsys):
    config = GRPOConfig(model_name_or_path=tiny_model_dir, output_dir=str(tmp_path), num_generations=2,
                        max_completion_length=4, max_steps=1, beta=0.0, use_visualdl=False)
    trainer = GRPOTrainer(config, samples=rec_samples)
    assert type(trainer.policy.model.language_model.norm) is RMSNorm
    assert "rollout engine: one_token\n" in capsys.readouterr().out
