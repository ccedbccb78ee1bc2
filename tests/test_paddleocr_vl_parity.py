"""PaddleOCR-VL against transformers 5.3 on checkpoints transformers wrote
(tests/fixtures/make_paddleocr_vl_reference.py; the folders are rebuilt as tests/test_transformers5_checkpoints.py
rebuilds them, which also checks their image prompt's logits, completion log-probs and processor): the text-only
prompt's logits, and negative controls showing that the tolerance catches a real difference: image tokens at text
positions (what transformers 5.3 itself computes without ``mm_token_type_ids``) and paddleformers' default RMSNorm
epsilon (1e-6) in place of the checkpoint's (1e-5)."""
import os

import numpy as np
import paddle
import pytest

from paddle_r1.models.forward import text_decoder
from paddle_r1.models.loading import load_model
from test_transformers5_checkpoints import FIXTURES, MAX_REL_ERR, WRITTEN, rebuild_folder, rel_err

INPUTS = os.path.join(FIXTURES, "parity", "paddleocr_vl")


@pytest.fixture(scope="module", params=["paddleocr_vl", "paddleocr_vl_tied"])
def written(request, tmp_path_factory):
    folder = rebuild_folder(request.param, str(tmp_path_factory.mktemp("transformers5") / request.param))
    model = load_model(folder)
    model.eval()
    return request.param, model


def _logits(model, inputs: dict, **kwargs) -> np.ndarray:
    tensors = {k: paddle.to_tensor(inputs[k]) for k in ("input_ids", "attention_mask", "pixel_values", "image_grid_thw")
               if k in inputs}
    with paddle.no_grad():
        return model(**tensors, **kwargs).logits[0].numpy()


def test_text_only_prompt_logits_match_transformers(written):
    name, model = written
    inputs = dict(np.load(os.path.join(INPUTS, "inputs_text.npz")))
    assert "pixel_values" not in inputs
    err = rel_err(_logits(model, inputs), np.load(os.path.join(WRITTEN, name, "reference_text.npz"))["logits"])
    print(f"{name}: text prompt, max relative error of the logits against transformers 5.3.0 {err:.1e}")
    assert err <= MAX_REL_ERR


def test_the_tolerance_catches_wrong_positions_and_a_wrong_epsilon(written):
    name, model = written
    inputs = dict(np.load(os.path.join(INPUTS, "inputs.npz")))
    reference = np.load(os.path.join(WRITTEN, name, "reference.npz"))
    first_image = int(reference["first_image"])
    length = inputs["input_ids"].shape[1]
    text_positions = paddle.arange(length).reshape([1, 1, length]).expand([3, 1, length])
    errors = {"image tokens at text positions":
              rel_err(_logits(model, inputs, position_ids=text_positions)[first_image:], reference["logits"])}
    norms = [layer.input_layernorm for layer in text_decoder(model).layers]
    try:
        for norm in norms:
            norm.variance_epsilon = 1e-6  # paddleformers' PaddleOCRVLConfig default; the checkpoint says 1e-5
        errors["decoder input norms at epsilon 1e-6"] = rel_err(_logits(model, inputs)[first_image:],
                                                                 reference["logits"])
    finally:
        for norm in norms:
            norm.variance_epsilon = 1e-5
    print(f"{name}: {errors}")
    assert all(err > 10 * MAX_REL_ERR for err in errors.values())
    assert rel_err(_logits(model, inputs)[first_image:], reference["logits"]) <= MAX_REL_ERR
