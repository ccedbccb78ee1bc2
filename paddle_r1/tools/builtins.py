"""The built-in tools: ``crop`` and ``zoom`` a region of one of the sample's images, and ``frames``: a span of one
of the sample's clips at a higher frame rate.

A box is ``bbox_2d`` [x1, y1, x2, y2] in the model's coordinate system (``coord_system``), converted to the original
image's pixels by ``models.coords.box_to_original``, the conversion the rewards use; ``image`` (default 0) picks which
of the sample's images (the prompt's: a tool's own output images are not addressable). A box reaching past the image
is clipped to it; a box with nothing left inside the image is an error.

A span is ``start`` and ``end`` in seconds of the clip ``video`` (default 0; the prompt's clips); like a box, a span
reaching past the clip is clipped to it, and a span with fewer than 2 of the clip's frames is an error.

A tool is ``tool(arguments: dict, context: ToolContext)`` returning text, an image, or (text, [images and clips]); it
raises ``ToolError`` (or anything else) when it cannot answer, and the toolbox hands the message to the model.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
from PIL import Image

from ..data.clip_spans import SpanReader
from ..data.video import TEMPORAL_PATCH
from ..models.coords import as_box, box_to_original, is_number

MAX_ASPECT_RATIO = 200  # the Qwen-VL processors refuse images more elongated than this
MAX_ZOOM = 4.0


class ToolError(ValueError):
    """The arguments do not make a call the tool can answer; the message is for the model."""


@dataclass
class ToolContext:
    """What a tool call may look at: the sample's images as opened (originals), their sizes before and after the
    processor's resize, and the model's coordinate system; its clips (paths, and each ``video.Clip`` as the prompt
    showed it) and the reader of their frames for this model."""

    images: list
    image_sizes: list  # [(w, h)] originals
    input_sizes: list  # [(w, h)] as the processor resized them
    coord_system: str
    videos: list = field(default_factory=list)  # the clips' paths
    clips: list = field(default_factory=list)  # the clips as the prompt read them
    spans: Optional[SpanReader] = None


def call_region(arguments: dict, image_sizes: list, input_sizes, coord_system: str
                ) -> tuple[int, tuple[int, int, int, int]]:
    """Which of the sample's images ``arguments["image"]`` picks (default 0) and the box ``arguments["bbox_2d"]``
    in its pixels: whole pixels covering the converted box, clipped to the image. ``ToolError`` naming what is
    wrong. The crop the tool cuts, the region ``crop_covers_target`` scores and the box the report draws."""
    index = _picked(arguments, "image", len(image_sizes))
    box = as_box(arguments.get("bbox_2d"))
    if box is None:
        raise ToolError(f"'bbox_2d' must be [x1, y1, x2, y2] with x1 <= x2 and y1 <= y2, got "
                        f"{arguments.get('bbox_2d')!r}")
    width, height = image_sizes[index]
    # to a millionth of a pixel first, so a box converted from whole pixels and back covers just those pixels
    x1, y1, x2, y2 = (round(v, 6) for v in box_to_original(box, coord_system, (width, height),
                                                           input_sizes[index] if input_sizes else None))
    left, top = max(0, math.floor(x1)), max(0, math.floor(y1))
    right, bottom = min(width, math.ceil(x2)), min(height, math.ceil(y2))
    if right <= left or bottom <= top:
        raise ToolError(f"'bbox_2d' {box} covers no pixel of the {width}x{height} image")
    if max(right - left, bottom - top) / min(right - left, bottom - top) > MAX_ASPECT_RATIO:
        raise ToolError(f"'bbox_2d' {box} is more elongated than {MAX_ASPECT_RATIO}:1")
    return index, (left, top, right, bottom)


def _picked(arguments: dict, key: str, count: int) -> int:
    """Which of the sample's ``count`` images or clips ``arguments[key]`` names (default 0)."""
    if not count:
        raise ToolError(f"the sample has no {key}")
    index = arguments.get(key, 0)
    if not is_number(index) or not math.isfinite(index) or index != int(index) or not 0 <= index < count:
        raise ToolError(f"'{key}' must be an index from 0 to {count - 1}, got {index!r}")
    return int(index)


def region_in_pixels(arguments: dict, context: ToolContext) -> tuple[Image.Image, tuple[int, int, int, int]]:
    """The image the call picks and its region (``call_region``)."""
    index, pixels = call_region(arguments, context.image_sizes, context.input_sizes, context.coord_system)
    return context.images[index], pixels


def crop(arguments: dict, context: ToolContext):
    """The region ``bbox_2d`` of the image, at its original resolution; the text names the box as the call did (the
    model's own units). A short text matters to a small model: the tiny zoom task's SFT read the pattern in the crop
    (1.00 given the ideal crop, ``benchmarks/tool_learning.py``, seed 0) with this text, and at chance (0.20) with a
    longer one giving the box in original pixels."""
    image, pixels = region_in_pixels(arguments, context)
    return f"the crop of {_box_text(arguments)}", [image.crop(pixels)]


def zoom(arguments: dict, context: ToolContext):
    """The region ``bbox_2d`` scaled up ``factor`` times (default 2, at most 4; bicubic)."""
    factor = arguments.get("factor", 2)
    if not is_number(factor) or not 1 <= factor <= MAX_ZOOM:
        raise ToolError(f"'factor' must be a number from 1 to {MAX_ZOOM:g}, got {factor!r}")
    image, pixels = region_in_pixels(arguments, context)
    region = image.crop(pixels)
    size = (max(1, round(region.width * factor)), max(1, round(region.height * factor)))
    return f"the crop of {_box_text(arguments)} zoomed {factor:g}x", [region.resize(size, Image.BICUBIC)]


def _box_text(arguments: dict) -> str:
    """The called box as the model wrote it, and which image when the call named one."""
    image = arguments.get("image", 0)
    return f"{arguments['bbox_2d']}" + (f" of image {image}" if image else "")


def call_span(arguments: dict, clip) -> tuple[int, int]:
    """The first and last of ``clip``'s own frames (``video.Clip``, its frame i at i / its frame rate) within the span
    ``arguments["start"]`` to ``arguments["end"]`` seconds, clipped to the clip; ``ToolError`` naming what is wrong."""
    span = [arguments.get("start"), arguments.get("end")]
    for key, value in zip(("start", "end"), span):
        if not is_number(value) or not math.isfinite(value):
            raise ToolError(f"'{key}' must be a number of seconds, got {value!r}")
    start, end = span
    if end <= start:
        raise ToolError(f"'end' ({end:g} s) must come after 'start' ({start:g} s)")
    if end <= 0 or start >= clip.duration:
        raise ToolError(f"the span {start:g} to {end:g} s is outside the clip, which lasts {clip.duration:.2f} s")
    rate, total = clip.frame_rate, clip.source_frames
    first = max(0, math.ceil(round(start * rate, 6)))
    last = min(total - 1, math.floor(round(end * rate, 6)))
    if last - first + 1 < TEMPORAL_PATCH:
        raise ToolError(f"the span {start:g} to {end:g} s holds {max(0, last - first + 1)} frame(s) of the clip "
                        f"({rate:g} frames per second); a span needs {TEMPORAL_PATCH}, at least "
                        f"{TEMPORAL_PATCH / rate:.2f} s")
    return first, last


def frames(arguments: dict, context: ToolContext):
    """The span ``start`` to ``end`` seconds of clip ``video`` as a clip of ``count`` of its frames (default: as many
    as the prompt's clip has, so the span costs what the whole clip did and is seen at a higher rate), spread evenly
    over the span, never more than the frames it holds nor ``video_max_frames``, rounded down to whole frame pairs;
    each frame sized by the job's pixel budgets for that count. The text names the span the frames cover."""
    index = _picked(arguments, "video", len(context.clips))
    clip = context.clips[index]
    first, last = call_span(arguments, clip)
    count = arguments.get("count", len(set(clip.indices or range(len(clip.frames)))))
    if not is_number(count) or count != int(count) or count < TEMPORAL_PATCH:
        raise ToolError(f"'count' must be a whole number of frames, at least {TEMPORAL_PATCH}, got {count!r}")
    count = min(int(count), last - first + 1, context.spans.sampling.max_frames)
    count -= count % TEMPORAL_PATCH
    indices = np.linspace(first, last, count).round().astype(int).tolist()
    rate = clip.frame_rate
    text = f"the frames from {first / rate:.2f} to {last / rate:.2f} s" + (f" of video {index}" if index else "")
    return text, [context.spans.read(context.videos[index], clip, indices)]


BUILTIN_TOOLS = {"crop": crop, "zoom": zoom, "frames": frames}
