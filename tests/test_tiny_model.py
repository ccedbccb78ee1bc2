import filecmp
import json
import os

import numpy as np
import pytest

from paddle_r1.models.loading import load_model, load_models, model_family
from paddle_r1.testing.tiny import SPECIAL_TOKENS, make_tiny_model


def test_tiny_model_is_deterministic_and_complete(tmp_path, tiny_model_dir):
    again = make_tiny_model(str(tmp_path / "again"))
    other_seed = make_tiny_model(str(tmp_path / "other"), seed=1)
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "preprocessor_config.json", "chat_template.json"):
        assert filecmp.cmp(os.path.join(tiny_model_dir, name), os.path.join(again, name), shallow=False), name
    assert not filecmp.cmp(os.path.join(tiny_model_dir, "model.safetensors"),
                           os.path.join(other_seed, "model.safetensors"), shallow=False)


def test_published_layout(tiny_model_dir):
    from safetensors import safe_open

    config = json.load(open(os.path.join(tiny_model_dir, "config.json")))
    assert config["model_type"] == "qwen2_5_vl" and "text_config" not in config  # flat, as published
    with safe_open(os.path.join(tiny_model_dir, "model.safetensors"), "np") as f:
        keys = set(f.keys())
        assert f.get_tensor("model.layers.0.mlp.gate_proj.weight").shape == (128, 64)  # PyTorch [out, in]
    assert {"visual.blocks.0.attn.qkv.weight", "model.layers.0.self_attn.q_proj.weight", "lm_head.weight"} <= keys


def test_tokenizer_and_chat_template(tiny):
    _, processor = tiny
    tokenizer = processor.tokenizer
    ids = [tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS]
    assert len(set(ids)) == len(SPECIAL_TOKENS) and tokenizer.unk_token_id not in ids
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.padding_side == "left"
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Where is it?"}]}]
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Where is it?<|im_end|>\n"
                         "<|im_start|>assistant\n")
    assert tokenizer.decode(tokenizer("Locate [12, 34] <think>")["input_ids"]) == "Locate [12, 34] <think>"


def test_loaded_weights_equal_the_files(tiny, tiny_model_dir):
    from safetensors import safe_open

    model, _ = tiny
    with safe_open(os.path.join(tiny_model_dir, "model.safetensors"), "np") as f:
        expected = f.get_tensor("model.layers.1.mlp.down_proj.weight")
        head = f.get_tensor("lm_head.weight")
    state = model.state_dict()
    np.testing.assert_array_equal(state["model.language_model.layers.1.mlp.down_proj.weight"].numpy(), expected.T)
    np.testing.assert_array_equal(model.lm_head.weight.numpy().reshape(head.shape), head)


def test_reference_only_when_beta_positive_and_freeze_vision(tiny_model_dir):
    loaded = load_models(tiny_model_dir, beta=0.0)
    assert loaded.reference is None and loaded.family == "qwen2_5_vl"
    loaded = load_models(tiny_model_dir, beta=0.04, freeze_vision=True)
    assert loaded.reference is not None
    assert all(p.stop_gradient for p in loaded.reference.parameters())
    assert all(p.stop_gradient for p in loaded.policy.visual.parameters())
    assert not any(p.stop_gradient for p in loaded.policy.model.language_model.parameters())


def test_bad_model_paths(tmp_path, tiny_model_dir):
    with pytest.raises(FileNotFoundError, match="model folder not found: /nonexistent/model"):
        load_model("/nonexistent/model")
    odd = tmp_path / "odd"
    odd.mkdir()
    (odd / "config.json").write_text(json.dumps({"model_type": "llava"}))
    with pytest.raises(ValueError, match="model_type 'llava' is not supported"):
        model_family(str(odd))
    # the family comes from config.json, whatever the folder is called
    renamed = tmp_path / "my-finetune-final"
    os.symlink(tiny_model_dir, renamed)
    assert model_family(str(renamed)) == "qwen2_5_vl"
