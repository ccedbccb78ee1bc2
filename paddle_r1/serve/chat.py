"""A chat-completions request read and checked: every mistake is a ``RequestError`` with its HTTP status and a
message naming the field, raised before the request reaches the model.

Images come as data URLs (``data:image/png;base64,...``). An http(s) URL is refused (the server fetches nothing:
it may run where there is no network, and fetching would let a client make it request any address); a local path
(``file://`` or plain) only under the ``--image_root`` the server was started with.
"""
from __future__ import annotations

import base64
import binascii
import copy
import io
import json
import math
import os
from dataclasses import dataclass
from typing import Optional

from PIL import Image

from ..data.images import as_rgb
from ..generation.rollout import SamplingParams
from .limits import ServeLimits

ROLES = ("system", "user", "assistant")


class RequestError(Exception):
    def __init__(self, status: int, message: str, code: Optional[str] = None, param: Optional[str] = None):
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param

    def body(self) -> dict:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}


@dataclass
class ChatRequest:
    messages: list  # for the chat template: {"role", "content": [{"type": "image"} | {"type": "text", ...}]}
    images: list  # PIL images in the order the messages show them
    sampling: SamplingParams
    n: int
    stop: list
    stream: bool
    return_token_ids: bool = False  # vLLM's extension: the reply carries the prompt's and each choice's token ids
    prompt: str = ""  # the messages through the chat template, as the model reads them (``PromptMeter.check``)

    @property
    def batch_key(self) -> tuple:
        """Requests with equal keys can share one decode (same sampling and number of completions)."""
        s = self.sampling
        return s.max_new_tokens, s.temperature, s.top_p, self.n


def _bad(message: str, param: Optional[str] = None) -> RequestError:
    return RequestError(400, message, param=param)


def _number(body: dict, key: str, default, low: float, high: float, integer: bool = False):
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        raise _bad(f"'{key}' must be {'an integer' if integer else 'a number'}, got {value!r}", key)
    if not (math.isfinite(value) and low <= value <= high):
        raise _bad(f"'{key}' must be between {low} and {high}, got {value!r}", key)
    return value


def _flag(body: dict, key: str) -> bool:
    value = body.get(key)
    if value is not None and not isinstance(value, bool):
        raise _bad(f"'{key}' must be true or false", key)
    return bool(value)


def open_image(data: bytes, where: str, limits: ServeLimits) -> Image.Image:
    try:
        img = Image.open(io.BytesIO(data))
        width, height = img.size  # read from the header: nothing decoded yet
        if width * height > limits.max_image_pixels:
            raise RequestError(413, f"{where}: image of {width}x{height} pixels is over this server's limit of "
                                    f"{limits.max_image_pixels} pixels", code="image_too_large")
        return as_rgb(img)
    except (OSError, Image.DecompressionBombError, ValueError) as e:
        raise _bad(f"{where}: not a readable image ({e})") from None


def image_bytes(url: str, where: str, image_root: Optional[str]) -> bytes:
    if url.startswith("data:"):
        header, _, payload = url.partition(",")
        if not header.endswith(";base64"):
            raise _bad(f"{where}: a data URL must be base64 (data:image/png;base64,...)")
        try:
            return base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise _bad(f"{where}: the data URL's base64 does not decode") from None
    if url.startswith(("http://", "https://")):
        raise _bad(f"{where}: image URLs are not fetched (this server reads no network); send the image as a data "
                   "URL: data:image/png;base64,...", "messages")
    path = url[len("file://"):] if url.startswith("file://") else url
    if image_root is None:
        raise RequestError(403, f"{where}: local image paths are not allowed (start the server with --image_root "
                                "to allow a folder); send the image as a data URL")
    root = os.path.realpath(image_root)
    real = os.path.realpath(os.path.join(root, path))
    if os.path.commonpath([root, real]) != root:
        raise RequestError(403, f"{where}: {path!r} is outside the allowed image root")
    try:
        with open(real, "rb") as f:
            return f.read()
    except OSError:
        raise _bad(f"{where}: no readable image at {path!r} under the image root") from None


def read_content(content, where: str, images: list, limits: ServeLimits, image_root: Optional[str]):
    """A message's content for the chat template, as a list of parts (a string is one text part: PaddleOCR-VL's
    template reads only parts, and drops a string without a word); its images opened and appended to ``images``."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise _bad(f"{where}.content must be a string or a list of parts", "messages")
    parts = []
    for j, part in enumerate(content):
        here = f"{where}.content[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "image_url":
            url = part.get("image_url")
            url = url.get("url") if isinstance(url, dict) else url
            if not isinstance(url, str):
                raise _bad(f"{here}.image_url.url must be a string", "messages")
            if len(images) >= limits.max_images:
                raise RequestError(413, f"more than {limits.max_images} images in one request", code="too_many_images")
            images.append(open_image(image_bytes(url, here, image_root), here, limits))
            parts.append({"type": "image"})
        else:
            raise _bad(f"{here}: expected {{'type': 'text', 'text': ...}} or {{'type': 'image_url', 'image_url': "
                       "{'url': ...}}", "messages")
    return parts


def parse_chat_request(raw: bytes, served_model: str, limits: ServeLimits,
                       image_root: Optional[str] = None) -> ChatRequest:
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        raise _bad("the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise _bad("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str):
        raise _bad("'model' is required", "model")
    if model != served_model:
        raise RequestError(404, f"model {model!r} not found; this server serves {served_model!r}",
                           code="model_not_found", param="model")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("'messages' must be a non-empty list", "messages")
    if len(messages) > limits.max_messages:
        raise RequestError(413, f"more than {limits.max_messages} messages")
    images, chat = [], []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise _bad(f"messages[{i}] needs a role among {', '.join(ROLES)}", "messages")
        chat.append({"role": message["role"],
                     "content": read_content(message.get("content"), f"messages[{i}]", images, limits, image_root)})
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    max_tokens = _number({"max_tokens": max_tokens}, "max_tokens", limits.max_tokens, 1, limits.max_tokens, True)
    sampling = SamplingParams(max_new_tokens=max_tokens, temperature=float(_number(body, "temperature", 1.0, 0, 2)),
                              top_p=float(_number(body, "top_p", 1.0, 1e-6, 1)))
    stop = body.get("stop") or []
    stop = [stop] if isinstance(stop, str) else stop
    if not (isinstance(stop, list) and len(stop) <= limits.max_stop and all(isinstance(s, str) and s for s in stop)):
        raise _bad(f"'stop' must be a string or a list of at most {limits.max_stop} non-empty strings", "stop")
    stream, return_token_ids = (_flag(body, key) for key in ("stream", "return_token_ids"))
    return ChatRequest(messages=chat, images=images, sampling=sampling,
                       n=_number(body, "n", 1, 1, limits.max_n, True), stop=stop, stream=stream,
                       return_token_ids=return_token_ids)


class PromptMeter:
    """How many tokens a request's prompt is, counted in the request's own thread before it is queued: the chat
    template's text, each image's placeholder counted as the tokens the processor expands it to (from the image's
    size; no pixels are processed). Over ``max_prompt_tokens`` is a 400 naming the limit.

    It counts with its own copy of the tokenizer: the engine thread's processor call sets the shared tokenizer's
    padding, and the Rust tokenizer refuses a call from another thread while that happens ("Already borrowed")."""

    def __init__(self, processor, max_prompt_tokens: int):
        self.processor, self.max_prompt_tokens = processor, max_prompt_tokens
        self.tokenizer = copy.deepcopy(processor.tokenizer.backend_tokenizer)
        image_processor = processor.image_processor
        self.image_processor, self.tokens_per_patch = image_processor, 1 / image_processor.merge_size ** 2

    def image_tokens(self, image: Image.Image) -> int:
        """Qwen's image processors count an image's patches (``get_number_of_image_patches``); PaddleOCR-VL's has
        no such method and gives the resized grid (``get_smarted_resize``)."""
        processor = self.image_processor
        if hasattr(processor, "get_number_of_image_patches"):
            patches = processor.get_number_of_image_patches(image.height, image.width, {})
        else:
            _, (rows, columns) = processor.get_smarted_resize(image.height, image.width)
            patches = rows * columns
        return int(patches * self.tokens_per_patch)

    def check(self, request: ChatRequest) -> None:
        """Sets ``request.prompt``; raises the 400 when it is too long."""
        request.prompt = self.processor.apply_chat_template(request.messages, tokenize=False,
                                                            add_generation_prompt=True)
        # each image is one placeholder token in the text, expanded by the processor
        tokens = len(self.tokenizer.encode(request.prompt).ids) + sum(self.image_tokens(i) - 1 for i in request.images)
        if tokens > self.max_prompt_tokens:
            raise RequestError(400, f"the prompt is {tokens} tokens (text and images), over this server's limit of "
                                    f"{self.max_prompt_tokens} (--max_prompt_tokens)", code="context_length_exceeded",
                               param="messages")
