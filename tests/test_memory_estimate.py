"""Memory preflight: parameter counts from config.json alone, the per-GPU table, the keys it
suggests, the CLI, and AdamW state created before the first step."""
import json
import os

import numpy as np
import paddle
import pytest

from paddle_r1.cli import main
from paddle_r1.config.jobs import GRPOConfig
from paddle_r1.memory import ModelShape, check_fits, count_parameters, estimate, read_model_config
from paddle_r1.models.loading import load_model
from paddle_r1.parallel.optimizer_state import allocate_optimizer_state
from paddle_r1.models.published import PUBLISHED_CONFIGS
from paddle_r1.testing.tiny import TinySize, make_tiny_model

QWEN25_7B, QWEN25_3B = "Qwen/Qwen2.5-VL-7B-Instruct", "Qwen/Qwen2.5-VL-3B-Instruct"


def _numel(layer):
    return sum(int(p.numel()) for p in layer.parameters())


@pytest.mark.parametrize("family, tied", [("qwen2_5_vl", False), ("qwen2_5_vl", True), ("qwen2_vl", False),
                                          ("qwen3_vl", False)])
def test_parameter_count_from_config_equals_the_built_model(family, tied, tmp_path):
    """Each Qwen-VL family's tower in its own layout (Qwen3-VL's: LayerNorm blocks, a position table, DeepStack
    mergers; its decoder's q/k norms and no q/k/v biases); PaddleOCR-VL's below."""
    folder = make_tiny_model(str(tmp_path / family), family=family)
    config = json.load(open(os.path.join(folder, "config.json")))
    if tied:
        config["tie_word_embeddings"] = True
        json.dump(config, open(os.path.join(folder, "config.json"), "w"))
    model = load_model(folder)
    counts = count_parameters(ModelShape.from_config(read_model_config(folder)))
    assert counts.total == _numel(model)
    assert counts.vision == _numel(model.model.visual)


@pytest.mark.parametrize("tied", [False, True])
def test_paddleocr_vl_parameter_and_adapter_counts_equal_the_built_model(tied, tmp_path):
    """ERNIE-4.5's heads wider than hidden / heads (the published 16 x 128 for hidden 1024), no biases, unfused
    projections; the SigLIP tower with its position table and the merger beside it. The model is built from the
    config (no weights)."""
    from paddle_r1.memory import lora_parameters
    from paddle_r1.models.families import PADDLEOCR_VL
    from paddle_r1.models.loading import model_config
    from paddle_r1.models.lora import apply_lora

    folder = make_tiny_model(str(tmp_path / "ocr"), family="paddleocr_vl")
    config = json.load(open(os.path.join(folder, "config.json")))
    json.dump({**config, "tie_word_embeddings": tied, "num_attention_heads": 2, "head_dim": 48,
               "num_key_value_heads": 1, "rope_scaling": {**config["rope_scaling"], "mrope_section": [6, 9, 9]}},
              open(os.path.join(folder, "config.json"), "w"))
    cls = PADDLEOCR_VL.model_class.load()
    built = cls.config_class.from_dict(model_config(folder))
    built.fuse_rms_norm = built.vision_config.fuse_rms_norm = False
    model = cls(built)
    shape = ModelShape.from_config(read_model_config(folder))
    counts = count_parameters(shape)
    assert shape.q_dim == 96 != shape.hidden
    assert counts.total == _numel(model) and counts.vision == _numel(model.visual) + _numel(model.mlp_AR)
    apply_lora(model, rank=4, alpha=8)
    assert lora_parameters(shape, 4) == sum(int(p.numel()) for name, p in model.named_parameters() if "lora_" in name)


@pytest.mark.parametrize("hub_id, billions", [(QWEN25_3B, 3.75), (QWEN25_7B, 8.29),
                                              ("Qwen/Qwen2-VL-2B-Instruct", 2.21), ("Qwen/Qwen2-VL-7B-Instruct", 8.29),
                                              ("PaddlePaddle/PaddleOCR-VL", 0.91)])
def test_parameter_count_of_the_published_checkpoints(hub_id, billions):
    assert round(count_parameters(ModelShape.from_config(PUBLISHED_CONFIGS[hub_id])).total / 1e9, 2) == billions


def _config(**keys):
    base = dict(model_name_or_path=QWEN25_7B, dtype="bfloat16", freeze_vision=True, gradient_checkpointing=True,
                max_pixels=1003520, max_completion_length=1024, num_generations=8, beta=0.04)
    return GRPOConfig(**{**base, **keys})


def _rows(result):
    return {name.strip(): gib for name, gib, _ in result.rows}


def test_the_table_follows_the_memory_options():
    plain = _rows(estimate(_config(), 8, 80))
    params, trainable = 8.292e9, 8.292e9 - 0.6766e9
    assert plain["weights (policy)"] == plain["reference model"] == pytest.approx(params * 2 / 2**30, rel=1e-3)
    assert plain["gradients"] == pytest.approx(trainable * 2 / 2**30, rel=1e-3)
    assert plain["AdamW state"] == pytest.approx(trainable * 12 / 2**30, rel=1e-3)  # fp32 m, v, master weight
    stage1, stage2 = (_rows(estimate(_config(sharding=stage), 8, 80)) for stage in ("stage1", "stage2"))
    assert stage1["AdamW state"] == pytest.approx(plain["AdamW state"] / 8)
    assert stage1["gradients"] == plain["gradients"] and stage2["gradients"] == pytest.approx(plain["gradients"] / 8)
    assert _rows(estimate(_config(sharding="stage1"), 1, 80))["AdamW state"] == plain["AdamW state"]
    assert _rows(estimate(_config(beta=0.0), 8, 80))["reference model"] == 0
    lora = _rows(estimate(_config(lora=True), 8, 80))
    assert lora["reference model"] == 0 and lora["AdamW state"] < 0.01 * plain["AdamW state"]
    eager = _rows(estimate(_config(attn_implementation="eager"), 8, 80))
    assert plain["train attention scores"] == plain["rollout prefill attention"] == 0  # sdpa: no [L, L] matrix
    assert eager["train attention scores"] > 0 and eager["rollout prefill attention"] > 0
    assert _rows(estimate(_config(gradient_checkpointing=False), 8, 80))["train activations"] > \
        4 * plain["train activations"]
    assert _rows(estimate(_config(freeze_vision=False), 8, 80))["vision tower"] > plain["vision tower"]
    bigger_images = _rows(estimate(_config(max_pixels=4 * 1003520), 8, 80))
    assert bigger_images["rollout KV cache (peak)"] > plain["rollout KV cache (peak)"]
    assert "1280 image tokens" in estimate(_config(), 8, 80).table()
    # PaddleMIX's 2 completions per device of a group of 8 (the rest on 3 other GPUs): 2 sequences, a quarter of 8's
    quarter = estimate(_config(per_device_train_batch_size=2), 8, 80)
    assert "2 sequences x" in quarter.table()
    assert _rows(quarter)["decode buffers"] == pytest.approx(plain["decode buffers"] / 4)


def test_episodes_count_their_turns_and_tool_images():
    """With tools, a completion is an episode of max_turns turns and max_turns - 1 tool images (crop's one each), and
    the log-prob passes take every row's images through the vision tower."""
    plain, episodes = estimate(_config(), 8, 80), estimate(_config(tools=["crop"], max_turns=3), 8, 80)
    single, multi = _rows(plain), _rows(episodes)
    prompt = 128 + 1280  # text + the image's 1280 tokens at max_pixels 1003520
    episode = 3 * 1024 + 2 * (32 + 1280)
    assert multi["decode buffers"] == pytest.approx(single["decode buffers"] * (prompt + episode) / (prompt + 1024))
    assert f"{prompt + episode} tokens" in episodes.table() and "episodes of 3 turns, 2 tool images" in episodes.table()
    assert multi["vision tower"] > 2 * single["vision tower"]


def test_fit_and_the_keys_it_suggests():
    too_big = estimate(_config(), 8, 80)  # the old 7B command without sharding
    assert not too_big.fits and too_big.total_gib > 130
    assert too_big.suggestions == [("sharding", "stage1")]
    assert estimate(_config(sharding="stage1"), 8, 80).fits
    one_gpu = estimate(_config(), 1, 40)
    assert one_gpu.suggestions == [("lora", "true")]  # sharding is no help on one GPU
    assert estimate(_config(lora=True), 1, 40).fits
    hopeless = estimate(_config(max_pixels=12845056 * 4, gradient_checkpointing=False), 1, 40)
    assert hopeless.suggestions[-1][1] == "lower" and "--gradient_checkpointing true" in hopeless.table()


def test_cli_prints_the_table_and_exits_1_when_it_does_not_fit(capsys, tmp_path):
    argv = ["estimate-memory", "--config", os.path.join(os.path.dirname(__file__), "..", "configs", "grpo_rec.yaml"),
            "--model_name_or_path", QWEN25_7B, "--gpus", "8", "--gpu_memory", "80"]
    assert main(argv) == 1
    assert "does NOT fit" in capsys.readouterr().out
    assert main(argv + ["--sharding", "stage1"]) == 0
    assert "fits in 80 GiB x 8 GPU(s)" in capsys.readouterr().out
    assert main(argv + ["--model_name_or_path", str(tmp_path / "missing")]) == 2
    assert "model folder not found" in capsys.readouterr().err


def test_no_preflight_on_cpu():
    assert check_fits(_config(), 8) is None


def _train(early: bool):
    paddle.seed(0)
    net = paddle.nn.Sequential(paddle.nn.Linear(8, 16), paddle.nn.Linear(16, 4))
    net[0].bias.stop_gradient = True
    optimizer = paddle.optimizer.AdamW(learning_rate=0.1, parameters=net.parameters(), weight_decay=0.01)
    allocated = allocate_optimizer_state(optimizer) if early else None
    for _ in range(3):
        net(paddle.randn([5, 8])).square().mean().backward()
        optimizer.step()
        optimizer.clear_grad()
    return allocated, [p.numpy() for p in net.parameters()]


def test_optimizer_state_made_before_the_first_step_changes_nothing():
    allocated, early = _train(early=True)
    _, lazy = _train(early=False)
    trainable = 8 * 16 + 16 * 4 + 4  # the frozen bias gets no state
    assert allocated == trainable * 8 + 3 * 2 * 4  # fp32 m and v, and two beta powers per weight
    for a, b in zip(early, lazy):
        np.testing.assert_array_equal(a, b)


def test_bfloat16_weights_get_float32_master_weights_early():
    net = paddle.nn.Linear(8, 16)
    net.to(dtype="bfloat16")
    optimizer = paddle.optimizer.AdamW(learning_rate=0.1, parameters=net.parameters(), multi_precision=True)
    assert allocate_optimizer_state(optimizer) == (8 * 16 + 16) * 12 + 2 * 2 * 4
    assert allocate_optimizer_state(optimizer) == 0  # the first step will not create them again


def test_stage1_ranks_create_only_their_share(tmp_path):
    from forked_ranks import spawn_ranks
    from optimizer_state_worker import allocate_and_report

    spawn_ranks(allocate_and_report, args=(str(tmp_path / "report"),))
    reports = [json.load(open(tmp_path / f"report.{rank}")) for rank in (0, 1)]
    assert sum(r["owned"] for r in reports) == 4 * (16 * 16 + 16)  # the two shares make the whole model
    for report in reports:
        assert 0 < report["owned"] < 4 * (16 * 16 + 16)
        assert report["allocated"] == report["owned"] * 8 + report["tensors"] * 2 * 4  # fp32 m, v; two beta powers


@pytest.mark.parametrize("engine", ["one_token", "layers"])
def test_the_rollout_kv_estimate_bounds_a_real_rollout(engine, tmp_path, rec_samples):
    """The KV cache's copies that coexist (the prefill's cache, its rows repeated per completion, the decode buffers,
    the growing cache's last growth) against the host allocator's peak over a real rollout of a tiny 8-layer model on
    CPU (its KV cache is most of the rollout's memory): the estimate is at least the peak minus 10%, at most 10% over
    it, and counting the buffers once would be far below."""
    from paddle.base import core

    from paddle_r1.generation.generator import build_prompt_batch
    from paddle_r1.generation.rollout import SamplingParams, sample_completions
    from paddle_r1.memory import rollout_kv_parts
    from paddle_r1.models.loading import load_processor

    folder = make_tiny_model(str(tmp_path / "model"), size=TinySize(num_hidden_layers=8))
    model, processor = load_model(folder), load_processor(folder)
    prompt, _ = build_prompt_batch(rec_samples[:2], processor, "{Question} Answer with a box.")
    generations, new_tokens = 4, 300  # the one-token decoder's cache grows twice
    before = core.host_memory_stat_current_value("Allocated", 0)
    core.host_memory_stat_reset_peak_value("Allocated", 0)
    rollout = sample_completions(model, prompt, generations, SamplingParams(max_new_tokens=new_tokens, temperature=0.0,
                                                                            engine=engine), [10**6], 0)  # no EOS
    measured = core.host_memory_stat_peak_value("Allocated", 0) - before
    assert rollout.completion_ids.shape == [8, new_tokens]
    parts = rollout_kv_parts(ModelShape.from_config(read_model_config(folder)), 2, generations,
                             prompt.input_ids.shape[1], new_tokens, 4, growing=engine == "one_token")
    assert 0.9 * measured <= parts["peak"] <= 1.1 * measured, (measured, parts)
    assert parts["decode buffers"] < 0.85 * measured  # the cache counted once
    assert (parts["growth copy"] > 0) == (engine == "one_token")


@pytest.mark.parametrize("lora", [False, True])
def test_the_guard_copy_in_the_estimate_equals_the_snapshot_buffers(lora, tiny_model_dir, rec_samples, tmp_path):
    """The host bytes ``estimate-memory`` shows for the update guard equal the buffers ``StepSnapshot`` allocates for
    the trainer's real optimizer (weights, AdamW moments, beta powers), full fine-tune or LoRA."""
    from paddle_r1.memory import undo_copy_bytes
    from paddle_r1.trainer.grpo import GRPOTrainer

    config = GRPOConfig(model_name_or_path=tiny_model_dir, output_dir=str(tmp_path), num_generations=2,
                        per_device_train_batch_size=2, max_completion_length=4, max_steps=1, use_visualdl=False,
                        disable_tqdm=True, beta=0.0, lora=lora, freeze_vision=lora)
    trainer = GRPOTrainer(config, samples=rec_samples)
    trainer.update.snapshot.take()
    copied = sum(int(b.numel()) * b.element_size() for b in trainer.update.snapshot.buffers.values())
    betas = 2 * 4 * len(trainer.update.parameters)  # two float32 beta powers per weight: not in the estimate
    assert undo_copy_bytes(config, ModelShape.from_config(read_model_config(tiny_model_dir)), 1) == copied - betas
    row = estimate(config, 1, 80, read_model_config(tiny_model_dir)).host_rows[0]
    assert row[0] == "update guard copy" and row[1] * 2**30 == pytest.approx(copied - betas)


def test_host_memory_is_checked_and_names_the_key():
    """The guard's copy of a 7B full fine-tune: auto takes none (over the budget), so 8 ranks need only the checkpoint
    being loaded; asked for with true it is 99 GiB a rank, which a 512 GiB machine refuses, naming the key; a
    machine that only holds the checkpoints gets a warning."""
    from paddle_r1.errors import ConfigError
    from paddle_r1.memory import UNDO_COPY_BUDGET_GIB, check_host

    auto = estimate(_config(), 8, 80, host_memory_gib=512)
    copy, loading = auto.host_rows
    assert copy[1] == 0 and "over the 8 GiB budget" in copy[2] and auto.host_fits
    assert loading[1] == pytest.approx(8.292e9 * 2 / 2**30, rel=1e-3)
    forced = estimate(_config(undo_non_finite_updates=True), 8, 80, host_memory_gib=512)
    assert forced.host_gib == pytest.approx(7.616e9 * 14 / 2**30, rel=1e-3) and not forced.host_fits
    with pytest.raises(ConfigError, match="undo_non_finite_updates: auto"):
        check_host(forced, _config(undo_non_finite_updates=True))
    assert "update guard copy" in forced.table() and "does NOT fit in 512 GiB of RAM" in forced.table()
    small = estimate(_config(), 8, 80, host_memory_gib=64)
    assert "checkpoint is read by every rank" in check_host(small, _config())
    sharded = _config(sharding="stage1", lora=True)  # LoRA's adapters: well within the budget, kept
    assert 0 < estimate(sharded, 8, 80).host_rows[0][1] < UNDO_COPY_BUDGET_GIB
    assert estimate(_config(undo_non_finite_updates=False, lora=True), 8, 80).host_rows[0][1] == 0


def test_without_flash_attention_the_estimate_counts_the_math_path():
    """Before sm80 (V100, T4) sdpa has no flash attention: the math path's score matrices and the K/V copied to every
    query head (Qwen2.5-VL-7B: 28 query heads over 4 KV heads) are counted."""
    flash, math_path = _rows(estimate(_config(), 8, 80)), _rows(estimate(_config(), 8, 80, flash_attention=False))
    assert flash["train attention scores"] == flash["rollout K/V expanded to heads"] == 0
    sequences, length, heads = 8, 128 + 1280 + 1024, 28
    assert math_path["train attention scores"] * 2**30 == pytest.approx(2 * sequences * heads * length**2 * 2)
    assert math_path["rollout K/V expanded to heads"] * 2**30 == pytest.approx(sequences * length * 2 * 3584 * 2)
    assert math_path["train activations"] > flash["train activations"]  # the expanded K/V kept for backward
    assert math_path["rollout prefill attention"] > 0
