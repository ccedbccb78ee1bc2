"""Checkpoints as transformers 5.3 writes them load as transformers runs them, and unreadable rope settings are refused.

transformers 5 spells the rope settings ``text_config.rope_parameters`` and keeps ``tie_word_embeddings`` at the top
of config.json only (``paddle_r1/models/config_spelling.py``). The folders in tests/fixtures/transformers5/ come from
tests/fixtures/make_transformers5_reference.py, run with transformers 5.3.0: the files ``save_pretrained`` wrote
(config, generation config, tokenizer, chat template, image processor) and, for the weights, the digest of every
tensor of the ``model.safetensors`` it wrote, which is rebuilt here from the parity checkpoint and checked byte for
byte. Each is compared with transformers' logits on the parity one-image prompt and its log-probs of two completions.
"""
import hashlib
import json
import os
import shutil

import numpy as np
import paddle
import pytest
from PIL import Image
from safetensors.paddle import load_file, save_file

from paddle_r1.errors import ConfigError
from paddle_r1.generation.rollout import PromptBatch, Rollout
from paddle_r1.models.loading import load_model, load_processor, model_family
from paddle_r1.algorithms.logprobs import completion_logprobs

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
WRITTEN = os.path.join(FIXTURES, "transformers5")
CHECKPOINTS = sorted(os.listdir(WRITTEN))  # paddleocr_vl(_tied), qwen2_5_vl_tied, qwen2_vl, qwen3_vl(_tied)
MAX_REL_ERR = 1e-5


def rebuild_folder(name: str, folder: str) -> str:
    """The folder transformers wrote: its files as kept, and model.safetensors from the parity checkpoint's tensors,
    each checked against the digest of what transformers wrote."""
    os.makedirs(folder)
    for file in os.listdir(os.path.join(WRITTEN, name)):
        if file not in ("weights.json", "reference.npz"):
            shutil.copy(os.path.join(WRITTEN, name, file), folder)
    with open(os.path.join(WRITTEN, name, "weights.json"), encoding="utf-8") as f:
        recorded = json.load(f)
    parity = load_file(os.path.join(FIXTURES, recorded["source"], "model.safetensors"))
    tensors = {key: parity[entry["source"]] for key, entry in recorded["tensors"].items()}
    for key, tensor in tensors.items():
        assert hashlib.sha256(tensor.numpy().tobytes()).hexdigest() == recorded["tensors"][key]["sha256"], key
    save_file(tensors, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    return folder


@pytest.fixture(scope="module", params=CHECKPOINTS)
def written(request, tmp_path_factory):
    name = request.param
    folder = rebuild_folder(name, str(tmp_path_factory.mktemp("transformers5") / name))
    model = load_model(folder)
    model.eval()
    family = model_family(folder)
    inputs = dict(np.load(os.path.join(FIXTURES, "parity", family, "inputs.npz")))
    return name, folder, model, inputs, dict(np.load(os.path.join(WRITTEN, name, "reference.npz")))


def _prompt(inputs) -> PromptBatch:
    return PromptBatch(**{key: paddle.to_tensor(inputs[key])
                          for key in ("input_ids", "attention_mask", "pixel_values", "image_grid_thw")})


def rel_err(got, want) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


def test_rope_settings_and_tie_flag_are_the_files(written):
    name, folder, model, _, _ = written
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    rope = config["text_config"]["rope_parameters"]
    text = getattr(model.config, "text_config", model.config)  # PaddleOCR-VL's config is flat, as published
    assert text.rope_parameters["rope_theta"] == rope["rope_theta"]
    assert list(text.rope_parameters["mrope_section"]) == rope["mrope_section"]
    assert model.config.tie_word_embeddings is config["tie_word_embeddings"] is name.endswith("_tied")


@paddle.no_grad()
def test_logits_match_transformers(written):
    name, _, model, inputs, reference = written
    prompt = _prompt(inputs)
    model.model.rope_deltas = None
    logits = model(input_ids=prompt.input_ids, attention_mask=prompt.attention_mask, pixel_values=prompt.pixel_values,
                   image_grid_thw=prompt.image_grid_thw).logits[0, int(reference["first_image"]):].numpy()
    err = rel_err(logits, reference["logits"])
    print(f"{name}: max relative error of the logits against transformers 5.3.0 {err:.1e}")
    assert err <= MAX_REL_ERR


@paddle.no_grad()
def test_completion_logprobs_match_transformers(written):
    """The training path's log-probs (prompt embedded once, repeated for the two completions)."""
    name, _, model, inputs, reference = written
    completions = paddle.to_tensor(reference["completion_ids"])
    rollout = Rollout(prompt=_prompt(inputs), num_generations=2, completion_ids=completions,
                      completion_mask=paddle.ones(completions.shape, dtype="int32"),
                      truncated=paddle.ones([2], dtype="bool"))
    got = completion_logprobs(model, rollout, chunk_size=4).numpy()
    print(f"{name}: completion log-probs, max difference from transformers 5.3.0 "
          f"{np.abs(got - reference['completion_logprobs']).max():.1e}")
    np.testing.assert_allclose(got, reference["completion_logprobs"], rtol=0, atol=2e-5, err_msg=name)


def test_the_processor_transformers_wrote_makes_the_parity_inputs(written):
    _, folder, _, inputs, _ = written
    image = Image.fromarray(inputs["image"])  # as paddle_r1 opens images (PaddleOCR-VL's processor takes only these)
    got = load_processor(folder)(text=[str(inputs["text"])], images=[image], return_tensors="pd")
    np.testing.assert_array_equal(got["input_ids"].numpy(), inputs["input_ids"])
    np.testing.assert_allclose(got["pixel_values"].numpy(), inputs["pixel_values"], atol=1e-5)


def _text_config_edited(tmp_path, edit) -> str:
    """The qwen3_vl folder's config.json (transformers 5's spelling) alone, its ``text_config`` changed by ``edit``."""
    with open(os.path.join(WRITTEN, "qwen3_vl", "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    edit(config["text_config"])
    (tmp_path / "config.json").write_text(json.dumps(config))
    return str(tmp_path)


def test_both_spellings_read_the_same(tmp_path):
    """The transformers 5 file and the published one of the same checkpoint (the parity fixture) give the same rope
    settings and tie flag."""
    from paddle_r1.models.loading import model_config

    new, published = (model_config(os.path.join(FIXTURES, *parts)) for parts in
                      (("transformers5", "qwen3_vl"), ("parity", "qwen3_vl", "checkpoint")))
    for config in (new, published):
        assert config["text_config"]["rope_theta"] == 5000000.0 and "rope_parameters" not in config["text_config"]
        assert config["text_config"]["rope_scaling"] == {"rope_type": "default", "mrope_section": [2, 3, 3],
                                                         "mrope_interleaved": True}
        assert config["text_config"]["tie_word_embeddings"] is False


@pytest.mark.parametrize("edit, message", [
    (lambda t: t["rope_parameters"].update(rope_type="yarn", factor=4.0), "rope type 'yarn' is not computed"),
    (lambda t: t.update(rope_parameters={"full_attention": t["rope_parameters"]}), "settings per layer type"),
    (lambda t: t["rope_parameters"].update(mrope_section=[2, 3, 2]), r"adds up to 7, not head_dim / 2 = 8"),
    (lambda t: t["rope_parameters"].pop("mrope_section"), "M-RoPE needs mrope_section"),
    (lambda t: t["rope_parameters"].pop("rope_theta"), "no rope theta: neither rope_theta"),
    (lambda t: t.update(rope_theta=1000000.0), r"rope_theta \(1000000.0\) and rope_parameters.rope_theta"),
    (lambda t: t.update(rope_scaling={"rope_type": "default", "mrope_section": [4, 2, 2]}),
     r"rope_parameters.mrope_section \(\[2, 3, 3\]\) and rope_scaling.mrope_section \(\[4, 2, 2\]\) disagree"),
], ids=["other-type", "per-layer", "sections-sum", "no-sections", "no-theta", "two-thetas", "two-spellings-disagree"])
def test_rope_settings_that_cannot_be_read_are_refused_naming_the_key(tmp_path, edit, message):
    folder = _text_config_edited(tmp_path, edit)
    with pytest.raises(ConfigError, match=f"{tmp_path}/config.json: text_config.*{message}"):
        model_family(folder)  # what the trainer, eval and serve check before any model loads


def test_a_flat_published_config_with_another_rope_type_is_refused(tmp_path):
    with open(os.path.join(FIXTURES, "parity", "qwen2_vl", "checkpoint", "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    config["rope_scaling"] = {"type": "dynamic", "factor": 2.0, "mrope_section": [2, 3, 3]}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=f"{tmp_path}/config.json: rope type 'dynamic' is not computed"):
        load_model(str(tmp_path))
