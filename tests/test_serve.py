"""``paddle-r1 serve``: a real server on 127.0.0.1 with the tiny checkpoint, driven by the real ``openai`` client
and by raw HTTP for the requests the client would refuse to send."""
import base64
import http.client
import io
import json
import logging
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from PIL import Image

openai = pytest.importorskip("openai", reason="the openai client is in the test extra: pip install -e .[test]")

from paddle_r1.generation.generator import Generator  # noqa: E402
from paddle_r1.generation.rollout import SamplingParams  # noqa: E402
from paddle_r1.rewards.families.judge import LLMJudge  # noqa: E402
from paddle_r1.serve.limits import ServeLimits  # noqa: E402
from paddle_r1.serve.server import build_server  # noqa: E402

LIMITS = ServeLimits(max_image_pixels=300 * 300, max_tokens=16, max_request_bytes=1 << 20, max_concurrency=8,
                     read_timeout=2.0, max_prompt_tokens=1024)


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    srv = build_server(tiny_model_dir, port=0, model_name="tiny", limits=LIMITS)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture(scope="module")
def client(server):
    host, port = server.server_address[:2]
    return openai.OpenAI(base_url=f"http://{host}:{port}/v1", api_key="unused", max_retries=0, timeout=120)


def data_url(path: str) -> str:
    with open(path, "rb") as f:
        return "data:image/png;base64," + base64.b64encode(f.read()).decode()


def image_message(sample) -> list:
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url(sample["images"][0])}},
                                         {"type": "text", "text": sample["problem"]}]}]


def test_greedy_reply_is_the_rollouts_greedy_completion(client, tiny, rec_samples):
    model, processor = tiny
    sample = rec_samples[0]
    expected = Generator(model, processor, "abs_resized").generate(
        [sample], 1, SamplingParams(max_new_tokens=12, temperature=0.0), "{Question}").texts[0]
    reply = client.chat.completions.create(model="tiny", messages=image_message(sample), temperature=0, max_tokens=12)
    assert reply.choices[0].message.content == expected
    assert reply.choices[0].finish_reason in ("stop", "length") and reply.usage.prompt_tokens > 0
    assert [m.id for m in client.models.list().data] == ["tiny"]
    # streamed: the same text in chat.completion.chunk events
    chunks = client.chat.completions.create(model="tiny", messages=image_message(sample), temperature=0,
                                            max_tokens=12, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == expected


def test_token_ids_on_request_as_vllm_returns_them(client, tiny, rec_samples):
    """``return_token_ids`` (vLLM's extension): the prompt's ids as the processor makes them (image tokens
    expanded), each choice's generated ids, which decode to its text; streamed, the prompt's ids come in the first
    chunk and the completion's with its text. Not asked: neither."""
    _, processor = tiny
    sample = rec_samples[0]
    template = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": sample["problem"]}]}]
    text = processor.apply_chat_template(template, tokenize=False, add_generation_prompt=True)
    with Image.open(sample["images"][0]) as image:
        expected = processor(text=[text], images=[image.convert("RGB")], return_tensors="pd")["input_ids"][0].tolist()
    ask = dict(model="tiny", messages=image_message(sample), temperature=0, max_tokens=8)
    reply = client.chat.completions.create(**ask, extra_body={"return_token_ids": True})
    assert reply.model_extra["prompt_token_ids"] == expected and reply.usage.prompt_tokens == len(expected)
    ids = reply.choices[0].model_extra["token_ids"]
    assert len(ids) == reply.usage.completion_tokens > 0
    assert processor.tokenizer.decode(ids, skip_special_tokens=True) == reply.choices[0].message.content
    chunks = list(client.chat.completions.create(**ask, stream=True, extra_body={"return_token_ids": True}))
    assert chunks[0].model_extra["prompt_token_ids"] == expected
    assert [i for c in chunks for i in c.choices[0].model_extra["token_ids"]] == ids
    plain = client.chat.completions.create(**ask)
    assert "prompt_token_ids" not in plain.model_extra and "token_ids" not in plain.choices[0].model_extra


def test_concurrent_requests_share_a_batch(client, server):
    prompts = [f"How many objects are there {i}?" for i in range(4)]
    before = server.engine.batches

    def ask(text):
        return client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": text}],
                                              temperature=0, max_tokens=6)
    with ThreadPoolExecutor(4) as pool:
        replies = list(pool.map(ask, prompts))
    assert all(len(r.choices) == 1 for r in replies)
    assert server.engine.batches - before < len(prompts)  # some requests were decoded together
    sampled = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "count"}], n=3,
                                             temperature=1.0, top_p=0.9, max_tokens=5, stop=["]"])
    assert len(sampled.choices) == 3 and all("]" not in c.message.content for c in sampled.choices)


def test_a_seed_fixes_a_sampled_answer_whatever_it_is_batched_with(client, server):
    """OpenAI's and vLLM's ``seed``: the same seeded request gets the same sampled completions, alone or decoded in
    one batch with other requests; another seed other ones."""
    def ask(text, seed=None):
        reply = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": text}], n=2,
                                               temperature=1.0, max_tokens=10, seed=seed)
        return [choice.message.content for choice in reply.choices]

    alone = ask("count the shapes", seed=7)
    assert ask("count the shapes", seed=7) == alone and alone[0] != alone[1]
    before = server.engine.batches
    with ThreadPoolExecutor(4) as pool:
        batched = list(pool.map(lambda args: ask(*args), [("count the shapes", 7), ("other", None),
                                                          ("and another", 3), ("count the shapes", 7)]))
    assert server.engine.batches - before < 4  # some were decoded together
    assert batched[0] == batched[3] == alone
    assert ask("count the shapes", seed=8) != alone


def post(server, body: bytes, path="/v1/chat/completions"):
    conn = http.client.HTTPConnection(*server.server_address[:2], timeout=60)
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    status, reply = response.status, json.loads(response.read())
    conn.close()
    return status, reply["error"]["message"]


def chat(**fields) -> bytes:
    return json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], **fields}).encode()


def png_url(size) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", size, (200, 10, 10)).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def with_image(url: str) -> bytes:
    return json.dumps({"model": "tiny", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "what?"}]}]}).encode()


@pytest.mark.parametrize("body, status, message", [
    (b'{"model": "tiny", "messages": [', 400, "not valid JSON"),
    (chat(model="gpt-4o"), 404, "model 'gpt-4o' not found"),
    (with_image(png_url((400, 400))), 413, "over this server's limit of 90000 pixels"),
    (with_image("https://example.com/cat.png"), 400, "not fetched"),
    (with_image("/etc/passwd"), 403, "local image paths are not allowed"),
    (with_image("data:image/png;base64,AAAA"), 400, "not a readable image"),
    (chat(max_tokens=10_000), 400, "'max_tokens' must be between 1 and 16"),
    (chat(temperature="hot"), 400, "'temperature' must be a number"),
    (chat(return_token_ids="yes"), 400, "'return_token_ids' must be true or false"),
    (chat(frequency_penalty=0.5), 400, "'frequency_penalty' is not supported by this server; leave it out (or 0.0)"),
    (chat(logprobs=True, top_logprobs=2), 400, "'logprobs' is not supported by this server"),
    (chat(seed=-1), 400, "'seed' must be between 0 and"),
    (chat(messages=[{"role": "wizard", "content": "x"}]), 400, "needs a role"),
    (b"[1, 2]", 400, "must be a JSON object"),
    (b" " * (2 << 20), 413, "over this server's limit"),
], ids=["malformed-json", "unknown-model", "oversize-image", "http-url", "local-path", "bad-image", "max-tokens",
        "temperature", "return-token-ids", "frequency-penalty", "logprobs", "seed", "role", "not-object",
        "oversize-body"])
def test_bad_requests_get_4xx_and_the_server_lives_on(server, client, body, status, message):
    got_status, got_message = post(server, body)
    assert got_status == status and message in got_message, got_message
    assert client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "ok"}],
                                          max_tokens=2, frequency_penalty=0, presence_penalty=0.0).choices


def test_the_openai_client_sees_4xx_as_its_errors(client):
    with pytest.raises(openai.NotFoundError, match="not found"):
        client.chat.completions.create(model="other", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError, match="max_tokens"):
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x"}], max_tokens=99)


def test_llm_judge_pointed_at_the_server(server, caplog):
    host, port = server.server_address[:2]
    judge = LLMJudge(base_url=f"http://{host}:{port}/v1", model="tiny", timeout=60, max_retries=0)
    counts = {}
    judge.report = lambda key, n: counts.__setitem__(key, counts.get(key, 0) + n)
    scores = judge(["<answer>a red square</answer>", "<answer>blue</answer>", "<answer>Blue.</answer>"],
                   solution=["a green circle", "blue", "blue"], problem=["what?", "colour?", "colour?"])
    assert scores[1] == scores[2] == 1.0  # exact matches are settled without a request
    # the one request was answered: a verdict, or (a tiny random model's reply holding none) the exact-match
    # fallback, which scores "a red square" against "a green circle" 0
    assert counts["requests"] == 1 and counts.get("failures", 0) == counts.get("fallbacks", 0) <= 1
    assert scores[0] in (0.0, 1.0) and (scores[0] == 0.0 or not counts.get("fallbacks"))
    # and it was answered over HTTP: the only warning a judge may give here is about the reply's content
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert all("unparseable reply" in w or "no 0/1" in w for w in warnings), warnings


# ---- what a client sends is bounded: slow bodies, long prompts, hang-ups (real sockets on 127.0.0.1) ----------
HEADERS = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: 1000\r\n\r\n")


def _reply(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    sock.settimeout(60)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def _ask(client, text="ok"):
    return client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": text}], max_tokens=2)


def test_slow_clients_hold_no_slot_and_are_cut_off(server, client):
    """More clients than slots send headers and half a body and stay: they used to hold every slot, and every
    valid request got 429 for as long as they stayed. Bodies are now read before a slot is taken, within
    read_timeout of the first byte, however slowly they trickle."""
    address = server.server_address[:2]
    stalled = [socket.create_connection(address) for _ in range(LIMITS.max_concurrency + 2)]
    for sock in stalled:
        sock.sendall(HEADERS + b"{" * 500)
    trickling = socket.create_connection(address)
    trickling.sendall(HEADERS)
    cut_off = threading.Event()

    def trickle():  # a byte every 0.2 s: each read is quick, only a deadline on the whole request stops it
        try:
            while not cut_off.wait(0.2):
                trickling.sendall(b" ")
        except OSError:
            pass

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    for _ in range(3):
        assert _ask(client).choices  # 200 while they hang on (the openai client raises on 429)
    for sock in [*stalled, trickling]:
        reply = _reply(sock)
        assert reply.startswith(b"HTTP/1.1 408") and b"did not arrive within this server's 2 s" in reply, reply[:200]
        sock.close()
    cut_off.set()
    thread.join()
    assert _ask(client).choices


def test_a_long_prompt_gets_400_naming_the_limit(client, server, tiny_model_dir, rec_samples):
    """A 16,000-character prompt (8,020 tokens on the tiny model) used to be generated from, for 13.8 s and 3.2 GB."""
    with pytest.raises(openai.BadRequestError, match=r"the prompt is \d+ tokens \(text, images, videos\), over this "
                                                     r"server's limit of 1024 \(--max_prompt_tokens\)"):
        _ask(client, "word " * 3200)
    assert _ask(client).choices
    # the count is the one the model sees, images included: a prompt of exactly the limit passes, one more is refused
    from paddle_r1.serve.chat import PromptMeter, parse_chat_request

    body = json.dumps({"model": "tiny", "messages": image_message(rec_samples[0]), "max_tokens": 2}).encode()
    served = client.chat.completions.create(model="tiny", messages=image_message(rec_samples[0]), max_tokens=2)
    tokens = served.usage.prompt_tokens
    meter, request = PromptMeter(server.engine.generator.processor, tokens), parse_chat_request(body, "tiny", LIMITS)
    assert meter.image_tokens(request.images[0]) > 1  # the image's tokens are counted, not just its placeholder
    meter.check(request)
    with pytest.raises(Exception, match=f"the prompt is {tokens} tokens .* limit of {tokens - 1} "):
        PromptMeter(server.engine.generator.processor, tokens - 1).check(parse_chat_request(body, "tiny", LIMITS))


def test_a_client_that_hangs_up_is_one_line_in_the_log(server, client, caplog, capfd):
    """Clients that disconnect before their reply used to leave a BrokenPipeError traceback each (103 in one load
    run), and a 'request failed' traceback as if generation had failed."""
    caplog.set_level(logging.INFO, logger="paddle_r1.serve.server")
    address = server.server_address[:2]
    body = chat(max_tokens=8)
    for request in (HEADERS.replace(b"1000", str(len(body)).encode()) + body, HEADERS + b"{"):  # whole, half a body
        for _ in range(2):
            sock = socket.create_connection(address)
            sock.sendall(request)
            if request.endswith(b"{"):
                sock.shutdown(socket.SHUT_WR)  # the body ends early: the server answers 400 to a closed socket
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()  # a reset: the reply cannot be written

    def hung_up_lines() -> list:
        return [r for r in caplog.records if "hung up" in r.getMessage()]

    for _ in range(600):  # the two whole requests are answered after generating, long after their reset arrived:
        if len(hung_up_lines()) >= 2:  # those writes fail; a half body's 400 may be written before its reset lands
            break
        time.sleep(0.1)
    time.sleep(1.0)  # the half bodies' lines, if theirs failed too
    hung_up = hung_up_lines()
    assert 2 <= len(hung_up) <= 4, [r.getMessage() for r in caplog.records]
    assert all(r.exc_info is None and r.getMessage().startswith("127.0.0.1: client hung up (") for r in hung_up)
    assert not [r for r in caplog.records if r.exc_info]
    assert "Traceback" not in capfd.readouterr().err
    assert _ask(client).choices


def test_the_default_prompt_bound_follows_the_context_and_the_memory(tiny_model_dir):
    """``--max_prompt_tokens`` unset: the model's context less max_tokens, and what a full batch of such prompts
    fits in half the free memory (eager attention's L x L scores make that shorter than with sdpa)."""
    from paddle_r1.serve.limits import default_max_prompt_tokens

    config = json.load(open(f"{tiny_model_dir}/config.json"))
    limits = ServeLimits(max_tokens=16)
    assert default_max_prompt_tokens(config, "float32", True, limits, 1 << 50) == \
        config["max_position_embeddings"] - 16
    bounds = [default_max_prompt_tokens(config, "float32", eager, limits, 8 << 30) for eager in (True, False)]
    assert 1000 < bounds[0] < bounds[1] <= config["max_position_embeddings"] - 16
    assert default_max_prompt_tokens(config, "float32", True, limits, 32 << 30) > bounds[0]


# ---- sampling settings: vLLM's extra parameters, and the checkpoint's generation_config.json as their defaults ----
def _greedy(tiny, sample, tokens, **settings) -> str:
    model, processor = tiny
    return Generator(model, processor, "abs_resized").generate(
        [sample], 1, SamplingParams(max_new_tokens=tokens, temperature=0.0, **settings), "{Question}").texts[0]


def test_a_request_sets_the_repetition_penalty_min_p_and_top_k(client, tiny, rec_samples):
    sample = rec_samples[0]
    plain = client.chat.completions.create(model="tiny", messages=image_message(sample), temperature=0,
                                           max_tokens=12).choices[0].message.content
    penalised = client.chat.completions.create(model="tiny", messages=image_message(sample), temperature=0,
                                               max_tokens=12, extra_body={"repetition_penalty": 2.0})
    assert penalised.choices[0].message.content == _greedy(tiny, sample, 12, repetition_penalty=2.0) != plain
    # top_k 1 and min_p 1 keep the likeliest token alone: sampling at any temperature is the greedy answer
    for narrow in ({"top_k": 1}, {"min_p": 1.0}):
        sampled = client.chat.completions.create(model="tiny", messages=image_message(sample), temperature=1.5,
                                                 max_tokens=12, n=3, extra_body=narrow)
        assert [c.message.content for c in sampled.choices] == [plain] * 3, narrow


@pytest.mark.parametrize("fields, message", [
    ({"top_k": 1.5}, "'top_k' must be an integer"), ({"top_k": -2}, "'top_k' must be between -1"),
    ({"min_p": 2}, "'min_p' must be between 0.0 and 1.0"),
    ({"repetition_penalty": 0}, "'repetition_penalty' must be between 1e-06 and 2.0")])
def test_bad_sampling_settings_get_400(server, fields, message):
    status, got = post(server, chat(**fields))
    assert status == 400 and message in got, got


def test_the_checkpoints_generation_config_gives_the_defaults(tiny_model_dir, tiny, rec_samples, tmp_path):
    """As vLLM serves a checkpoint: what a request leaves out comes from its generation_config.json (Qwen2.5-VL's
    published file makes vLLM's answers nearly greedy, with repetition_penalty 1.05), and what it gives wins."""
    from paddle_r1.checkpoints.manifest import CheckpointError

    folder = str(tmp_path / "checkpoint")
    shutil.copytree(tiny_model_dir, folder)
    config_path = os.path.join(folder, "generation_config.json")
    config = json.load(open(config_path))
    with open(config_path, "w") as f:
        json.dump({**config, "temperature": 0.0, "repetition_penalty": 2.0, "max_new_tokens": 6}, f)
    srv = build_server(folder, port=0, model_name="tiny", limits=LIMITS)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        local = openai.OpenAI(base_url="http://%s:%d/v1" % srv.server_address[:2], api_key="-", max_retries=0)
        sample = rec_samples[0]
        default = local.chat.completions.create(model="tiny", messages=image_message(sample))
        assert default.choices[0].message.content == _greedy(tiny, sample, 6, repetition_penalty=2.0)
        assert default.usage.completion_tokens <= 6
        given = local.chat.completions.create(model="tiny", messages=image_message(sample), max_tokens=12,
                                              extra_body={"repetition_penalty": 1.0})
        assert given.choices[0].message.content == _greedy(tiny, sample, 12)
    finally:
        srv.shutdown()
        srv.server_close()
    for text, message in (("{", "not valid JSON"), ('{"top_k": "1"}', "top_k '1' is not an integer")):
        with open(config_path, "w") as f:
            f.write(text)
        with pytest.raises(CheckpointError, match=f"generation_config.json: {message}"):
            build_server(folder, port=0, limits=LIMITS)


# ---- a server that can be put on a network: an API key, and every client reads its status ----------------------
def _raw(server, method: str, path: str, body: bytes = b"", authorization: str = "") -> tuple[int, dict]:
    conn = http.client.HTTPConnection(*server.server_address[:2], timeout=60)
    headers = {"Content-Type": "application/json", **({"Authorization": authorization} if authorization else {})}
    conn.request(method, path, body=body or None, headers=headers)
    response = conn.getresponse()
    status, reply = response.status, json.loads(response.read())
    conn.close()
    return status, reply


@pytest.fixture(scope="module")
def keyed_server(tiny_model_dir):
    srv = build_server(tiny_model_dir, port=0, model_name="tiny", limits=LIMITS, api_key="s3cret-key")
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def test_an_api_key_is_required_on_every_endpoint(keyed_server):
    """``--api_key``: without ``Authorization: Bearer <key>``, or with another key, or another scheme, 401 with
    OpenAI's error body, /v1/models included; the openai client sees ``AuthenticationError``; with the key, as
    before."""
    body = chat(max_tokens=2)
    for authorization in ("", "Bearer wrong", "Bearer s3cret-ke", "Basic s3cret-key", "s3cret-key"):
        for method, path, data in (("POST", "/v1/chat/completions", body), ("GET", "/v1/models", b"")):
            status, reply = _raw(keyed_server, method, path, data, authorization)
            assert status == 401 and reply["error"]["code"] == "invalid_api_key", (authorization, path, reply)
    assert _raw(keyed_server, "GET", "/v1/models", authorization="Bearer s3cret-key")[0] == 200
    host, port = keyed_server.server_address[:2]
    wrong = openai.OpenAI(base_url=f"http://{host}:{port}/v1", api_key="wrong", max_retries=0, timeout=60)
    with pytest.raises(openai.AuthenticationError, match="API key"):
        _ask(wrong)
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()
    right = openai.OpenAI(base_url=f"http://{host}:{port}/v1", api_key="s3cret-key", max_retries=0, timeout=60)
    assert _ask(right).choices and [m.id for m in right.models.list().data] == ["tiny"]


def test_a_burst_of_clients_each_reads_its_status(server):
    """64 clients connect at once, each sending a request with an invalid n (64): each must read its 400. With
    socketserver's listen backlog of 5, 39-48 of 64 read a connection reset instead (the kernel dropped the
    connections its queue had no room for, after the client had sent its request)."""
    address = server.server_address[:2]
    body = chat(n=64)
    request = HEADERS.replace(b"1000", str(len(body)).encode()) + body
    for _ in range(3):
        replies: list = [None] * 64
        go = threading.Event()

        def one(i):
            go.wait()
            try:
                with socket.create_connection(address, timeout=60) as sock:
                    sock.sendall(request)
                    sock.shutdown(socket.SHUT_WR)
                    replies[i] = _reply(sock)
            except OSError as e:
                replies[i] = repr(e).encode()

        threads = [threading.Thread(target=one, args=(i,)) for i in range(64)]
        for thread in threads:
            thread.start()
        go.set()
        for thread in threads:
            thread.join()
        wrong = [r[:60] for r in replies if not r.startswith(b"HTTP/1.1 400")]
        assert not wrong, f"{len(wrong)} of 64: {wrong[:3]}"
        assert all(b"'n' must be between 1 and 8" in r for r in replies)


def _serve_command(tiny_model_dir, *args, env=None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "paddle_r1.cli", "serve", tiny_model_dir, "--port", "0",
                             "--max_prompt_tokens", "512", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **(env or {})})


def _until_serving(process: subprocess.Popen) -> str:
    """The server's stdout line saying where it serves (the process is stopped if it ends first)."""
    for line in process.stdout:
        if line.startswith("serving "):
            return line
    raise AssertionError(f"the server ended: {process.wait()} {process.stderr.read()[-2000:]}")


def test_beyond_this_machine_without_a_key_is_a_warning_no_one_misses(tiny_model_dir):
    """``--host 0.0.0.0`` without a key: a framed warning on stderr, before the server's first line; with the key
    (vLLM's spelling ``--api-key``) none, and the command's server refuses a request without it."""
    bare = _serve_command(tiny_model_dir, "--host", "0.0.0.0")
    try:
        assert "no API key" in _until_serving(bare)
    finally:
        bare.terminate()
        stderr = bare.communicate(timeout=60)[1]
    assert "WARNING: serving on 0.0.0.0:" in stderr and "WITHOUT AN API KEY" in stderr, stderr[-2000:]
    assert "--api_key KEY" in stderr and "PADDLE_R1_API_KEY" in stderr
    keyed = _serve_command(tiny_model_dir, "--host", "0.0.0.0", "--api-key", "k")
    try:
        line = _until_serving(keyed)
        assert "API key required" in line
        port = int(line.split("http://")[1].split("/")[0].rsplit(":", 1)[1])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("GET", "/v1/models")
        assert conn.getresponse().status == 401
    finally:
        keyed.terminate()
        stderr = keyed.communicate(timeout=60)[1]
    assert "WARNING" not in stderr, stderr[-2000:]


def test_the_api_key_comes_from_the_environment(monkeypatch):
    from paddle_r1.cli import build_parser

    monkeypatch.setenv("PADDLE_R1_API_KEY", "from-env")
    assert build_parser().parse_args(["serve", "folder"]).api_key == "from-env"
    assert build_parser().parse_args(["serve", "folder", "--api_key", "given"]).api_key == "given"
    monkeypatch.delenv("PADDLE_R1_API_KEY")
    assert build_parser().parse_args(["serve", "folder"]).api_key is None
