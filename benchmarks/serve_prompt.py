"""What one long prompt costs ``paddle-r1 serve`` (CPU), against the memory the default prompt bound assumes.

    python benchmarks/serve_prompt.py [--tokens 1024 2048 4096 8020]

Starts the server on the tiny checkpoint (``make-tiny-model``: hidden 64, 2 layers, 4 heads, float32, eager
attention) with no prompt bound, sends one text prompt of about each length through the ``openai`` client (one
completion, 2 new tokens), and prints the prompt's tokens as the server counted them, the seconds to the reply,
the rise of the process's peak resident memory (VmHWM, reset before each request), and what
``serve.limits.default_max_prompt_tokens`` assumes one such prompt takes (its attention scores and KV cache for a
batch of one). One process: Paddle's allocator keeps what it freed, so lengths run shortest first.
"""
from __future__ import annotations

import argparse
import tempfile
import threading
import time
import warnings

warnings.filterwarnings("ignore")
MIB = 2.0**20


def _peak_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, nargs="+", default=[1024, 2048, 4096, 8020])
    args = parser.parse_args()
    import json

    import openai

    from paddle_r1.memory import DTYPE_BYTES, ModelShape, scores_transient_bytes
    from paddle_r1.testing.tiny import make_tiny_model
    from paddle_r1.quiet import quiet_libraries
    from paddle_r1.serve.limits import ServeLimits
    from paddle_r1.serve.server import build_server

    quiet_libraries()
    folder = make_tiny_model(tempfile.mkdtemp() + "/tiny")
    shape = ModelShape.from_config(json.load(open(f"{folder}/config.json")))
    server = build_server(folder, port=0, model_name="tiny", limits=ServeLimits(max_prompt_tokens=1 << 30))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host, port = server.server_address[:2]
    client = openai.OpenAI(base_url=f"http://{host}:{port}/v1", api_key="unused", max_retries=0, timeout=600)
    per_word = len(server.prompt_meter.tokenizer.encode("word " * 100).ids) // 100
    print("| prompt tokens | seconds | peak memory rise (MiB) | assumed by the default bound (MiB) |")
    print("|---|---|---|---|")
    for tokens in sorted(args.tokens):
        text = "word " * max(1, (tokens - 20) // per_word)  # the chat template adds about 20 tokens
        _reset_peak()
        before = _peak_kib()
        start = time.perf_counter()
        reply = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": text}],
                                               max_tokens=2, temperature=0)
        seconds = time.perf_counter() - start
        rise = (_peak_kib() - before) / 1024
        length = reply.usage.prompt_tokens
        width = DTYPE_BYTES["float32"]
        assumed = (shape.heads * length**2 * scores_transient_bytes(width)
                   + shape.layers * 2 * shape.kv_dim * width * (length + 2)) / MIB
        print(f"| {length} | {seconds:.1f} | {rise:.0f} | {assumed:.0f} |")
    server.shutdown()
    server.server_close()


if __name__ == "__main__":
    main()
