"""The checkpoints paddle_r1 writes are the ones transformers was seen loading without a word beyond what it says for
their source folders: same files, same processor outputs, same logits.

tests/fixtures/checkpoints/ holds what transformers (4.51.3 for Qwen2-VL and Qwen2.5-VL, 5.3.0 for Qwen3-VL and
PaddleOCR-VL) saw loading the checkpoints of tests/checkpoint_builds.py (made by
tests/fixtures/make_checkpoint_reference.py in its own environment). Here the same checkpoints are built again with
paddle_r1 and compared with it: a file that changed means the goldens describe other files (rebuild them with that
script); a log line transformers printed for a checkpoint and not for its source, a weight it did not place, or a
processor or forward pass that differs from paddle_r1's is a checkpoint the rest of the world reads otherwise.
"""
import json
import os

import numpy as np
import paddle
import pytest

from checkpoint_builds import BUILDS, build, prompt_image
from paddle_r1.models.loading import load_model, load_processor

GOLDENS = os.path.join(os.path.dirname(__file__), "fixtures", "checkpoints")
MAX_REL_ERR = 1e-5


@pytest.fixture(scope="module", params=sorted(BUILDS))
def built(request, tmp_path_factory):
    name = request.param
    with open(os.path.join(GOLDENS, f"{name}.json"), encoding="utf-8") as f:
        golden = json.load(f)
    source, checkpoint = build(name, str(tmp_path_factory.mktemp("checkpoints")))
    return name, source, checkpoint, golden, dict(np.load(os.path.join(GOLDENS, f"{name}.npz")))


def test_the_files_transformers_read_are_the_ones_written_now(built):
    from paddle_r1.checkpoints.manifest import sha256_of

    name, _, checkpoint, golden, _ = built
    assert {file: sha256_of(os.path.join(checkpoint, file)) for file in golden["files"]} == golden["files"], \
        f"{name}: rebuild tests/fixtures/checkpoints with tests/fixtures/make_checkpoint_reference.py"


def test_transformers_said_nothing_it_does_not_say_for_the_source(built):
    name, _, _, golden, _ = built
    assert golden["logged"]["checkpoint"] == golden["logged"]["source"], name
    assert not any(golden["loading_info"].values()), name


def test_transformers_reads_the_sources_generation_config(built):
    _, source, _, golden, _ = built
    with open(os.path.join(source, "generation_config.json"), encoding="utf-8") as f:
        assert golden["generation_config"] == json.load(f)


def test_paddle_r1s_processor_makes_what_transformers_made(built):
    name, _, checkpoint, golden, reference = built
    processor = load_processor(checkpoint)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "x"}]}]
    assert processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == \
        golden["text"].replace("Locate the red square in the image.", "x")
    got = processor(text=[golden["text"]], images=[prompt_image(name)], return_tensors="pd")
    np.testing.assert_array_equal(got["input_ids"].numpy(), reference["input_ids"], err_msg=name)
    np.testing.assert_array_equal(got["image_grid_thw"].numpy(), reference["image_grid_thw"], err_msg=name)
    np.testing.assert_allclose(got["pixel_values"].numpy(), reference["pixel_values"], rtol=0, atol=1e-5,
                               err_msg=name)


@paddle.no_grad()
def test_paddle_r1s_logits_are_transformers(built):
    name, _, checkpoint, _, reference = built
    model = load_model(checkpoint)
    model.eval()
    logits = model(**{key: paddle.to_tensor(reference[key])
                      for key in ("input_ids", "attention_mask", "pixel_values", "image_grid_thw")}).logits[0].numpy()
    err = float(np.abs(logits - reference["logits"]).max() / np.abs(reference["logits"]).max())
    print(f"{name}: max relative error of the logits against transformers {err:.1e}")
    assert err <= MAX_REL_ERR
