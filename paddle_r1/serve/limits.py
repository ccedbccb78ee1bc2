"""What one server accepts: every bound a request is checked against before it reaches the model."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServeLimits:
    max_request_bytes: int = 20 << 20  # request body
    max_images: int = 8  # per request
    max_image_pixels: int = 4096 * 4096  # per image, as sent (the processor then resizes to its max_pixels)
    max_tokens: int = 1024  # ceiling of a request's max_tokens; also its default
    max_n: int = 8  # completions per request
    max_concurrency: int = 16  # requests in progress at once; more get 429
    max_batch: int = 8  # requests decoded together
    max_messages: int = 64
    max_stop: int = 4  # stop strings, as OpenAI allows
