"""The model folders paddle_r1 writes (checkpoints, and exports of them) are the ones transformers was seen loading
without a word beyond what it says for their source folders: same files, same processor outputs, same logits, the
dtype config.json names, the weights training changed.

tests/fixtures/checkpoints/ holds what transformers (4.51.3 for Qwen2-VL and Qwen2.5-VL, 5.3.0 for Qwen3-VL and
PaddleOCR-VL) saw loading the folders of tests/checkpoint_builds.py (made by
tests/fixtures/make_checkpoint_reference.py in its own environment). Here the same folders are built again with
paddle_r1 and compared with it: a file that changed means the goldens describe other files (rebuild them with that
script); a log line transformers printed for a folder and not for its source, a weight it did not place, or a
processor or forward pass that differs from paddle_r1's is a folder the rest of the world reads otherwise.
"""
import json
import os

import numpy as np
import paddle
import pytest

from checkpoint_builds import BUILDS, build, prompt_image
from model_checks import folder_weights
from paddle_r1.models.families import family_of
from paddle_r1.models.loading import load_model, load_processor

GOLDENS = os.path.join(os.path.dirname(__file__), "fixtures", "checkpoints")
MAX_REL_ERR = 1e-5
# transformers computing in bfloat16 against paddle_r1 in float32 on the same bfloat16 weights: bfloat16 keeps 8
# significant bits (a relative step of 2^-8 = 0.4%), and the rounding of every product and sum adds up over the layers
MAX_REL_ERR_BF16 = 2e-2
INPUTS = ("input_ids", "attention_mask", "pixel_values", "image_grid_thw")


@pytest.fixture(scope="module", params=sorted(BUILDS))
def built(request, tmp_path_factory):
    name = request.param
    with open(os.path.join(GOLDENS, f"{name}.json"), encoding="utf-8") as f:
        golden = json.load(f)
    source, folder = build(name, str(tmp_path_factory.mktemp("checkpoints")))
    return name, source, folder, golden, dict(np.load(os.path.join(GOLDENS, f"{name}.npz")))


def test_the_files_transformers_read_are_the_ones_written_now(built):
    from paddle_r1.checkpoints.manifest import sha256_of

    name, _, folder, golden, _ = built
    assert {file: sha256_of(os.path.join(folder, file)) for file in golden["files"]} == golden["files"], \
        f"{name}: rebuild tests/fixtures/checkpoints with tests/fixtures/make_checkpoint_reference.py"


def test_transformers_said_nothing_it_does_not_say_for_the_source(built):
    name, _, _, golden, _ = built
    assert set(golden["logged"]["checkpoint"]) <= set(golden["logged"]["source"]), name
    assert not any(golden["loading_info"].values()), name


def test_transformers_reads_the_sources_generation_config(built):
    _, source, _, golden, _ = built
    with open(os.path.join(source, "generation_config.json"), encoding="utf-8") as f:
        assert golden["generation_config"] == json.load(f)


def test_paddle_r1s_processor_makes_what_transformers_made(built):
    name, _, folder, golden, reference = built
    processor = load_processor(folder)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "x"}]}]
    assert processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == \
        golden["text"].replace("Locate the red square in the image.", "x")
    got = processor(text=[golden["text"]], images=[prompt_image(name)], return_tensors="pd")
    np.testing.assert_array_equal(got["input_ids"].numpy(), reference["input_ids"], err_msg=name)
    np.testing.assert_array_equal(got["image_grid_thw"].numpy(), reference["image_grid_thw"], err_msg=name)
    np.testing.assert_allclose(got["pixel_values"].numpy(), reference["pixel_values"], rtol=0, atol=1e-5,
                               err_msg=name)


def _relative_error(got, want) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


@paddle.no_grad()
def test_paddle_r1s_logits_are_transformers(built):
    """Both in float32 on the folder's weights (bfloat16 ones widened exactly); and where the folder's dtype is not
    float32, transformers' logits computed in it, to that dtype's precision."""
    name, _, folder, _, reference = built
    model = load_model(folder)
    model.eval()
    logits = model(**{key: paddle.to_tensor(reference[key]) for key in INPUTS}).logits[0].numpy()
    err = _relative_error(logits, reference["logits"])
    print(f"{name}: max relative error of the logits against transformers {err:.1e}")
    assert err <= MAX_REL_ERR
    if "auto_logits" in reference:
        err = _relative_error(logits, reference["auto_logits"])
        print(f"{name}: against transformers computing in bfloat16 {err:.1e}")
        assert err <= MAX_REL_ERR_BF16


def test_transformers_loads_the_dtype_config_json_names(built):
    """An export writes its dtype under the key the family's transformers release writes, and nowhere the other
    spelling; transformers' ``dtype="auto"`` loads the weights in it."""
    name, _, folder, golden, _ = built
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    export = BUILDS[name].export
    written = (export or {}).get("dtype", "float32")
    assert golden["auto_dtype"] == written, name
    if export is not None:
        key = family_of(config).dtype_key
        other = "dtype" if key == "torch_dtype" else "torch_dtype"
        assert config[key] == written and other not in config, name
        for settings in (value for value in config.values() if isinstance(value, dict)):  # text_config, ...
            assert settings.get(key) in (None, written) and settings.get(other) is None, name


def test_the_weights_training_changed_are_the_ones_transformers_saw_change(built):
    """A build whose step had non-zero advantages (``checkpoint_builds.TRAINED``) wrote other weights than its
    source's, as many as transformers found changed (it names them its own way: transformers 5 renames PaddleOCR-VL's
    on loading); the others (advantages all zero) wrote the source's. (PaddleOCR-VL's folders add the vision tower's
    packing table, which the published source leaves out: not compared.)"""
    name, source, folder, golden, _ = built
    theirs, ours = folder_weights(source), folder_weights(folder)
    changed = sorted(key for key, value in ours.items() if key in theirs
                     and not np.array_equal(theirs[key].astype(value.dtype).astype("float32").numpy(),
                                            value.astype("float32").numpy()))
    print(f"{name}: {len(changed)} of {len(ours)} weight tensors differ from the source's")
    assert len(changed) == len(golden["weights"]["changed"]), name
    assert bool(changed) == BUILDS[name].trained, name
