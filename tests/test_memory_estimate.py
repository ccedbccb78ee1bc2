"""Memory preflight (issue 20): parameter counts from config.json alone, the per-GPU table, the keys it
suggests, the CLI, and AdamW state created before the first step."""
import json
import os
from dataclasses import replace

import numpy as np
import paddle
import pytest

from paddle_r1.cli import main
from paddle_r1.config import GRPOConfig
from paddle_r1.memory import (ModelShape, allocate_optimizer_state, check_fits, count_parameters, estimate,
                              read_model_config)
from paddle_r1.models.loading import load_model
from paddle_r1.models.published import PUBLISHED_CONFIGS
from paddle_r1.testing.tiny import make_tiny_model

QWEN25_7B, QWEN25_3B = "Qwen/Qwen2.5-VL-7B-Instruct", "Qwen/Qwen2.5-VL-3B-Instruct"


def _numel(layer):
    return sum(int(p.numel()) for p in layer.parameters())


@pytest.mark.parametrize("family, tied", [("qwen2_5_vl", False), ("qwen2_5_vl", True), ("qwen2_vl", False)])
def test_parameter_count_from_config_equals_the_built_model(family, tied, tmp_path):
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
    from paddle_r1.models.loading import model_class, model_config
    from paddle_r1.models.lora import apply_lora

    folder = make_tiny_model(str(tmp_path / "ocr"), family="paddleocr_vl")
    config = json.load(open(os.path.join(folder, "config.json")))
    json.dump({**config, "tie_word_embeddings": tied, "num_attention_heads": 2, "head_dim": 48,
               "num_key_value_heads": 1, "rope_scaling": {**config["rope_scaling"], "mrope_section": [6, 9, 9]}},
              open(os.path.join(folder, "config.json"), "w"))
    cls = model_class("paddleocr_vl")
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
    stage1, stage2 = _rows(estimate(_config(sharding="stage1"), 8, 80)), _rows(estimate(_config(sharding="stage2"), 8, 80))
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
    assert _rows(estimate(_config(max_pixels=4 * 1003520), 8, 80))["rollout KV cache"] > plain["rollout KV cache"]
    assert "1280 image tokens" in estimate(_config(), 8, 80).table()
    # PaddleMIX's 2 completions per device of a group of 8 (the rest on 3 other GPUs): 2 sequences, a quarter of 8's
    quarter = estimate(_config(per_device_train_batch_size=2), 8, 80)
    assert "2 sequences x" in quarter.table()
    assert _rows(quarter)["rollout KV cache"] == pytest.approx(plain["rollout KV cache"] / 4)


def test_episodes_count_their_turns_and_tool_images():
    """With tools, a completion is an episode of max_turns turns and max_turns - 1 tool images (crop's one each), and
    the log-prob passes take every row's images through the vision tower."""
    plain, episodes = estimate(_config(), 8, 80), estimate(_config(tools=["crop"], max_turns=3), 8, 80)
    single, multi = _rows(plain), _rows(episodes)
    prompt = 128 + 1280  # text + the image's 1280 tokens at max_pixels 1003520
    episode = 3 * 1024 + 2 * (32 + 1280)
    assert multi["rollout KV cache"] == pytest.approx(single["rollout KV cache"] * (prompt + episode) / (prompt + 1024))
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
    import paddle.distributed as dist
    from optimizer_state_worker import allocate_and_report

    dist.spawn(allocate_and_report, args=(str(tmp_path / "report"),), nprocs=2, backend="gloo")
    reports = [json.load(open(tmp_path / f"report.{rank}")) for rank in (0, 1)]
    assert sum(r["owned"] for r in reports) == 4 * (16 * 16 + 16)  # the two shares make the whole model
    for report in reports:
        assert 0 < report["owned"] < 4 * (16 * 16 + 16)
        assert report["allocated"] == report["owned"] * 8 + report["tensors"] * 2 * 4  # fp32 m, v; two beta powers
