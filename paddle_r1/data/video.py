"""Reading clips: a video file (PyAV), a folder or a list of frames, or a GIF/WebP animation, sampled as Qwen's
``qwen-vl-utils`` (``vision_process.py``; its 0.0.14 ``fetch_video`` is the golden of tests/test_video_messages.py)
samples them, so a model sees the frames it was trained on.

Why PyAV: its wheels bundle FFmpeg, so ``pip install paddle_r1`` reads MP4/WebM/MKV/AVI with no system library, and
no demuxing is written here. It is imported on the first clip read, so importing paddle_r1 stays cheap.
GIF and WebP animations are read by Pillow (FFmpeg's WebP decoder reads no animation).

Sampling (qwen-vl-utils' ``smart_nframes`` and ``fetch_video``):

- frames kept: n = total / clip_fps * ``fps`` (clip time at ``fps`` frames per second), clamped to
  [``min_frames`` rounded up to 2, ``max_frames`` rounded down to 2] and to the clip's frame count, then rounded down
  to the temporal patch (2): the model's vision tower joins frames in pairs. ``nframes`` (a clip's own key) fixes n
  instead, rounded to the nearest pair, and must then lie in [2, total] (qwen-vl-utils refuses it otherwise).
  The frames are spread evenly: indices round(linspace(0, total - 1, n)).
- a clip of one frame (qwen-vl-utils refuses it) is kept as the model's video processor takes it: its frame
  repeated into a pair (transformers' and paddleformers' processors pad a clip to whole temporal patches so).
- a list of frame files (a message part's ``"video": [paths]``) is kept whole, as qwen-vl-utils 0.0.14 keeps it, an odd
  count padded with its last frame; its rate is ``frames_fps`` (the part's ``sample_fps`` or ``fps``).
- their rate: ``sample_fps`` = n / total * clip_fps, from which Qwen2.5-VL's ``second_per_grid_ts`` = 2 / sample_fps
  (the seconds each pair of frames spans: its M-RoPE time positions are absolute).
- their size: every frame resized (bicubic) to ``smart_resize`` (sides multiples of the processor's factor, 28)
  with min ``min_pixels`` and max min(``max_pixels``, max(min(768 x 28 x 28, ``total_pixels`` / n * 2),
  1.05 x ``min_pixels``)) (n counting a padded frame): the clip's pixels (so its tokens) stay within ``total_pixels``
  however long it is, and a frame never exceeds 768 tokens' pixels (qwen-vl-utils' own cap). A list of frames is
  first sized as qwen-vl-utils 0.0.14's ``fetch_video`` has ``fetch_image`` size each of its images: sides multiples
  of twice the factor (56: it passes the factor where ``fetch_image`` takes the patch size), within the part's own
  min / max pixels, else 4 to 16384 of those 56 x 56 tokens; then as a clip from that size.

Qwen3-VL's video processor (transformers 5.3's and paddleformers' ``Qwen3VLVideoProcessor``) budgets the clip as a
whole instead (``VideoSampling.clip_pixels``, set from the model's processor by ``for_processor``):

- frames kept: n = int(total / clip_fps * ``fps``), clamped to [``min_frames``, ``max_frames``] and to the clip's
  frame count, not rounded: an odd count gets its last frame (and that frame's index) repeated, as the processor
  pads it, so the clip always fills whole temporal patches.
- their size: its video ``smart_resize`` (sides multiples of 32): the sides rounded, then, when t x h x w (t the
  count rounded up to 2) is above the processor's ``size["longest_edge"]`` (capped by ``total_pixels``), scaled down
  by sqrt(n x H x W / max), or when below its ``size["shortest_edge"]`` scaled up the same way.
- the frame indices and the clip's own fps go to the processor as the clip's metadata: it writes each temporal
  patch's time, the mean of its two frames' idx / fps, as text before the patch (``"<1.2 seconds>"``).

Memory stays bounded by those budgets: frames are decoded one at a time and only the kept ones, resized, are kept.
A folder of frames is a clip at ``frames_fps`` frames per second, its files in name order.

Every failure (missing, empty, truncated, corrupt, an unknown codec, no video stream, no frame) is a ``DataError``
naming the file: FFmpeg's own errors become its message, never a traceback.

A clip's own sampling keys (a message part's ``fps``, ``nframes``, ... : ``part_options``) override the job's for
that clip only (``VideoSampling.with_options``).
"""
from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np
from PIL import Image, ImageSequence

from ..errors import ConfigError
from .samples import DataError

TEMPORAL_PATCH = 2  # qwen-vl-utils' FRAME_FACTOR: Qwen-VL towers join frames in pairs
FRAME_MAX_TOKENS = 768  # qwen-vl-utils' VIDEO_MAX_TOKEN_NUM: a frame's pixels never exceed this x factor^2
IMAGE_TOKENS = (4, 16384)  # qwen-vl-utils' IMAGE_MIN_TOKEN_NUM, IMAGE_MAX_TOKEN_NUM: its image bounds (x factor^2)
ANIMATION_SUFFIXES = (".gif", ".webp")
FRAME_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp")
DEFAULT_ANIMATION_FPS = 10.0  # the rate of an animation whose frames state no duration


# the config keys ``VideoSampling.from_config`` reads (eval/test_video.py takes them as options too)
CONFIG_KEYS = ("video_fps", "video_min_frames", "video_max_frames", "video_min_pixels", "video_max_pixels",
               "video_total_pixels", "video_frames_fps")


# a video message part's sampling keys (qwen-vl-utils' ``fetch_video``), each a ``VideoSampling`` field of that name
PART_COUNTS = ("min_frames", "max_frames", "nframes", "min_pixels", "max_pixels", "total_pixels")
PART_RATES = ("fps", "sample_fps")  # sample_fps: a list of frames' rate (qwen-vl-utils 0.0.14; 0.0.11 reads fps)
PART_KEYS = ("type", "video", *PART_RATES, *PART_COUNTS)


def part_options(part: dict) -> dict:
    """A video message part's own sampling (``{"type": "video", "video": path | [frame paths], "fps", "min_frames",
    "max_frames", "nframes", "min_pixels", "max_pixels", "total_pixels"}``) as the ``VideoSampling`` fields it sets,
    checked: counts whole numbers and rates numbers, all positive and finite, not both ``fps`` and ``nframes``
    (qwen-vl-utils takes one); a ``DataError`` naming the key otherwise, and for a key this reader does not know
    (``video_start``, ``resized_height``, ...: it would change the frames, so it is not passed over). A list of
    frames is kept whole: its rate is ``sample_fps``, else ``fps`` (``frames_fps``); the frame keys do not apply to
    it, as in qwen-vl-utils. A minimum above its maximum is refused once the job's keys fill the rest
    (``VideoSampling.with_options``). A key whose value is null is not given (a parquet column of parts gives every
    part every key any of them has)."""
    part = {name: value for name, value in part.items() if value is not None}
    for name in part:
        if name not in PART_KEYS:
            raise DataError(f"key {name!r} is not read here (it reads {', '.join(PART_KEYS[2:])})")
    if "fps" in part and "nframes" in part:
        raise DataError("'fps' and 'nframes' are both given; qwen-vl-utils takes one of them")
    options = {}
    for name in (*PART_RATES, *PART_COUNTS):
        if name not in part:
            continue
        value, whole = part[name], name in PART_COUNTS
        if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0
                or (whole and value != int(value))):
            raise DataError(f"{name!r} must be a positive {'whole number' if whole else 'number'}, got "
                            f"{value!r}")
        options[name] = int(value) if whole else float(value)
    rate = options.pop("sample_fps", None)
    if isinstance(part.get("video"), list):
        rate = rate or options.get("fps")
        image = [options.get("min_pixels"), options.get("max_pixels")]
        options = {k: v for k, v in options.items() if k.endswith("_pixels")}
        return {**options, **({"frames_fps": rate} if rate else {}), **({"image_pixels": image} if any(image) else {})}
    return options


@dataclass(frozen=True)
class VideoSampling:
    """How frames are picked and sized (config keys ``video_*``); the defaults are qwen-vl-utils'."""

    fps: float = 2.0
    min_frames: int = 4
    max_frames: int = 768
    min_pixels: int = 128 * 28 * 28
    max_pixels: int = 768 * 28 * 28
    total_pixels: int = int(128000 * 28 * 28 * 0.9)
    frames_fps: float = 2.0  # the rate of a folder (or a list) of frames
    nframes: Optional[int] = None  # a clip's own fixed frame count (a message part's ``nframes``); None: by ``fps``
    # a list of frames' own [min_pixels, max_pixels] (None each: qwen-vl-utils' image defaults, 4 and 16384 tokens'
    # pixels), within which qwen-vl-utils first sizes each of its frames as an image
    image_pixels: Optional[list] = None
    # Qwen3-VL's video processor: (min, max) pixels of the clip's frames together, frame count not rounded to pairs;
    # None: qwen-vl-utils' per-frame budgets above (Qwen2-VL, Qwen2.5-VL)
    clip_pixels: Optional[tuple[int, int]] = None

    @classmethod
    def from_config(cls, config) -> "VideoSampling":
        """The config's ``video_*`` keys (their bounds checked already); a ConfigError when a minimum exceeds its
        maximum."""
        for low, high in (("video_min_frames", "video_max_frames"), ("video_min_pixels", "video_max_pixels")):
            if getattr(config, low) > getattr(config, high):
                raise ConfigError(f"config keys {low!r} and {high!r}: {getattr(config, low)} is above "
                                  f"{getattr(config, high)}", keys=(low, high))
        return cls(fps=config.video_fps, min_frames=config.video_min_frames, max_frames=config.video_max_frames,
                   min_pixels=config.video_min_pixels, max_pixels=config.video_max_pixels,
                   total_pixels=config.video_total_pixels, frames_fps=config.video_frames_fps)

    def with_options(self, options: dict) -> "VideoSampling":
        """This sampling with a clip's own keys (``part_options``) in place of the job's; a ``DataError`` naming the
        keys when a minimum is then above its maximum."""
        sampling = replace(self, **options)

        def named(key: str) -> str:
            return repr(key) if key in options else f"the job's video_{key}"

        for low, high in (("min_frames", "max_frames"), ("min_pixels", "max_pixels")):
            if getattr(sampling, low) > getattr(sampling, high):
                raise DataError(f"{named(low)} {getattr(sampling, low)} is above {named(high)} "
                                f"{getattr(sampling, high)}")
        return sampling

    def for_family(self, budget: str, processor_size: dict) -> "VideoSampling":
        """This sampling for a model whose family budgets clips by ``budget`` (``ModelFamily.video_budget``):
        "frame" keeps it as it is; "clip" takes the (min, max) pixels of a clip from its video processor's
        ``processor_size`` (``shortest_edge``, ``longest_edge``: the checkpoint's ``video_preprocessor_config.json``),
        the max capped by ``total_pixels``."""
        if budget == "frame":
            return self
        return replace(self, clip_pixels=(processor_size["shortest_edge"],
                                          min(processor_size["longest_edge"], self.total_pixels)))

    def clip_tokens(self, frames: int, clip_fps: float, size: tuple[int, int], factor: int) -> tuple[int, int]:
        """(frame pairs, merged tokens) of a clip of ``frames`` frames at ``clip_fps`` and ``size`` (w, h), as
        ``read_clip`` samples and sizes it and the processor counts its tokens (the memory estimate's)."""
        count = self.frame_count(frames, clip_fps)
        w, h = self.frame_size(size[0], size[1], count, factor)
        pairs = -(-count // TEMPORAL_PATCH)
        return pairs, pairs * (w // factor) * (h // factor)

    def frame_count(self, total: int, clip_fps: float) -> int:
        """How many of a clip's ``total`` frames to keep (qwen-vl-utils' ``smart_nframes``; with ``clip_pixels``,
        Qwen3-VL's processor's ``sample_frames``): ``nframes`` rounded to pairs when set (a ``DataError`` when that is
        not within [2, total], as qwen-vl-utils refuses it), and the one frame of a 1-frame clip."""
        if self.nframes is not None:
            count = round(self.nframes / TEMPORAL_PATCH) * TEMPORAL_PATCH
            if not TEMPORAL_PATCH <= count <= total:
                raise DataError(f"'nframes' {self.nframes} keeps {count} frames (rounded to pairs), "
                                f"the clip has {total}: it must keep 2 to {total}")
            return count
        if total == 1:
            return 1
        if self.clip_pixels is not None:
            return min(max(int(total / clip_fps * self.fps), self.min_frames), self.max_frames, total)
        low = math.ceil(self.min_frames / TEMPORAL_PATCH) * TEMPORAL_PATCH
        high = math.floor(min(self.max_frames, total) / TEMPORAL_PATCH) * TEMPORAL_PATCH
        wanted = min(max(total / clip_fps * self.fps, low), high, total)
        return math.floor(wanted / TEMPORAL_PATCH) * TEMPORAL_PATCH

    def frame_size(self, width: int, height: int, count: int, factor: int) -> tuple[int, int]:
        """(w, h) every one of ``count`` kept frames is resized to (qwen-vl-utils' ``fetch_video``; with
        ``clip_pixels``, Qwen3-VL's video ``smart_resize`` over the ``count`` frames, before its processor pads them
        to pairs)."""
        if self.clip_pixels is not None:
            from paddleformers.transformers.qwen3_vl.video_processor import smart_resize as clip_resize

            h, w = clip_resize(count, height, width, temporal_factor=TEMPORAL_PATCH, factor=factor,
                               min_pixels=self.clip_pixels[0], max_pixels=self.clip_pixels[1])
            return w, h
        from paddleformers.transformers.qwen2_vl.image_processor_fast import smart_resize

        count += -count % TEMPORAL_PATCH  # qwen-vl-utils budgets a list's frames after padding them to pairs
        cap = min(FRAME_MAX_TOKENS * factor * factor, self.total_pixels / count * TEMPORAL_PATCH)
        budget = min(self.max_pixels, max(cap, int(self.min_pixels * 1.05)))
        h, w = smart_resize(height, width, factor=factor, min_pixels=self.min_pixels, max_pixels=budget)
        return w, h


@dataclass
class Clip:
    frames: np.ndarray  # [T, H, W, 3] uint8, resized, T a multiple of 2
    fps: float  # kept frames per second of clip time (qwen-vl-utils' sample_fps)
    size: tuple  # original (w, h)
    duration: float  # seconds
    indices: Optional[list] = None  # the kept frames' indices in the clip (a padded last one repeats); None: 0..T-1
    source_fps: Optional[float] = None  # the clip's own frame rate; None: ``fps`` (frames given as they are)

    @property
    def frame_rate(self) -> float:
        """The clip's own frames per second (its frame i is at i / this)."""
        return self.source_fps or self.fps

    @property
    def source_frames(self) -> int:
        """How many frames the clip itself holds at ``frame_rate``."""
        return round(self.duration * self.frame_rate)

    @property
    def second_per_grid(self) -> float:
        """Seconds one temporal patch (2 frames) spans: Qwen2.5-VL's ``second_per_grid_ts`` entry."""
        return TEMPORAL_PATCH / self.fps

    def metadata(self) -> dict:
        """The clip as the video processor's ``video_metadata`` takes it: Qwen3-VL's processor writes each temporal
        patch's time, the mean of its frames' index / fps, before the patch."""
        indices = list(range(len(self.frames))) if self.indices is None else list(self.indices)
        return {"total_num_frames": max(self.source_frames, len(indices)), "fps": self.frame_rate,
                "frames_indices": indices}


def shuffled_frames(clip: Clip, rng: np.random.Generator) -> Clip:
    """``clip`` with its frames in a random order and everything else as it was (the times Qwen3-VL writes, the fps
    Qwen2.5-VL places them by): T-GRPO's control, a clip whose order tells nothing (Video-R1 permutes the sampled
    frames the same way, before the processor joins them in pairs)."""
    return replace(clip, frames=clip.frames[rng.permutation(len(clip.frames))])


def read_clip(path, sampling: VideoSampling, factor: int = 28) -> Clip:
    """The clip at ``path`` (a file or a folder; or a list of frame files) sampled and resized by ``sampling``
    (``factor``: the processor's patch x merge size)."""
    if isinstance(path, list):
        return _read_frame_list(path, sampling, factor)
    if os.path.isdir(path):
        return _read_frames_folder(path, sampling, factor)
    check_video_file(path)
    if path.lower().endswith(ANIMATION_SUFFIXES):
        return _read_animation(path, sampling, factor)
    return _read_video_file(path, sampling, factor)


def check_clip(path: str) -> tuple[int, int]:
    """A clip's original (w, h), from its header, its first frame and its last ones: what the loader checks before
    training. A file cut short often keeps a header that states its full length (an MP4 written with its index
    first): its end then does not decode, and it is refused here, not in the middle of a run."""
    if os.path.isdir(path) or path.lower().endswith(ANIMATION_SUFFIXES):
        return read_clip(path, VideoSampling(min_pixels=56 * 56, max_pixels=56 * 56, max_frames=2)).size
    check_video_file(path)
    with open_video_stream(path) as (container, stream):
        _enough_frames(_frame_total(container, stream), path)
        if next(container.decode(stream), None) is None:
            raise DataError(f"cannot read video {path}: no frame decodes")
        if stream.duration and stream.average_rate:
            start = stream.start_time or 0
            end = start + stream.duration
            container.seek(end - 1, stream=stream, backward=True, any_frame=False)  # the last key frame
            tail = [frame.pts for frame in container.decode(stream)]  # to the end: at most one group of pictures
            frame_ticks = 1 / (stream.average_rate * stream.time_base)
            if not tail or (tail[-1] is not None and tail[-1] < end - 2 * frame_ticks):
                raise DataError(f"cannot read video {path}: truncated, it ends before the "
                                f"{float(stream.duration * stream.time_base):.2f} s its header states")
        return stream.codec_context.width, stream.codec_context.height


def clip_frames(path) -> int:
    """How many frames a clip holds: a list's or a folder's frame files, an animation's frames, a video stream's
    count (its header's, else its packets counted); a ``DataError`` naming the file when it cannot be read."""
    if isinstance(path, list):
        return len(path)
    if os.path.isdir(path):
        return len(folder_frames(path))
    check_video_file(path)
    if path.lower().endswith(ANIMATION_SUFFIXES):
        try:
            with Image.open(path) as img:
                return getattr(img, "n_frames", 1)
        except (OSError, ValueError) as e:
            raise DataError(f"cannot read video {path}: {e}") from None
    with open_video_stream(path) as (container, stream):
        return _frame_total(container, stream)


def _frame_total(container, stream) -> int:
    """A video stream's frame count: its header's, else its packets counted (WebM states none), the container then
    back at its start."""
    if stream.frames:
        return stream.frames
    total = sum(1 for packet in container.demux(stream) if packet.size)
    if total:
        container.seek(0)
    return total


def _enough_frames(total: int, path) -> None:
    if total == 0:
        raise DataError(f"cannot read video {path}: it holds no frames")


def check_video_file(path: str) -> None:
    if not os.path.isfile(path):
        raise DataError(f"video not found: {path}")
    if os.path.getsize(path) == 0:
        raise DataError(f"cannot read video {path}: the file is empty")


@contextlib.contextmanager
def open_video_stream(path: str):
    """(container, its first video stream) open; FFmpeg's errors inside become a ``DataError`` naming ``path``."""
    import av

    try:
        opened = av.open(path)
    except av.EOFError:  # no stream information before the end: nothing but a header, or a file cut within it
        raise DataError(f"cannot read video {path}: it ends before its first frame") from None
    except av.FFmpegError as e:
        raise DataError(f"cannot read video {path}: {e.strerror or e}") from None
    try:
        with opened as container:
            if not container.streams.video:
                raise DataError(f"cannot read video {path}: it has no video stream")
            yield container, container.streams.video[0]
    except av.FFmpegError as e:  # its text without the errno and the path it repeats
        raise DataError(f"cannot read video {path}: {e.strerror or e}") from None


def _keep(total: int, clip_fps: float, sampling: VideoSampling, path: str) -> list[int]:
    """The indices of the frames kept, spread evenly."""
    _enough_frames(total, path)
    try:
        count = sampling.frame_count(total, clip_fps)
    except DataError as e:
        raise DataError(f"cannot read video {path}: {e}") from None
    return np.linspace(0, total - 1, count).round().astype(int).tolist()


def _whole_patches(keep: list[int]) -> list[int]:
    """``keep`` with its last index repeated up to a multiple of the temporal patch (Qwen3-VL's processor pads an odd
    count so, and its timestamps count the repeated frame)."""
    return keep + keep[-1:] * (-len(keep) % TEMPORAL_PATCH)


def _clip(frames: list, keep: list[int], total: int, clip_fps: float, size: tuple[int, int]) -> Clip:
    """The kept (resized) ``frames``, in the order of ``keep``, padded to whole temporal patches."""
    by_index = dict(zip(keep, frames))
    indices = _whole_patches(keep)
    return Clip(frames=np.stack([by_index[i] for i in indices]), fps=len(keep) / total * clip_fps, size=size,
                duration=total / clip_fps, indices=indices, source_fps=clip_fps)


def _resized(images: list, keep: list[int], total: int, clip_fps: float, size: tuple[int, int],
             sampling: VideoSampling, factor: int) -> Clip:
    target = sampling.frame_size(size[0], size[1], len(keep), factor)
    frames = [np.asarray(img.convert("RGB").resize(target, Image.BICUBIC)) for img in images]
    return _clip(frames, keep, total, clip_fps, size)


def folder_frames(path: str) -> list[str]:
    """A folder of frames' image files, in name order: the clip's frames."""
    return sorted(os.path.join(path, f) for f in os.listdir(path) if f.lower().endswith(FRAME_SUFFIXES))


def _read_frames_folder(path: str, sampling: VideoSampling, factor: int) -> Clip:
    files = folder_frames(path)
    return _read_frame_files(files, _keep(len(files), sampling.frames_fps, sampling, path), sampling, factor)


def _read_frame_list(paths: list, sampling: VideoSampling, factor: int) -> Clip:
    """A list of frame files kept whole (qwen-vl-utils 0.0.14's ``fetch_video`` of a list)."""
    if not paths:
        raise DataError("a video given as a list of frames holds none")
    return _read_frame_files(paths, list(range(len(paths))), sampling, factor, as_images=sampling.clip_pixels is None)


def _read_frame_files(paths: list, keep: list[int], sampling: VideoSampling, factor: int, as_images: bool = False
                      ) -> Clip:
    """The ``keep`` frames of ``paths`` as a clip at ``frames_fps``, each resized as it is opened; ``as_images``:
    sized from the size qwen-vl-utils' ``fetch_image`` gives the first frame (a list's frames are images to it)."""
    from paddleformers.transformers.qwen2_vl.image_processor_fast import smart_resize

    from .images import load_image

    first = load_image(paths[keep[0]])
    width, height = first.size
    if as_images:  # fetch_video hands fetch_image the factor as its patch size: it rounds to twice the factor
        low, high = sampling.image_pixels or (None, None)
        image_factor = 2 * factor
        height, width = smart_resize(height, width, factor=image_factor,
                                     min_pixels=low or IMAGE_TOKENS[0] * image_factor ** 2,
                                     max_pixels=high or IMAGE_TOKENS[1] * image_factor ** 2)
    target = sampling.frame_size(width, height, len(keep), factor)
    frames = [np.asarray((first if k == 0 else load_image(paths[i])).resize(target, Image.BICUBIC))
              for k, i in enumerate(keep)]
    return _clip(frames, keep, len(paths), sampling.frames_fps, first.size)


def _read_animation(path: str, sampling: VideoSampling, factor: int) -> Clip:
    try:
        with Image.open(path) as img:
            durations = []
            for frame in ImageSequence.Iterator(img):
                frame.load()  # WebP sets a frame's duration when it is loaded
                durations.append(frame.info.get("duration") or 0)
            mean = sum(durations) / len(durations)
            clip_fps = 1000.0 / mean if mean > 0 else DEFAULT_ANIMATION_FPS
            keep = _keep(len(durations), clip_fps, sampling, path)
            images = []
            for i in keep:
                img.seek(i)
                images.append(img.convert("RGB"))
            return _resized(images, keep, len(durations), clip_fps, img.size, sampling, factor)
    except DataError:
        raise
    except (OSError, ValueError, EOFError) as e:
        raise DataError(f"cannot read video {path}: {e}") from None


def _read_video_file(path: str, sampling: VideoSampling, factor: int) -> Clip:
    with open_video_stream(path) as (container, stream):
        stream.thread_type = "AUTO"
        clip_fps = float(stream.average_rate or stream.guessed_rate or 0)
        if clip_fps <= 0:
            raise DataError(f"cannot read video {path}: its frame rate is unknown")
        total = _frame_total(container, stream)
        keep = _keep(total, clip_fps, sampling, path)
        size = (stream.codec_context.width, stream.codec_context.height)
        target = sampling.frame_size(size[0], size[1], len(keep), factor)
        wanted, frames = set(keep), []
        for index, frame in enumerate(container.decode(stream)):
            if index in wanted:
                frames.append(np.asarray(frame.to_image().resize(target, Image.BICUBIC)))
            if index >= keep[-1]:
                break
    if len(frames) < len(keep):
        raise DataError(f"cannot read video {path}: truncated, {len(frames)} of the {len(keep)} frames sampled from "
                        f"its {total} decode")
    return _clip(frames, keep, total, clip_fps, size)
