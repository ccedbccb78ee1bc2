"""What one server accepts: every bound a request is checked against before it reaches the model."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class ServeLimits:
    max_request_bytes: int = 20 << 20  # request body
    max_images: int = 8  # per request
    max_image_pixels: int = 4096 * 4096  # per image, as sent (the processor then resizes to its max_pixels)
    max_videos: int = 2  # per request; each read as training reads a clip (its frames and pixels bounded there)
    max_video_frames: int = 768  # frames of one video sent as a list of images
    max_tokens: int = 1024  # ceiling of a request's max_tokens; also its default
    max_n: int = 8  # completions per request
    max_concurrency: int = 16  # requests in progress at once; more get 429
    max_batch: int = 8  # requests decoded together
    max_messages: int = 64
    max_stop: int = 4  # stop strings, as OpenAI allows
    # seconds from a request's first byte to its whole body (headers included): a client that sends slowly is cut
    # off with 408 instead of holding its connection's thread; the body is read before the request takes a slot
    read_timeout: float = 30.0
    max_prompt_tokens: Optional[int] = None  # text and image tokens of one prompt; None: default_max_prompt_tokens


def free_memory_bytes() -> int:
    """Memory the server may still use once its model is loaded: the GPU's, less what Paddle holds and
    ``memory.RESERVE_GIB`` (CUDA context, workspaces); on CPU the system's available memory."""
    import paddle

    from ..memory import GIB, RESERVE_GIB

    if paddle.get_device().startswith("gpu"):
        total = paddle.device.cuda.get_device_properties().total_memory
        return max(0, int(total - paddle.device.cuda.memory_reserved() - RESERVE_GIB * GIB))
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) << 10 for line in f if line.startswith("MemAvailable:"))


def default_max_prompt_tokens(model_config: dict, dtype: str, eager: bool, limits: ServeLimits,
                              memory_bytes: int) -> int:
    """The longest prompt a full batch of which fits the model's context and half of ``memory_bytes``: the model's
    ``max_position_embeddings`` less ``max_tokens``, and at most the length L at which ``max_batch`` prompts take
    that memory in the prefill's attention scores (eager attention builds heads x L x L of them per prompt, one layer
    at a time) plus the KV cache of their ``max_n`` completions (every layer, L + max_tokens positions). Unbounded, one
    long prompt takes seconds and gigabytes even on a tiny model on CPU (``python benchmarks/serve_prompt.py``)."""
    from ..memory import DTYPE_BYTES, ModelShape, scores_transient_bytes

    shape = ModelShape.from_config(model_config)
    context = {**model_config, **model_config.get("text_config", {})}.get("max_position_embeddings", math.inf)
    width = DTYPE_BYTES[dtype]
    batch = limits.max_batch
    per_score = batch * shape.heads * scores_transient_bytes(width) if eager else 0  # x L^2
    per_position = batch * limits.max_n * shape.layers * 2 * shape.kv_dim * width  # x (L + max_tokens)
    # per_score L^2 + per_position L = room
    room = memory_bytes / 2 - per_position * limits.max_tokens
    if room <= 0:
        return 1
    fits = room / per_position if per_score == 0 else \
        (math.sqrt(per_position ** 2 + 4 * per_score * room) - per_position) / (2 * per_score)
    return max(1, int(min(context - limits.max_tokens, fits)))
