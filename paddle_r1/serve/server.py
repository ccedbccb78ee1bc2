"""The HTTP side: ``POST /v1/chat/completions`` (JSON, or server-sent events with ``stream``) and
``GET /v1/models``, on the standard library's threading server.

Each request is read whole (at most ``max_request_bytes``, within ``read_timeout`` seconds of its first byte, else
408), then takes one of ``max_concurrency`` slots (none free: 429 at once), is checked (``chat.parse_chat_request``,
its prompt's length by ``chat.PromptMeter``), handed to the engine and answered in OpenAI's shapes. Reading before
taking a slot means a client that sends slowly holds its own connection's thread only, never a slot. A bad request
gets a 4xx with OpenAI's error body, a failed generation a 500; neither stops the server, and a client that hangs
up is one line in the log. With an API key (``--api_key``, PADDLE_R1_API_KEY) every request, /v1/models included,
must carry it as a Bearer token, else 401; bound beyond loopback without one, ``serve`` prints a warning. With
``stream`` the reply is sent as chat.completion.chunk events once the batch has been decoded (the rollout decodes
a batch to its end; tokens are not sent as they are made).
"""
from __future__ import annotations

import dataclasses
import hmac
import ipaddress
import io
import json
import logging
import math
import os
import select
import socket
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional

from ..data.video import VideoSampling
from .chat import MediaReaders, PromptMeter, RequestError, parse_chat_request
from ..models.generation_defaults import generation_defaults
from .engine import Answer, Engine
from .limits import ServeLimits, default_max_prompt_tokens, free_memory_bytes

logger = logging.getLogger(__name__)
DRAIN_FACTOR = 16  # a refused body up to this many times the size limit is read and dropped


def completion_body(answer: Answer, model: str, request_id: str, created: int, token_ids: bool = False) -> dict:
    """The reply; with ``token_ids`` (the request's ``return_token_ids``) in vLLM's shape: the prompt's ids at the
    top (``prompt_token_ids``), each choice's generated ids beside its message (``token_ids``)."""
    used = sum(c.completion_tokens for c in answer.choices)
    body = {"id": request_id, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": i, "message": {"role": "assistant", "content": c.text},
                         "finish_reason": c.finish_reason, "logprobs": None,
                         **({"token_ids": c.token_ids} if token_ids else {})} for i, c in enumerate(answer.choices)],
            "usage": {"prompt_tokens": answer.prompt_tokens, "completion_tokens": used,
                      "total_tokens": answer.prompt_tokens + used}}
    if token_ids:
        body["prompt_token_ids"] = answer.prompt_token_ids
    return body


def stream_events(answer: Answer, model: str, request_id: str, created: int, token_ids: bool = False) -> list[dict]:
    """The chunks of a streamed reply: per choice its role, its text, then its finish reason. With ``token_ids``, as
    vLLM sends them: the prompt's ids in the first chunk, each chunk's generated ids in its choice."""
    def chunk(index: int, delta: dict, finish: Optional[str] = None, ids: Optional[list] = None) -> dict:
        choice = {"index": index, "delta": delta, "finish_reason": finish, "logprobs": None}
        if token_ids:
            choice["token_ids"] = ids or []
        return {"id": request_id, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [choice]}

    events = []
    for i, c in enumerate(answer.choices):
        events += [chunk(i, {"role": "assistant", "content": ""}), chunk(i, {"content": c.text}, ids=c.token_ids),
                   chunk(i, {}, c.finish_reason)]
    if token_ids:
        events[0]["prompt_token_ids"] = answer.prompt_token_ids
    return events


class ChatServer(ThreadingHTTPServer):
    daemon_threads = True
    # the kernel's queue of connections not yet accepted: socketserver's 5 overflowed when a burst of clients
    # connected while generation held the GIL, and the overflowing clients, their request sent, read a reset instead
    # of their status (39-48 of 64 simultaneous clients of a bad request; 0 with this); Linux caps it at somaxconn
    request_queue_size = socket.SOMAXCONN

    def __init__(self, address, engine: Engine, model_name: str, limits: ServeLimits, readers: MediaReaders,
                 prompt_meter: PromptMeter, api_key: Optional[str] = None, sampling_defaults: Optional[dict] = None):
        super().__init__(address, ChatHandler)
        self.engine, self.model_name, self.limits, self.readers = engine, model_name, limits, readers
        self.sampling_defaults = sampling_defaults or {}  # the checkpoint's (``chat._sampling``)
        self.api_key = api_key.encode() if api_key else None
        self.prompt_meter = prompt_meter
        self.slots = threading.BoundedSemaphore(limits.max_concurrency)
        self.created = int(time.time())

    def handle_error(self, request, client_address):
        """A client that hung up (or stopped reading) mid-request is one line, not a traceback; anything else is a
        bug and keeps the base class's traceback."""
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            logger.warning("%s: client hung up (%s: %s)", client_address[0], type(error).__name__, error)
        else:
            super().handle_error(request, client_address)


class DeadlineReader(io.RawIOBase):
    """A connection's reads, each waiting only until ``deadline`` (``time.monotonic()``): a request must arrive
    whole by then however slowly its bytes come (a per-read timeout alone lets a byte every few seconds go on
    forever). Past it a read raises ``TimeoutError``."""

    def __init__(self, connection):
        super().__init__()
        self.connection, self.deadline = connection, math.inf

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0 or not select.select([self.connection], [], [], remaining)[0]:
            raise TimeoutError("the request did not arrive in time")
        return self.connection.recv_into(buffer)


class ChatHandler(BaseHTTPRequestHandler):
    server: ChatServer
    protocol_version = "HTTP/1.1"

    def setup(self):
        self.timeout = self.server.limits.read_timeout  # each write too: a client that stops reading is let go
        super().setup()
        self.reader = DeadlineReader(self.connection)
        self.rfile = io.BufferedReader(self.reader)

    def handle_one_request(self):
        """One request (the base class reads its line and headers, then calls ``do_*``), all of it within
        ``read_timeout`` of now; an idle kept-alive connection is closed after as long."""
        self.reader.deadline = time.monotonic() + self.server.limits.read_timeout
        super().handle_one_request()

    def log_message(self, format, *args):  # noqa: A002 -- the base class's name
        logger.info("%s %s", self.address_string(), format % args)

    def _send_json(self, status: int, body: dict, headers: Optional[dict] = None) -> None:
        data = json.dumps(body, ensure_ascii=False).encode()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_events(self, events: list[dict]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        for event in events:
            self.wfile.write(f"data: {json.dumps(event, ensure_ascii=False)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.close_connection = True

    def _refused_key(self) -> bool:
        """With an API key set, a request without ``Authorization: Bearer <key>`` gets 401 (its body read first, so
        the client reads the 401 rather than a reset). The key is compared in constant time (``hmac.compare_digest``):
        a comparison that stops at the first wrong byte lets a client find the key byte by byte from the timings."""
        expected = self.server.api_key
        if expected is None:
            return False
        scheme, _, given = self.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), expected):
            return False
        self._drain()
        self._send_json(401, RequestError(401, "a valid API key is required: send the header "
                                               "'Authorization: Bearer <key>' (the server's --api_key)",
                                          code="invalid_api_key").body(), {"WWW-Authenticate": "Bearer"})
        return True

    def do_GET(self):  # noqa: N802 -- http.server's name
        if self._refused_key():
            return
        self._drain()  # a GET with a body: its bytes are not the next request's
        if self.path.rstrip("/") == "/v1/models":
            self._send_json(200, {"object": "list", "data": [{"id": self.server.model_name, "object": "model",
                                                              "created": self.server.created,
                                                              "owned_by": "paddle_r1"}]})
        else:
            self._send_json(404, RequestError(404, f"no such endpoint: GET {self.path}").body())

    def do_POST(self):  # noqa: N802
        if self._refused_key():
            return
        try:
            body = self._body()
        except RequestError as e:
            return self._send_json(e.status, e.body())
        except TimeoutError:
            self.close_connection = True  # the rest of the body may still come: nothing more is read
            return self._send_json(408, RequestError(408, f"the request did not arrive within this server's "
                                                          f"{self.server.limits.read_timeout:g} s",
                                                     code="request_timeout").body())
        if not self.server.slots.acquire(blocking=False):
            return self._send_json(429, RequestError(429, "too many requests in progress; retry shortly",
                                                     code="rate_limit_exceeded").body())
        try:
            self._chat(body)
        except RequestError as e:
            self._send_json(e.status, e.body())
        except ConnectionError:
            raise  # the client hung up: one line from ChatServer.handle_error
        except Exception as e:  # noqa: BLE001 -- a failed generation is the client's 500, not the server's end
            logger.exception("request failed")
            self._send_json(500, RequestError(500, f"generation failed: {type(e).__name__}: {e}").body())
        finally:
            self.server.slots.release()

    def _body(self) -> bytes:
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._drain()
            raise RequestError(404, f"no such endpoint: POST {self.path}")
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            raise RequestError(411, "a Content-Length header is required") from None
        if length > self.server.limits.max_request_bytes:
            self._drain()
            raise RequestError(413, f"request body of {length} bytes is over this server's limit of "
                                    f"{self.server.limits.max_request_bytes} bytes", code="request_too_large")
        return self.rfile.read(length)

    def _drain(self) -> None:
        """Read and drop a refused request's body, a chunk at a time (nothing is kept), so that the client, still
        sending, reads the error instead of a reset connection; a body over DRAIN_FACTOR times the size limit is
        not read, and the connection is closed. A request with neither Content-Length nor Transfer-Encoding has no
        body (a GET's usual form)."""
        length = self.headers.get("Content-Length", "")
        if not length and "Transfer-Encoding" not in self.headers:
            return
        left = int(length) if length.isdigit() else -1
        if not 0 <= left <= DRAIN_FACTOR * self.server.limits.max_request_bytes:
            self.close_connection = True
            return
        while left > 0:
            chunk = self.rfile.read(min(left, 1 << 16))
            if not chunk:
                break
            left -= len(chunk)

    def _chat(self, body: bytes) -> None:
        server = self.server
        request = parse_chat_request(body, server.model_name, server.limits, server.readers, server.sampling_defaults)
        server.prompt_meter.check(request)
        answer = server.engine.submit(request).result()
        request_id, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        if request.stream:
            self._send_events(stream_events(answer, server.model_name, request_id, created, request.return_token_ids))
        else:
            self._send_json(200, completion_body(answer, server.model_name, request_id, created,
                                                 request.return_token_ids))


def build_server(checkpoint: str, host: str = "127.0.0.1", port: int = 8000, model_name: Optional[str] = None,
                 image_root: Optional[str] = None, limits: ServeLimits = ServeLimits(),
                 dtype: str = "float32", api_key: Optional[str] = None,
                 video: Optional[VideoSampling] = None) -> ChatServer:
    """Verify and load the model, and bind (port 0: any free port, see ``server.server_address``); ``serve_forever``
    runs it. ``limits.max_prompt_tokens`` None is set from the model (``limits.default_max_prompt_tokens``).
    ``api_key``: every request must carry it as ``Authorization: Bearer <key>`` (else 401). ``video``: how clips
    are sampled (default: ``VideoSampling()``, training's defaults)."""
    from ..generation.generator import Generator, clip_reader
    from ..memory import PAIR_TEXT_TOKENS, read_model_config
    from ..models.families import VIDEO_REFUSED, family_of
    from ..models.loading import default_coord_system, load_model, load_processor, model_family
    from ..checkpoints.folders import verify_checkpoint

    verify_checkpoint(checkpoint, model_only=True)
    sampling_defaults = generation_defaults(checkpoint)  # a bad file stops the start, not each request
    model = load_model(checkpoint, dtype=dtype)
    model.eval()
    processor = load_processor(checkpoint)
    if limits.max_prompt_tokens is None:
        eager = model.config._attn_implementation == "eager"
        limits = dataclasses.replace(limits, max_prompt_tokens=default_max_prompt_tokens(
            read_model_config(checkpoint), dtype, eager, limits, free_memory_bytes()))
    generator = Generator(model, processor, default_coord_system(model_family(checkpoint)))
    name = model_name or os.path.basename(os.path.normpath(checkpoint))
    video = video or VideoSampling()
    family = family_of(model)
    reads_video = family.video_time != "none"
    readers = MediaReaders(image_root, clip_reader(processor, video) if reads_video else None,
                           VIDEO_REFUSED.get(family.model_type, ""))
    meter = PromptMeter(processor, limits.max_prompt_tokens, PAIR_TEXT_TOKENS.get(family.video_time, 0))
    return ChatServer((host, port), Engine(generator, max_batch=limits.max_batch), name, limits, readers, meter,
                      api_key, sampling_defaults)


def open_to_the_network_warning(address: str, port: int) -> Optional[str]:
    """The banner printed when the server is bound beyond this machine (a bound address that is not loopback:
    0.0.0.0, ::, a LAN address) with no API key: anyone who reaches the port can use the model, read files under
    --image_root and keep the machine busy. None when bound to loopback."""
    if ipaddress.ip_address(address.split("%")[0]).is_loopback:
        return None
    rule = "!" * 78
    return (f"{rule}\n!! WARNING: serving on {address}:{port} WITHOUT AN API KEY.\n"
            "!! Anyone who can reach this port can generate with the model and use this machine's compute\n"
            "!! (and read images under --image_root). Set a key: --api_key KEY, or the environment variable\n"
            "!! PADDLE_R1_API_KEY (not shown by ps); clients then send 'Authorization: Bearer KEY'.\n"
            "!! Or bind this machine only: --host 127.0.0.1.\n" + rule)


def serve(checkpoint: str, host: str = "127.0.0.1", port: int = 8000, **kwargs) -> None:
    server = build_server(checkpoint, host, port, **kwargs)
    address, bound = server.server_address[:2]
    warning = None if server.api_key else open_to_the_network_warning(address, bound)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    print(f"serving {server.model_name!r} on http://{address}:{bound}/v1 (OpenAI chat completions); prompts of up "
          f"to {server.limits.max_prompt_tokens} tokens (--max_prompt_tokens); "
          f"{'API key required' if server.api_key else 'no API key'}; Ctrl-C stops", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
