"""A real HTTP server on 127.0.0.1 playing an OpenAI-compatible judge endpoint, for tests/test_rewards_judge.py and
tests/test_rewards_fuzz.py, and ``Counted``, which gathers a reward object's counters as the RewardManager does."""
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

KEY, MODEL = "sk-test", "judge-model"
BLOCK_RE = re.compile(r"<(reference|candidate)>\n(.*?)\n</\1>", re.DOTALL)


def chat_reply(content) -> bytes:
    return json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}).encode()


# HTTP 200 bodies that hold no verdict, as endpoints and the proxies before them have sent them
MALFORMED_REPLIES = {
    "content null": chat_reply(None), "content a number": chat_reply(1), "content true": chat_reply(True),
    "content an object": chat_reply({"text": "1"}), "text part null": chat_reply([{"type": "text", "text": None}]),
    "text part a number": chat_reply([{"type": "text", "text": 1}]),
    "text part a list": chat_reply([{"type": "text", "text": ["1"]}]), "parts not objects": chat_reply([1, None]),
    "no choices": b'{"id": "chatcmpl-1", "object": "chat.completion"}', "empty choices": b'{"choices": []}',
    "choices an object": b'{"choices": {"0": {}}}', "message null": b'{"choices": [{"message": null}]}',
    "a JSON list": b"[1, 2]", "a JSON number": b"1", "HTML": b"<html><body><h1>502 Bad Gateway</h1></body></html>",
    "empty body": b"", "nested past the recursion limit": b"[" * 100_000 + b"]" * 100_000,
}


class JudgeServer:
    """/v1/chat/completions: "1" when the candidate block contains a reference line, else "0". Checks the key
    and the model; ``mode`` "ok" | "500" | "garbage" (a reply without a verdict) | "notjson" | "malformed" (the
    bodies of ``MALFORMED_REPLIES`` in turn, or only ``malformed_shape``'s) | "trickle" (the body one byte at a time)
    | "trickle_headers" (a header one byte every 0.5 s, for 20 s); ``fail_first`` 500s
    before answering; ``delay`` seconds of sleep per request. GET /v1/models lists ``models`` (with the key).
    Records bodies and the most requests in flight at once (from arrival until the reply starts)."""

    def __init__(self):
        self.mode, self.fail_first, self.delay = "ok", 0, 0.0
        self.malformed_shape, self.malformed_sent = None, 0
        self.models, self.model_requests = [MODEL], 0
        self.bodies, self.in_flight, self.max_in_flight = [], 0, 0
        self.lock, self.stop = threading.Lock(), threading.Event()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def kwargs(self, **extra):
        return {"base_url": self.base_url, "api_key": KEY, "model": MODEL, "timeout": 2, "max_retries": 2,
                "backoff": 0.01, **extra}

    def close(self):
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    def answer(self, body) -> tuple[int, bytes]:
        """(status, response body) for one request body."""
        if self.fail_first > 0 or self.mode == "500":
            self.fail_first -= 1
            return 500, b'{"error": "boom"}'
        if body.get("model") != MODEL:
            return 404, b'{"error": "model not found"}'
        if self.mode == "notjson":
            return 200, b"not json {"
        if self.mode == "malformed":
            shapes = [self.malformed_shape] if self.malformed_shape else list(MALFORMED_REPLIES)
            self.malformed_sent += 1
            return 200, MALFORMED_REPLIES[shapes[(self.malformed_sent - 1) % len(shapes)]]
        blocks = dict(BLOCK_RE.findall(body["messages"][-1]["content"]))
        refs = blocks.get("reference", "").lower().splitlines()
        verdict = "1" if any(ref and ref in blocks.get("candidate", "").lower() for ref in refs) else "0"
        return 200, chat_reply({"ok": verdict, "garbage": "Hmm, hard to say."}.get(self.mode))

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                server.model_requests += 1
                if self.path != "/v1/models" or self.headers.get("Authorization") != f"Bearer {KEY}":
                    status, payload = 401, {"error": "bad key or path"}
                else:
                    status, payload = 200, {"object": "list", "data": [{"id": m, "object": "model"}
                                                                       for m in server.models]}
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                with server.lock:
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                counted = True
                try:
                    body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                    server.stop.wait(server.delay)
                    with server.lock:
                        server.bodies.append(body)
                        status, data = server.answer(body)
                        # counted until the reply starts: once a client has read it, its next request may
                        # arrive before this handler returns
                        server.in_flight -= 1
                        counted = False
                    if self.path != "/v1/chat/completions" or self.headers.get("Authorization") != f"Bearer {KEY}":
                        status, data = 401, b'{"error": "bad key or path"}'
                    if server.mode == "trickle_headers":
                        self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                        for _ in range(40):
                            self.wfile.write(b"z")
                            self.wfile.flush()
                            if server.stop.wait(0.5):
                                break
                        return
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data) if server.mode != "trickle" else 10_000))
                    self.end_headers()
                    for _ in range(400 if server.mode == "trickle" else 0):  # one byte every 50 ms
                        if server.stop.wait(0.05):
                            break
                        self.wfile.write(b" ")
                        self.wfile.flush()
                    self.wfile.write(data)
                except OSError:  # the client gave up (timeout) and closed the connection
                    pass
                finally:
                    if counted:
                        with server.lock:
                            server.in_flight -= 1

            def log_message(self, *_):
                pass

        return Handler


class Counted:
    """A reward object whose counts are gathered here, as the RewardManager gathers them: ``pop()`` returns the
    counts since the last pop (zeros included) and clears them."""

    def __init__(self, reward):
        self.reward, self.counts = reward, {}
        reward.report = self.add

    def add(self, key, n):
        self.counts[key] = self.counts.get(key, 0) + n

    def pop(self):
        counts, self.counts = self.counts, {}
        return counts

    def __call__(self, completions, **columns):
        return self.reward(completions, **columns)
