"""LoRA: each family's default targets, and the save of a bfloat16 model with an untied lm_head (merged on the host in
the model's dtype)."""
import json
import os
import struct

import numpy as np
import paddle
import pytest

from paddle_r1.models.families import FAMILIES
from paddle_r1.models.loading import load_model
from paddle_r1.models.lora import apply_lora, lora_layers, save_merged
from paddle_r1.testing.tiny import make_tiny_model


@pytest.mark.parametrize("model_type", FAMILIES)
def test_default_targets_are_every_projection_of_the_text_decoder(model_type, tmp_path, capfd, caplog):
    """Without ``lora_target_modules`` the family's ``lora_targets`` adapt every linear layer of its text decoder's
    layers (fused or not, as paddleformers builds that family) and nothing else: not the vision tower, its merger,
    nor the LM head. The adapters go on without paddleformers' notice about the tensor-parallel size."""
    family = FAMILIES[model_type]
    model = load_model(make_tiny_model(str(tmp_path / model_type), family=model_type))
    layers = ".".join(family.text_decoder_at) + ".layers."
    projections = {name for name, layer in model.named_sublayers()
                   if isinstance(layer, paddle.nn.Linear) and name.startswith(layers)}
    capfd.readouterr()
    caplog.clear()
    apply_lora(model, rank=2, alpha=4)
    assert projections and set(lora_layers(model)) == projections
    printed = capfd.readouterr()
    logged = [record.getMessage() for record in caplog.records]
    assert not [text for text in [printed.out, printed.err, *logged] if "tensor_model_parallel_size" in text], logged


def _safetensors_dtypes(folder):
    dtypes = set()
    for name in os.listdir(folder):
        if name.endswith(".safetensors"):
            with open(os.path.join(folder, name), "rb") as f:
                header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
            dtypes |= {v["dtype"] for k, v in header.items() if k != "__metadata__"}
    return dtypes


def _as_float32(tensor):
    return tensor.cpu().astype("float32").numpy()


def test_untied_bfloat16_model_saves_merged_weights_in_bfloat16(tiny_model_dir, tmp_path):
    model = load_model(tiny_model_dir, dtype="bfloat16")
    assert not model.config.tie_word_embeddings
    apply_lora(model, rank=2, alpha=4)
    for layer in lora_layers(model).values():
        layer.lora_B.set_value(paddle.full(layer.lora_B.shape, 0.25, dtype=layer.lora_B.dtype))
    before = {name: _as_float32(t) for name, t in model.state_dict().items()}

    save_merged(model, str(tmp_path))

    assert _safetensors_dtypes(str(tmp_path)) == {"BF16"}
    saved = {name: t.numpy() for name, t in load_model(str(tmp_path)).state_dict().items()}
    assert {n for n in before if "lora_" not in n} == set(saved)
    for name, layer in lora_layers(model).items():
        exact = before[f"{name}.weight"] + before[f"{name}.lora_A"] @ before[f"{name}.lora_B"] * layer.scaling
        rounded = paddle.to_tensor(exact).astype("bfloat16").astype("float32").numpy()
        np.testing.assert_allclose(saved[f"{name}.weight"], rounded, rtol=2.0**-7, err_msg=name)
        assert not np.array_equal(saved[f"{name}.weight"], before[f"{name}.weight"])
    for name in ("lm_head.weight", "model.language_model.embed_tokens.weight"):  # the untied head kept as itself
        np.testing.assert_array_equal(saved[name], before[name])
    for name, tensor in model.state_dict().items():  # the policy is untouched
        np.testing.assert_array_equal(_as_float32(tensor), before[name], err_msg=name)
