"""SFT: the targets and their loss mask, by hand; the loss goes down; the saved folder is what GRPO trains."""
import json
import os

import numpy as np
import paddle
import pytest
from PIL import Image

from paddle_r1.config.jobs import GRPOConfig, SFTConfig
from paddle_r1.errors import ConfigError
from paddle_r1.config.reading.loading import load_config
from paddle_r1.models.loading import load_model
from paddle_r1.algorithms.logprobs import completion_logprobs
from paddle_r1.trainer.sft import SFTTrainer, answer_for, build_sft_batch, sft_loss

from test_cli import paddle_r1


@pytest.fixture(scope="module")
def two_samples(tmp_path_factory):
    """A REC sample on a 224x112 image (the tiny processor resizes it to 140x56) and a counting sample."""
    root = tmp_path_factory.mktemp("sft_samples")
    Image.new("RGB", (224, 112), (200, 30, 30)).save(root / "wide.png")
    Image.new("RGB", (56, 56), (30, 30, 200)).save(root / "small.png")
    return [{"images": [str(root / "wide.png")], "problem": "Locate the red square.", "solution": [32, 10, 120, 60],
             "reward_method": None},
            {"images": [str(root / "small.png")], "problem": "How many shapes are there?", "solution": 3,
             "reward_method": "counting"}]


def _weights(model):
    return {k: v.numpy().copy() for k, v in model.state_dict().items()}


def test_answers_in_the_models_terms():
    # Qwen2.5-VL answers in pixels of the resized input; Qwen2-VL in 0-1000 units
    assert answer_for([32, 10, 120, 60], "abs_resized", (224, 112), (140, 56)) == "[20, 5, 75, 30]"
    assert answer_for([32, 10, 120, 60], "rel_1000", (224, 112)) == "[143, 89, 536, 536]"
    assert answer_for(3, "abs_resized") == "3" and answer_for("B", "abs_resized") == "B"
    # labelled boxes (multi-box grounding) are converted box by box; an empty label stays empty
    groups = {"0": [[32, 10, 120, 60]], "1": []}
    assert json.loads(answer_for(groups, "abs_resized", (224, 112), (140, 56))) == {"0": [[20, 5, 75, 30]], "1": []}
    assert json.loads(answer_for(groups, "rel_1000", (224, 112))) == {"0": [[143, 89, 536, 536]], "1": []}
    from paddle_r1.rewards import get_reward

    target = "<think> </think><answer>" + answer_for(groups, "abs_resized", (224, 112), (140, 56)) + "</answer>"
    score = get_reward("multi_iou")([target], solution=[groups], image_sizes=[[(224, 112)]],
                                    input_sizes=[[(140, 56)]], coord_system=["abs_resized"])[0]
    assert score > 0.9  # the reward reads the SFT target back to the solution (up to rounding)


def test_loss_mask_covers_only_answer_tokens(tiny, two_samples):
    model, processor = tiny
    config = SFTConfig(model_name_or_path="unused", question_template="{Question}")
    batch, texts = build_sft_batch(two_samples, processor, config, "abs_resized")
    assert texts == ["<think> </think><answer>[20, 5, 75, 30]</answer>", "<think> </think><answer>3</answer>"]

    tokenizer = processor.tokenizer
    ids, mask = batch.completion_ids.numpy(), batch.completion_mask.numpy()
    for row, text in enumerate(texts):
        expected = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        n = len(expected)
        # the masked tokens are exactly the answer and its end-of-turn token; everything after is padding
        assert ids[row, :n].tolist() == expected and mask[row, :n].tolist() == [1] * n
        assert mask[row, n:].sum() == 0 and (ids[row, n:] == tokenizer.pad_token_id).all()
        assert tokenizer.decode(ids[row, :n].tolist()) == text + "<|im_end|>"
    assert mask.sum(axis=1).tolist() == [len(tokenizer(t, add_special_tokens=False)["input_ids"]) + 1 for t in texts]
    # the prompt is the chat up to the assistant's turn, and none of it is a target
    prompts = tokenizer.batch_decode(batch.prompt.input_ids.numpy().tolist())
    assert all(p.rstrip().endswith("<|im_start|>assistant") for p in prompts)
    assert "[20, 5, 75, 30]" not in prompts[0]

    # the loss is the mean negative log-likelihood over exactly those tokens: padding does not count
    with paddle.no_grad():
        loss = float(sft_loss(completion_logprobs(model, batch, 5, 1.0), batch.completion_mask))
        logp = completion_logprobs(model, batch, 1024).numpy()
    np.testing.assert_allclose(loss, -(logp * mask).sum() / mask.sum(), rtol=1e-5)
    short = int(np.argmin(mask.sum(axis=1)))
    changed = batch.completion_ids.numpy()
    changed[short, -1] = 7  # a padding position of the shorter row
    batch.completion_ids = paddle.to_tensor(changed)
    with paddle.no_grad():
        changed_loss = float(sft_loss(completion_logprobs(model, batch, 5, 1.0), batch.completion_mask))
        np.testing.assert_allclose(changed_loss, loss, rtol=1e-6)


def test_loss_goes_down_on_a_repeated_batch(tiny_model_dir, two_samples, tmp_path):
    trainer = SFTTrainer(SFTConfig(model_name_or_path=tiny_model_dir, output_dir=str(tmp_path), learning_rate=3e-3,
                                   per_device_train_batch_size=2, use_visualdl=False, disable_tqdm=True, max_steps=20),
                         samples=two_samples)
    trainer.sampler.next_batch = lambda: [0, 1]  # the same batch every step
    losses = [trainer.training_step()["loss"] for _ in range(12)]
    assert losses[-1] < 0.5 * losses[0], losses


def test_saved_folder_loads_and_is_what_grpo_trains(tiny_model_dir, rec_samples, tmp_path):
    from paddle_r1.trainer.grpo import GRPOTrainer

    sft = SFTTrainer(SFTConfig(model_name_or_path=tiny_model_dir, output_dir=str(tmp_path / "sft"), max_steps=2,
                               per_device_train_batch_size=2, learning_rate=1e-3, use_visualdl=False,
                               disable_tqdm=True), samples=rec_samples)
    before = _weights(sft.policy)
    result = sft.train()
    trained = _weights(sft.policy)
    assert any(not np.array_equal(before[k], trained[k]) for k in before)
    assert result["checkpoint"] == str(tmp_path / "sft" / "checkpoint-2")
    assert json.load(open(os.path.join(result["checkpoint"], "trainer_state.json")))["job"] == "sft"
    assert [json.loads(line)["step"] for line in open(tmp_path / "sft" / "metrics.jsonl")] == [1, 2]

    grpo = GRPOTrainer(GRPOConfig(model_name_or_path=result["checkpoint"], output_dir=str(tmp_path / "grpo"),
                                  reward_funcs=["format"], num_generations=2, max_completion_length=4, max_steps=1,
                                  beta=0.04, use_visualdl=False, disable_tqdm=True), samples=rec_samples)
    for name, weights in (("policy", _weights(grpo.policy)), ("reference", _weights(grpo.reference)),
                          ("reloaded", _weights(load_model(result["checkpoint"])))):
        for key, value in trained.items():
            np.testing.assert_array_equal(weights[key], value, err_msg=f"{name}: {key}")
    grpo.train()


def test_lora_with_gradient_checkpointing_trains_adapters_and_saves_the_merged_model(tiny_model_dir, two_samples,
                                                                                     tmp_path):
    from paddle_r1.models.lora import merged_state_dict

    base = _weights(load_model(tiny_model_dir))
    trainer = SFTTrainer(SFTConfig(model_name_or_path=tiny_model_dir, output_dir=str(tmp_path), learning_rate=1e-2,
                                   lora=True, lora_rank=4, lora_alpha=8, gradient_checkpointing=True, max_steps=30,
                                   per_device_train_batch_size=2,
                                   max_grad_norm=0.0, use_visualdl=False, disable_tqdm=True), samples=two_samples)
    assert all("lora_" in n for n, p in trainer.policy.named_parameters() if not p.stop_gradient)
    trainer.sampler.next_batch = lambda: [0, 1]
    result = trainer.train()
    losses = [h["loss"] for h in result["history"]]
    assert losses[-1] < 0.9 * losses[0], losses  # adapters start at zero: a slow but steady drop
    merged = {k: v.numpy() for k, v in merged_state_dict(trainer.policy).items()}
    reloaded = _weights(load_model(result["checkpoint"]))
    assert os.path.isfile(os.path.join(result["checkpoint"], "adapter", "adapter.safetensors"))
    changed = [k for k in base if not np.allclose(reloaded[k], base[k])]
    assert changed and all("language_model.layers" in k for k in changed)  # only adapted projections moved
    for key, value in merged.items():
        np.testing.assert_allclose(reloaded[key], value, rtol=1e-5, atol=1e-6, err_msg=key)


def test_config_keys(tmp_path):
    path = tmp_path / "sft.yaml"
    path.write_text("model_name_or_path: m\nlearning_rate: 1e-4\nnum_generations: 4\n")
    with pytest.raises(ConfigError, match="unknown config key\\(s\\) 'num_generations'"):
        load_config(SFTConfig, str(path))
    path.write_text("model_name_or_path: m\nlearning_rate: 1e-4\n")  # 1e-4 is a string to plain YAML 1.1
    config = load_config(SFTConfig, str(path), ["--max_steps", "3", "--weight_decay", "1e-2"])
    assert (config.learning_rate, config.max_steps, config.weight_decay) == (1e-4, 3, 0.01)
    with pytest.raises(ConfigError, match="answer_template"):
        SFTConfig(answer_template="<answer></answer>")
    shared = {"model_name_or_path", "data_path", "dataset_name", "image_root", "question_template", "learning_rate",
              "per_device_train_batch_size", "max_steps", "output_dir", "seed", "coord_system"}
    assert shared <= set(SFTConfig.__dataclass_fields__) & set(GRPOConfig.__dataclass_fields__)


def test_sft_command_line(tmp_path, tiny_model_dir, rec_jsonl):
    config = tmp_path / "sft.yaml"
    config.write_text(f"model_name_or_path: {tiny_model_dir}\ndata_path: {rec_jsonl}\nuse_visualdl: false\n")
    out = tmp_path / "sft"
    result = paddle_r1("sft", "--config", str(config), "--output_dir", str(out), "--max_steps", "1",
                       "--learning_rate", "1e-4", "--per_device_train_batch_size", "2")
    assert result.returncode == 0, result.stderr
    assert f"model folder {out}/checkpoint-1" in result.stdout
    assert json.load(open(out / "checkpoint-1" / "trainer_state.json"))["config"]["learning_rate"] == 1e-4
    config.write_text(f"model_name_or_path: {tiny_model_dir}\ndata_path: {rec_jsonl}\nbeta: 0.1\n")
    result = paddle_r1("sft", "--config", str(config))
    assert result.returncode == 2 and "unknown config key(s) 'beta'" in result.stderr
