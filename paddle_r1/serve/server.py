"""The HTTP side: ``POST /v1/chat/completions`` (JSON, or server-sent events with ``stream``) and
``GET /v1/models``, on the standard library's threading server.

Each request is read (at most ``max_request_bytes``), checked (``chat.parse_chat_request``), handed to the engine
and answered in OpenAI's shapes; at most ``max_concurrency`` are in progress at once, the rest get 429 at once. A
bad request gets a 4xx with OpenAI's error body, a failed generation a 500; neither stops the server. With
``stream`` the reply is sent as chat.completion.chunk events once the batch has been decoded (the rollout decodes
a batch to its end; tokens are not sent as they are made).
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional

from .chat import RequestError, parse_chat_request
from .engine import Answer, Engine
from .limits import ServeLimits

logger = logging.getLogger(__name__)
DRAIN_FACTOR = 16  # a refused body up to this many times the size limit is read and dropped


def completion_body(answer: Answer, model: str, request_id: str, created: int) -> dict:
    used = sum(c.completion_tokens for c in answer.choices)
    return {"id": request_id, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": i, "message": {"role": "assistant", "content": c.text},
                         "finish_reason": c.finish_reason, "logprobs": None} for i, c in enumerate(answer.choices)],
            "usage": {"prompt_tokens": answer.prompt_tokens, "completion_tokens": used,
                      "total_tokens": answer.prompt_tokens + used}}


def stream_events(answer: Answer, model: str, request_id: str, created: int) -> list[dict]:
    """The chunks of a streamed reply: per choice its role, its text, then its finish reason."""
    def chunk(index: int, delta: dict, finish: Optional[str] = None) -> dict:
        return {"id": request_id, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [{"index": index, "delta": delta, "finish_reason": finish, "logprobs": None}]}

    events = []
    for i, c in enumerate(answer.choices):
        events += [chunk(i, {"role": "assistant", "content": ""}), chunk(i, {"content": c.text}),
                   chunk(i, {}, c.finish_reason)]
    return events


class ChatServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, engine: Engine, model_name: str, limits: ServeLimits, image_root: Optional[str]):
        super().__init__(address, ChatHandler)
        self.engine, self.model_name, self.limits, self.image_root = engine, model_name, limits, image_root
        self.slots = threading.BoundedSemaphore(limits.max_concurrency)
        self.created = int(time.time())


class ChatHandler(BaseHTTPRequestHandler):
    server: ChatServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # noqa: A002 -- the base class's name
        logger.info("%s %s", self.address_string(), format % args)

    def _send_json(self, status: int, body: dict) -> None:
        data = json.dumps(body, ensure_ascii=False).encode()
        self.send_response(status)
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

    def do_GET(self):  # noqa: N802 -- http.server's name
        if self.path.rstrip("/") == "/v1/models":
            self._send_json(200, {"object": "list", "data": [{"id": self.server.model_name, "object": "model",
                                                              "created": self.server.created,
                                                              "owned_by": "paddle_r1"}]})
        else:
            self._send_json(404, RequestError(404, f"no such endpoint: GET {self.path}").body())

    def do_POST(self):  # noqa: N802
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._drain()
            return self._send_json(404, RequestError(404, f"no such endpoint: POST {self.path}").body())
        if not self.server.slots.acquire(blocking=False):
            self._drain()
            return self._send_json(429, RequestError(429, "too many requests in progress; retry shortly",
                                                     code="rate_limit_exceeded").body())
        try:
            self._chat()
        except RequestError as e:
            self._send_json(e.status, e.body())
        except Exception as e:  # noqa: BLE001 -- a failed generation is the client's 500, not the server's end
            logger.exception("request failed")
            self._send_json(500, RequestError(500, f"generation failed: {type(e).__name__}: {e}").body())
        finally:
            self.server.slots.release()

    def _body(self) -> bytes:
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
        not read, and the connection is closed."""
        length = self.headers.get("Content-Length", "")
        left = int(length) if length.isdigit() else -1
        if not 0 <= left <= DRAIN_FACTOR * self.server.limits.max_request_bytes:
            self.close_connection = True
            return
        while left > 0:
            chunk = self.rfile.read(min(left, 1 << 16))
            if not chunk:
                break
            left -= len(chunk)

    def _chat(self) -> None:
        server = self.server
        request = parse_chat_request(self._body(), server.model_name, server.limits, server.image_root)
        answer = server.engine.submit(request).result()
        request_id, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        if request.stream:
            self._send_events(stream_events(answer, server.model_name, request_id, created))
        else:
            self._send_json(200, completion_body(answer, server.model_name, request_id, created))


def build_server(checkpoint: str, host: str = "127.0.0.1", port: int = 8000, model_name: Optional[str] = None,
                 image_root: Optional[str] = None, limits: ServeLimits = ServeLimits(),
                 dtype: str = "float32") -> ChatServer:
    """Verify and load the model, and bind (port 0: any free port, see ``server.server_address``); ``serve_forever``
    runs it."""
    from ..generation.generator import Generator
    from ..models.loading import default_coord_system, load_model, load_processor, model_family
    from ..trainer.checkpoint import verify_checkpoint

    verify_checkpoint(checkpoint, model_only=True)
    model = load_model(checkpoint, dtype=dtype)
    model.eval()
    generator = Generator(model, load_processor(checkpoint), default_coord_system(model_family(checkpoint)))
    name = model_name or os.path.basename(os.path.normpath(checkpoint))
    return ChatServer((host, port), Engine(generator, max_batch=limits.max_batch), name, limits, image_root)


def serve(checkpoint: str, host: str = "127.0.0.1", port: int = 8000, **kwargs) -> None:
    server = build_server(checkpoint, host, port, **kwargs)
    address, bound = server.server_address[:2]
    print(f"serving {server.model_name!r} on http://{address}:{bound}/v1 (OpenAI chat completions); Ctrl-C stops")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
