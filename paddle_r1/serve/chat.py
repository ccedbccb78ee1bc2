"""A chat-completions request read and checked: every mistake is a ``RequestError`` with its HTTP status and a
message naming the field, raised before the request reaches the model.

Images come as data URLs (``data:image/png;base64,...``). An http(s) URL is refused (the server fetches nothing:
it may run where there is no network, and fetching would let a client make it request any address); a local path
(``file://`` or plain) only under the ``--image_root`` the server was started with.

Videos (``{"type": "video_url", "video_url": {"url": ...}}``, as vLLM takes them) come the same three ways: a clip
as a data URL (``data:video/mp4;base64,...``, any container FFmpeg reads, or a GIF / WebP animation), a list of
frames as vLLM reads one (``data:video/jpeg;base64,<frame>,<frame>,...``: base64 images joined by commas, at the
server's frames-folder rate, ``video_frames_fps``), or the path of a clip or of a folder of frames under
``--image_root``. Each is read as training reads a sample's clip (``data/video.py``: frames picked and sized for the
model's family) in the request's own thread, and a clip that does not read is a 400 naming its part.
"""
from __future__ import annotations

import base64
import binascii
import copy
import dataclasses
import io
import json
import math
import mimetypes
import os
import tempfile
from dataclasses import dataclass, field
from typing import Callable, Optional

from PIL import Image

from ..data.images import as_rgb
from ..data.samples import DataError
from ..generation.rollout import SamplingParams
from ..models.generation_defaults import SAMPLING_BOUNDS, within
from .limits import ServeLimits

ROLES = ("system", "user", "assistant")
# the sampling settings a request may give (OpenAI's, and vLLM's extra top_k, min_p, repetition_penalty) and vLLM's
# values for those neither the request nor the checkpoint gives
NEUTRAL_SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0}
# OpenAI's and vLLM's request settings this server does not carry out, and the values that ask for nothing (a
# request giving one of those is served; another value is a 400 rather than an answer made without it)
NOT_HONOURED = {"frequency_penalty": (None, 0, 0.0), "presence_penalty": (None, 0, 0.0), "logit_bias": (None, {}),
                "logprobs": (None, False), "top_logprobs": (None, 0), "tools": (None, []), "response_format": (
                    None, {"type": "text"}), "best_of": (None, 1), "use_beam_search": (None, False)}


class RequestError(Exception):
    def __init__(self, status: int, message: str, code: Optional[str] = None, param: Optional[str] = None):
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param

    def body(self) -> dict:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}


@dataclass
class ChatRequest:
    messages: list  # for the chat template: {"role", "content": [{"type": "image" | "video"} | {"type": "text", ...}]}
    images: list  # PIL images in the order the messages show them
    sampling: SamplingParams
    n: int
    stop: list
    stream: bool
    return_token_ids: bool = False  # vLLM's extension: the reply carries the prompt's and each choice's token ids
    prompt: str = ""  # the messages through the chat template, as the model reads them (``PromptMeter.check``)
    videos: list = field(default_factory=list)  # clips (``data.video.Clip``) in the order the messages show them
    seed: Optional[int] = None  # the random numbers of this request's draws (``engine.request_uniforms``)

    @property
    def batch_key(self) -> tuple:
        """Requests with equal keys can share one decode (same sampling and number of completions)."""
        return dataclasses.astuple(self.sampling), self.n


@dataclass
class MediaReaders:
    """How a server reads what a request sends: images under ``image_root``, and clips by ``read_clip`` (the model's
    ``generation.generator.clip_reader``; None for a model that reads no video, with ``no_video`` saying why)."""

    image_root: Optional[str] = None
    read_clip: Optional[Callable] = None
    no_video: str = "this model reads no video"


def _bad(message: str, param: Optional[str] = None) -> RequestError:
    return RequestError(400, message, param=param)


def _number(body: dict, key: str, default, low: float, high: float, integer: bool = False):
    value = body.get(key, default)
    if value is None:
        return default
    if not within(value, -math.inf, math.inf, integer):
        raise _bad(f"'{key}' must be {'an integer' if integer else 'a number'}, got {value!r}", key)
    if not within(value, low, high, integer):
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


def _data_url(url: str, where: str) -> tuple[str, str]:
    """A base64 data URL's media type and payload (still base64)."""
    header, _, payload = url.partition(",")
    if not header.endswith(";base64"):
        raise _bad(f"{where}: a data URL must be base64 (data:image/png;base64,...)")
    return header[len("data:"):-len(";base64")].lower(), payload


def _decoded(payload: str, where: str) -> bytes:
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise _bad(f"{where}: the data URL's base64 does not decode") from None


def _local_path(url: str, where: str, image_root: Optional[str], what: str) -> str:
    """The real path a local ``url`` names under ``image_root``; http(s) refused, anything outside the root a 403."""
    if url.startswith(("http://", "https://")):
        raise _bad(f"{where}: {what} URLs are not fetched (this server reads no network); send the {what} as a data "
                   "URL", "messages")
    path = url[len("file://"):] if url.startswith("file://") else url
    if image_root is None:
        raise RequestError(403, f"{where}: local {what} paths are not allowed (start the server with --image_root "
                                f"to allow a folder); send the {what} as a data URL")
    root = os.path.realpath(image_root)
    real = os.path.realpath(os.path.join(root, path))
    if os.path.commonpath([root, real]) != root:
        raise RequestError(403, f"{where}: {path!r} is outside the allowed image root")
    return real


def image_bytes(url: str, where: str, image_root: Optional[str]) -> bytes:
    if url.startswith("data:"):
        return _decoded(_data_url(url, where)[1], where)
    real = _local_path(url, where, image_root, "image")
    try:
        with open(real, "rb") as f:
            return f.read()
    except OSError:
        raise _bad(f"{where}: no readable image at {url!r} under the image root") from None


FRAME_TYPES = ("video/jpeg", "video/png")  # vLLM's media types of a list of frames: base64 images joined by ","


def read_video(url: str, where: str, readers: MediaReaders, limits: ServeLimits):
    """The clip a ``video_url`` sends, read by ``readers.read_clip`` (a data URL through a temporary file or folder of
    frames); a clip that does not read is a 400 naming ``where``."""
    if readers.read_clip is None:
        raise _bad(f"{where}: {readers.no_video}", "messages")
    if not url.startswith("data:"):
        return _read_clip(readers.read_clip, _local_path(url, where, readers.image_root, "video"), where)
    media, payload = _data_url(url, where)
    with tempfile.TemporaryDirectory(prefix="paddle_r1_video_") as folder:
        if media in FRAME_TYPES:
            frames = payload.split(",")
            if len(frames) > limits.max_video_frames:
                raise RequestError(413, f"{where}: {len(frames)} frames, over this server's limit of "
                                        f"{limits.max_video_frames}", code="too_many_frames")
            for i, frame in enumerate(frames):
                open_image(_decoded(frame, f"{where} frame {i}"), f"{where} frame {i}", limits).save(
                    os.path.join(folder, f"{i:06d}.png"))
            return _read_clip(readers.read_clip, folder, where)
        if not media.startswith(("video/", "image/gif", "image/webp")):
            raise _bad(f"{where}: a video data URL's type must be video/... (or image/gif, image/webp), got "
                       f"{media!r}", "messages")
        path = os.path.join(folder, "clip" + (mimetypes.guess_extension(media) or ".mp4"))
        with open(path, "wb") as f:
            f.write(_decoded(payload, where))
        return _read_clip(readers.read_clip, path, where)


def _read_clip(read_clip: Callable, path: str, where: str):
    try:
        return read_clip(path)
    except DataError as e:  # its text names the server's own file: the client knows its part instead
        raise _bad(f"{where}: {str(e).replace(path, 'the video')}", "messages") from None



def _media_url(part: dict, media: str, here: str, count: int, limit: int) -> str:
    """The url of an ``image_url`` / ``video_url`` part (a string, or OpenAI's ``{"url": ...}``), refused when it is
    not a string or the request already holds ``limit`` such parts (413)."""
    url = part.get(f"{media}_url")
    url = url.get("url") if isinstance(url, dict) else url
    if not isinstance(url, str):
        raise _bad(f"{here}.{media}_url.url must be a string", "messages")
    if count >= limit:
        raise RequestError(413, f"more than {limit} {media}s in one request", code=f"too_many_{media}s")
    return url


def read_content(content, where: str, images: list, limits: ServeLimits, readers: MediaReaders,
                 videos: Optional[list] = None):
    """A message's content for the chat template, as a list of parts (a string is one text part: PaddleOCR-VL's
    template reads only parts, and drops a string without a word); its images opened and appended to ``images``,
    its clips read and appended to ``videos``."""
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
            url = _media_url(part, "image", here, len(images), limits.max_images)
            images.append(open_image(image_bytes(url, here, readers.image_root), here, limits))
            parts.append({"type": "image"})
        elif kind == "video_url" and videos is not None:
            url = _media_url(part, "video", here, len(videos), limits.max_videos)
            videos.append(read_video(url, here, readers, limits))
            parts.append({"type": "video"})
        else:
            raise _bad(f"{here}: expected {{'type': 'text', 'text': ...}}, {{'type': 'image_url', 'image_url': "
                       "{'url': ...}} or {'type': 'video_url', 'video_url': {'url': ...}}", "messages")
    return parts


def _sampling(body: dict, defaults: dict, max_tokens: int) -> SamplingParams:
    """The request's sampling: each of ``NEUTRAL_SAMPLING`` from ``body``, else from ``defaults`` (the checkpoint's
    generation_config.json, ``models.generation_defaults``: vLLM's ``--generation-config auto``; the Qwen2-VL and
    Qwen2.5-VL Instruct files give top_k 1 and repetition_penalty 1.05, so a request that says nothing is answered
    greedily with that penalty, by vLLM as here), else neutral. ``top_k`` -1 (vLLM's "all tokens") is 0 here."""
    values = {name: _number(body, name, defaults.get(name, neutral), *SAMPLING_BOUNDS[name])
              for name, neutral in NEUTRAL_SAMPLING.items()}
    top_k = max(values.pop("top_k"), 0)
    return SamplingParams(max_new_tokens=max_tokens, logprobs=False, top_k=top_k,
                          **{name: float(value) for name, value in values.items()})


def parse_chat_request(raw: bytes, served_model: str, limits: ServeLimits,
                       readers: MediaReaders = MediaReaders(), sampling_defaults: Optional[dict] = None
                       ) -> ChatRequest:
    """The request in ``raw``; ``sampling_defaults``: the settings it may leave out, from the served checkpoint
    (``models.generation_defaults``)."""
    sampling_defaults = sampling_defaults or {}
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
    images, videos, chat = [], [], []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise _bad(f"messages[{i}] needs a role among {', '.join(ROLES)}", "messages")
        chat.append({"role": message["role"], "content": read_content(message.get("content"), f"messages[{i}]",
                                                                      images, limits, readers, videos)})
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    default_max_tokens = min(sampling_defaults.get("max_tokens", limits.max_tokens), limits.max_tokens)
    max_tokens = _number({"max_tokens": max_tokens}, "max_tokens", default_max_tokens, 1, limits.max_tokens, True)
    sampling = _sampling(body, sampling_defaults, max_tokens)
    stop = body.get("stop") or []
    stop = [stop] if isinstance(stop, str) else stop
    if not (isinstance(stop, list) and len(stop) <= limits.max_stop and all(isinstance(s, str) and s for s in stop)):
        raise _bad(f"'stop' must be a string or a list of at most {limits.max_stop} non-empty strings", "stop")
    stream, return_token_ids = (_flag(body, key) for key in ("stream", "return_token_ids"))
    for name, neutral in NOT_HONOURED.items():
        if body.get(name) not in neutral:
            raise _bad(f"'{name}' is not supported by this server; leave it out (or {neutral[-1]!r})", name)
    seed = _number(body, "seed", None, 0, 2 ** 63 - 1, True)
    return ChatRequest(messages=chat, images=images, sampling=sampling,
                       n=_number(body, "n", 1, 1, limits.max_n, True), stop=stop, stream=stream, videos=videos,
                       return_token_ids=return_token_ids, seed=seed)


class PromptMeter:
    """How many tokens a request's prompt is, counted in the request's own thread before it is queued: the chat
    template's text, each image's placeholder counted as the tokens the processor expands it to (from the image's
    size; no pixels are processed), each clip's as its frame pairs' tokens and, for Qwen3-VL, at most
    ``memory.PAIR_TEXT_TOKENS`` of time text per pair. Over ``max_prompt_tokens`` is a 400 naming the limit.

    It counts with its own copy of the tokenizer: the engine thread's processor call sets the shared tokenizer's
    padding, and the Rust tokenizer refuses a call from another thread while that happens ("Already borrowed")."""

    def __init__(self, processor, max_prompt_tokens: int, pair_text_tokens: int = 0):
        self.processor, self.max_prompt_tokens = processor, max_prompt_tokens
        self.tokenizer = copy.deepcopy(processor.tokenizer.backend_tokenizer)
        image_processor = processor.image_processor
        self.image_processor, self.tokens_per_patch = image_processor, 1 / image_processor.merge_size ** 2
        self.factor = image_processor.patch_size * image_processor.merge_size
        self.pair_text_tokens = pair_text_tokens

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

    def video_tokens(self, clip) -> int:
        """A clip's tokens: frame pairs x merged tokens per frame, and its time text."""
        pairs, height, width = len(clip.frames) // 2, clip.frames.shape[1], clip.frames.shape[2]
        return pairs * ((height // self.factor) * (width // self.factor) + self.pair_text_tokens)

    def check(self, request: ChatRequest) -> None:
        """Sets ``request.prompt``; raises the 400 when it is too long."""
        request.prompt = self.processor.apply_chat_template(request.messages, tokenize=False,
                                                            add_generation_prompt=True)
        # each image is one placeholder token in the text, expanded by the processor
        tokens = len(self.tokenizer.encode(request.prompt).ids) + sum(self.image_tokens(i) - 1 for i in request.images)
        tokens += sum(self.video_tokens(clip) - 1 for clip in request.videos)
        if tokens > self.max_prompt_tokens:
            raise RequestError(400, f"the prompt is {tokens} tokens (text, images, videos), over this server's limit "
                                    f"of {self.max_prompt_tokens} (--max_prompt_tokens)",
                               code="context_length_exceeded", param="messages")
