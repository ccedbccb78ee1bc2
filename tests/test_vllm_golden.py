"""``paddle-r1 serve`` answers the checkpoints paddle_r1 writes with vLLM's greedy tokens.

tests/fixtures/vllm_greedy.json holds what ``vllm serve`` (vLLM 0.32.0's CPU build, float32) answered for the
checkpoints ``VLLM_BUILDS`` of tests/checkpoint_builds.py (one per family, Qwen2.5-VL LoRA-merged with and without tied
embeddings), made by tests/fixtures/make_vllm_reference.py in its own environment. Here the same checkpoints are built
again, served by paddle_r1's server on 127.0.0.1 and sent the same request (the build's image and prompt, greedy,
16 tokens, ``return_token_ids``): the prompt's token ids (chat template and image tokens) and the completion's token
ids must be vLLM's.

Random tiny weights can put two tokens' logits close, where float32 rounding in either engine may pick the other
one: the fixture keeps vLLM's two likeliest tokens and their log-probs at every step, paddle_r1's log-probs of the
same tokens must be vLLM's, and the gap between the two must be far above that difference at every step (smallest
gaps 7.8e-4 to 1.1e-2, Qwen2.5-VL tied 0.53; differences 5e-7 to 1.4e-6, PaddleOCR-VL 6.4e-5); a mismatch names
the tokens where the answers first part. The seeds and shapes were chosen so: the untied Qwen2.5-VL's tiny source is
seeded 4, since seed 0's answers one token 16 times. The tied Qwen2.5-VL repeats the prompt's last token; the other
answers vary.
"""
import hashlib
import http.client
import json
import os
import shutil
import threading

import numpy as np
import paddle
import pytest

from checkpoint_builds import PROMPT, VLLM_BUILDS, build, chat_request, prompt_image
from paddle_r1.checkpoints.manifest import write_manifest
from paddle_r1.serve.limits import ServeLimits
from paddle_r1.serve.server import build_server

GOLDEN = os.path.join(os.path.dirname(__file__), "fixtures", "vllm_greedy.json")
with open(GOLDEN, encoding="utf-8") as f:
    VLLM = json.load(f)
# PaddleOCR-VL's image is resized, and vLLM's processor (transformers' torchvision backend) resizes otherwise than
# paddle_r1's (PIL): pixels differ by up to 0.008 (2/255), log-probs by 6.4e-5. The Qwen images are of a size their
# processors keep, and the log-probs agree to 1.4e-6.
LOGPROB_ATOL = 1e-4
NEAR_TIE = 100  # a step whose two likeliest tokens are closer than this many times the engines' difference


@paddle.no_grad()
def paddle_logprobs(generator, name: str, golden: dict) -> np.ndarray:
    """paddle_r1's log-probs [step, 2] of the two tokens vLLM found likeliest at each step of its completion, from one
    forward over the prompt and the completion (teacher-forced)."""
    processor = generator.processor
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": PROMPT}]}]
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    pixels = processor(text=[text], images=[prompt_image(name)], return_tensors="pd")
    ids = paddle.to_tensor([golden["prompt_token_ids"] + golden["token_ids"][:-1]], dtype="int64")
    logits = generator.model(input_ids=ids, attention_mask=paddle.ones_like(ids), pixel_values=pixels["pixel_values"],
                             image_grid_thw=pixels["image_grid_thw"]).logits[0]
    logp = paddle.nn.functional.log_softmax(logits.astype("float32"), axis=-1).numpy()
    steps = logp[len(golden["prompt_token_ids"]) - 1:]
    return np.take_along_axis(steps, np.array([[first[0], second[0]] for first, second in golden["top2_logprobs"]]), 1)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """The model folder of a build by its name, built on first use."""
    root, made = str(tmp_path_factory.mktemp("vllm_checkpoints")), {}

    def checkpoint(name: str) -> str:
        if name not in made:
            made[name] = build(name, root)[1]
        return made[name]

    return checkpoint


@pytest.fixture(scope="module", params=sorted(VLLM["builds"]))
def served(request, checkpoints):
    """(build name, vLLM's answer, paddle-r1 serve's answer to the same request, paddle_r1's log-probs of vLLM's
    top-2 tokens per step)."""
    name = request.param
    golden = VLLM["builds"][name]
    checkpoint = checkpoints(name)
    server, answer = serve_and_ask(checkpoint, name, chat_request(name, name, VLLM["max_tokens"]))
    return name, golden, answer, paddle_logprobs(server.engine.generator, name, golden)


def serve_and_ask(checkpoint: str, name: str, request: dict) -> tuple:
    """paddle-r1 serve on ``checkpoint`` (served as ``name``) asked ``request`` once: (the stopped server, its
    answer)."""
    server = build_server(checkpoint, port=0, model_name=name,
                          limits=ServeLimits(max_tokens=VLLM["max_tokens"], max_prompt_tokens=1024))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        connection = http.client.HTTPConnection(*server.server_address[:2], timeout=120)
        connection.request("POST", "/v1/chat/completions", json.dumps(request), {"Content-Type": "application/json"})
        reply = connection.getresponse()
        assert reply.status == 200, reply.read()
        return server, json.load(reply)
    finally:
        server.shutdown()
        server.server_close()


def test_every_family_was_served_by_vllm():
    families = {VLLM_BUILDS[name].family for name in VLLM["builds"]}
    assert families == {"qwen2_vl", "qwen2_5_vl", "qwen3_vl", "paddleocr_vl"} and not VLLM["failed"]
    assert set(VLLM["builds"]) == set(VLLM_BUILDS), "rebuild tests/fixtures/vllm_greedy.json"


def test_the_prompt_is_vllms(served):
    name, golden, answer, _ = served
    assert hashlib.sha256(prompt_image(name).tobytes()).hexdigest() == golden["image_sha256"], name
    assert answer["prompt_token_ids"] == golden["prompt_token_ids"], name


def test_the_greedy_tokens_are_vllms(served):
    name, golden, answer, _ = served
    got, expected = answer["choices"][0]["token_ids"], golden["token_ids"]
    parted = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), None)
    assert got == expected, (f"{name}: paddle-r1 serve {got}, vLLM {expected}; first differ at step {parted}, where "
                             f"vLLM's two likeliest tokens are {golden['top2_logprobs'][parted or 0]}")
    assert answer["choices"][0]["finish_reason"] == golden["finish_reason"] == "length"
    assert answer["usage"]["completion_tokens"] == len(expected)


def test_the_text_is_vllms(served):
    """The same tokens decoded: vLLM holds back the bytes of a character the last token leaves unfinished, paddle-r1
    shows them as U+FFFD."""
    name, golden, answer, _ = served
    assert answer["choices"][0]["message"]["content"].rstrip("\ufffd") == golden["text"], name


def test_the_log_probs_are_vllms_and_no_step_is_a_near_tie(served):
    """paddle_r1's log-probs of vLLM's two likeliest tokens at each step are vLLM's to LOGPROB_ATOL, and at every step
    the two are further apart than NEAR_TIE times the largest difference between the engines: the greedy tokens
    agree because the engines compute the same numbers, not by luck at a near-tie."""
    name, golden, _, logprobs = served
    vllm_logprobs = np.array([[first[1], second[1]] for first, second in golden["top2_logprobs"]])
    difference = float(np.abs(logprobs - vllm_logprobs).max())
    gap = float((vllm_logprobs[:, 0] - vllm_logprobs[:, 1]).min())
    print(f"{name}: log-probs differ from vLLM's by at most {difference:.1e}; smallest top-2 gap {gap:.1e}")
    assert difference <= LOGPROB_ATOL, name
    assert gap > NEAR_TIE * difference, name


def test_the_checkpoints_generation_config_sets_the_defaults_as_in_vllm(checkpoints, tmp_path):
    """A request with no sampling setting takes the checkpoint's generation_config.json values in vLLM's server
    (``--generation-config auto``, its default): the fixture's build served with a repetition penalty, top_k 1 and a
    temperature in that file answers with vLLM's tokens, which the penalty makes differ from its plain greedy ones."""
    golden = VLLM["generation_defaults"]
    name = golden["build"]
    checkpoint = str(tmp_path / "checkpoint")
    shutil.copytree(checkpoints(name), checkpoint)
    path = os.path.join(checkpoint, "generation_config.json")
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    with open(path, "w", encoding="utf-8") as f:
        json.dump({**config, **golden["generation_config"]}, f)
    write_manifest(checkpoint)  # the edit is meant: the checkpoint's manifest records the file as it is now
    request = {k: v for k, v in chat_request(name, name, VLLM["max_tokens"]).items() if k != "temperature"}
    _, answer = serve_and_ask(checkpoint, name, request)
    assert answer["prompt_token_ids"] == golden["prompt_token_ids"]
    assert answer["choices"][0]["token_ids"] == golden["token_ids"] != VLLM["builds"][name]["token_ids"]
