"""From config to a list of checked samples, with one report of what was skipped and why.

Every record goes: read -> adapt to the sample schema -> check fields -> check its images (present,
readable, an aspect ratio Qwen's resize accepts) and its videos (present, a video stream whose first frame decodes:
``video.check_clip``). A record that fails is skipped and counted (or,
with ``strict_data``, stops the run with the same message). Nothing is ever silently replaced.

An image's check reads its header only (a dataset of 100,000 images loads in seconds), so a truncated or corrupt
image whose header reads passes it and fails when training opens it (the sample is then skipped at that step, with
a warning naming it). ``decode_threads`` (``paddle-r1 check-data --decode``) also decodes every image and clip whole,
as training reads them (``decode_failures``), and skips the samples that fail in the same way.
"""
from __future__ import annotations

import functools
import os
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Optional

from PIL import Image

from .episodes import episode_images, read_episode
from .formats import (FORMATS, IMAGE_PLACEMENTS, SampleError, SourceContext, detect_format, is_rec_file,
                      place_images)
from .images import load_image
from .mixture import Source, check_strategy, is_mixture, read_mixture, sample_indices
from .records import SPREADSHEET_EXTENSIONS, TABLE_EXTENSIONS, BadRecord, Record, holds_json_rows, read_records
from .samples import SOURCE_KEY, DataError, validate_sample
from .video import VideoSampling, check_clip, clip_frames, read_clip

MAX_ASPECT_RATIO = 200  # Qwen2-VL's smart_resize refuses more extreme images
SHOWN_PROBLEMS = 5


@dataclass
class DataReport:
    read: Counter = field(default_factory=Counter)  # per file
    kept: Counter = field(default_factory=Counter)
    problems: list = field(default_factory=list)  # (where, reason)
    decoded: Counter = field(default_factory=Counter)  # "images", "clips": decoded whole (decode_threads)

    @property
    def skipped(self) -> int:
        return len(self.problems)

    def summary(self) -> Optional[str]:
        """One line naming the first few skipped records and reasons, then a count; None when clean."""
        if not self.problems:
            return None
        shown = "; ".join(f"{where} {reason}" for where, reason in self.problems[:SHOWN_PROBLEMS])
        more = len(self.problems) - SHOWN_PROBLEMS
        total = sum(self.read.values())
        return f"skipped {self.skipped} of {total} samples: {shown}" + (f"; and {more} more" if more > 0 else "")

    def table(self) -> str:
        rows = ["| file | read | kept | skipped |", "|---|---|---|---|"]
        for path in self.read:
            rows.append(f"| {path} | {self.read[path]} | {self.kept[path]} | {self.read[path] - self.kept[path]} |")
        return "\n".join(rows)


class FileChecks:
    """Each file's check result (its size, or the ``SampleError`` it raised), kept for one load: a REC file's rows
    share their images (RefCOCO's train split: 120,624 rows over 16,994 COCO images) and a grounding file's rows their
    clips (Charades-STA's: 12,408 over 5,338), so each file is read once, not once per row."""

    def __init__(self):
        self.results: dict = {}

    def once(self, key: tuple, check: Callable):
        if key not in self.results:
            try:
                self.results[key] = check()
            except SampleError as e:
                self.results[key] = e
        result = self.results[key]
        if isinstance(result, SampleError):
            raise SampleError(str(result))
        return result


def _image_size(path: str) -> tuple[int, int]:
    if not os.path.isfile(path):
        raise SampleError(f"image not found: {path}")
    try:
        with Image.open(path) as img:
            width, height = img.size
    except Image.DecompressionBombError:
        raise SampleError(f"image {path}: more than max_image_pixels ({Image.MAX_IMAGE_PIXELS}) pixels") from None
    except (OSError, ValueError) as e:
        raise SampleError(f"cannot read image {path}: {e}") from None
    limit = Image.MAX_IMAGE_PIXELS
    if limit is not None and width * height > limit:
        raise SampleError(f"image {path} is {width}x{height}: more than max_image_pixels ({limit}) pixels")
    if min(width, height) == 0 or max(width, height) / min(width, height) > MAX_ASPECT_RATIO:
        raise SampleError(f"image {path} is {width}x{height}: aspect ratio above {MAX_ASPECT_RATIO}")
    return width, height


def check_images(paths: list[str], checks: FileChecks) -> list[tuple[int, int]]:
    """Original (w, h) of each image, read from the header only; SampleError naming the file otherwise
    (including an image above Pillow's pixel limit, config key ``max_image_pixels``). ``checks``: the load's
    results so far, each file checked once."""
    return [checks.once(("image", path), functools.partial(_image_size, path)) for path in paths]


def _clip_error(path: str, error: DataError) -> SampleError:
    """``error`` about the clip at ``path``, naming it."""
    return SampleError(str(error) if path in str(error) else f"video {path}: {error}")


def _clip_size(path: str) -> tuple[int, int]:
    try:
        return check_clip(path)
    except DataError as e:
        raise _clip_error(path, e) from None


def _clip_frame_total(path: str) -> int:
    try:
        return clip_frames(path)
    except DataError as e:
        raise _clip_error(path, e) from None


def check_videos(sample: dict, checks: FileChecks) -> list[tuple[int, int]]:
    """Original (w, h) of each clip of ``sample``, from its header and first frame (a list of frames: its first
    frame, every one checked as an image), and a clip's own ``nframes`` within its frames; SampleError naming the
    file otherwise. ``checks``: as for ``check_images``."""
    sizes = []
    for path, options in zip(sample.get("videos", []), clip_options(sample)):
        if isinstance(path, list):
            sizes.append(check_images(path, checks)[0])
            continue
        sizes.append(checks.once(("clip", path), functools.partial(_clip_size, path)))
        if "nframes" in options:  # the clip's count is the file's; whether nframes fits it is the row's
            total = checks.once(("frames", path), functools.partial(_clip_frame_total, path))
            try:
                VideoSampling(nframes=options["nframes"]).frame_count(total, 1.0)
            except DataError as e:
                raise _clip_error(path, e) from None
    return sizes


def clip_options(sample: dict) -> list[dict]:
    """Each clip's own sampling keys (``video_sampling``; none: ``{}``)."""
    return sample.get("video_sampling") or [{}] * len(sample.get("videos", []))


def short_clips(samples: list[dict], sampling: VideoSampling) -> list[tuple[str, str]]:
    """(where, note) for each clip of ``samples`` with fewer frames than its ``min_frames`` (config key
    ``video_min_frames``, or the clip's own): such a clip is read with all its frames, as qwen-vl-utils reads it, so
    the model sees fewer than asked; ``paddle-r1 check-data`` lists them. A list of frames is kept whole anyway."""
    notes = []
    for sample in samples:
        for path, options in zip(sample.get("videos", []), clip_options(sample)):
            least = sampling.with_options(options).min_frames
            total = clip_frames(path)
            if not isinstance(path, list) and "nframes" not in options and total < least:
                key = "its own 'min_frames'" if "min_frames" in options else "video_min_frames"
                notes.append((sample.get(SOURCE_KEY, "?"), f"clip {path} has {total} frames, fewer than {key} "
                              f"({least}): it is read with all of them"))
    return notes


def _image_paths(sample: dict) -> list[str]:
    """The sample's images, then its scripted episode's tool images."""
    return sample["images"] + (episode_images(sample["episode"]) if "episode" in sample else [])


def _clip_reads(sample: dict, video: VideoSampling) -> list[tuple[str, tuple]]:
    """(key, (path, sampling)) of each of the sample's clips: the file and its own sampling keys over ``video``."""
    return [(repr((path, sorted(options.items()))), (path, video.with_options(options)))
            for path, options in zip(sample.get("videos", []), clip_options(sample))]


def decode_failures(samples: list[dict], video: VideoSampling, threads: int,
                    decoded: Optional[Counter] = None) -> list[tuple[int, str]]:
    """(index, reason) for each of ``samples`` whose images or clips do not decode whole when read as training reads
    them (``images.load_image``; ``video.read_clip`` with ``video`` and the clip's own keys), in sample order; the
    reason is the first failing file's. Each file is decoded once however many samples share it (REC rows share
    their COCO image), on ``threads`` threads (Pillow and FFmpeg decode outside the GIL; on Ctrl-C the files not yet
    begun are dropped); ``decoded`` counts the images and clips read."""
    images = list(dict.fromkeys(path for sample in samples for path in _image_paths(sample)))
    clips = dict(read for sample in samples for read in _clip_reads(sample, video))

    def failure(read, *args) -> Optional[str]:
        try:
            read(*args)
        except DataError as e:
            return str(e)
        return None

    with ThreadPoolExecutor(threads) as pool:
        try:
            image_failures = dict(zip(images, pool.map(lambda path: failure(load_image, path), images)))
            clip_failures = dict(zip(clips, pool.map(lambda args: failure(read_clip, *args), clips.values())))
        except BaseException:  # Ctrl-C before a map's results were first asked for: its own cancelling never ran
            pool.shutdown(cancel_futures=True)
            raise
    if decoded is not None:
        decoded.update(images=len(images), clips=len(clips))
    failures = []
    for index, sample in enumerate(samples):
        reasons = [image_failures[path] for path in _image_paths(sample)]
        reasons += [clip_failures[key] for key, _ in _clip_reads(sample, video)]
        reason = next((r for r in reasons if r), None)
        if reason:
            failures.append((index, reason))
    return failures


def _adapt(record: dict, fmt: Optional[str], ctx: SourceContext, rec_file: bool, checks: FileChecks) -> dict:
    name = fmt or detect_format(record, rec_file)
    if name not in FORMATS:
        raise DataError(f"{ctx.path}: unknown format {name!r} (known: {', '.join(FORMATS)})")
    sample = FORMATS[name](record, ctx)
    if isinstance(sample.get("problem"), str):
        place_images(sample, ctx.image_placement)
    try:
        validate_sample(sample, "")
    except DataError as e:
        raise SampleError(str(e).lstrip(": ")) from None
    check_images(sample["images"], checks)
    check_videos(sample, checks)
    if "episode" in sample:  # a scripted multi-turn episode (SFT): its tool images resolve as the sample's do
        sample["episode"] = read_episode(sample["episode"], ctx.image_path, len(sample.get("videos", [])))
        check_images(episode_images(sample["episode"]), checks)
    return sample


def load_source(source: Source, report: DataReport, *, strict: bool, seed: int,
                image_columns=None, image_cache_dir=None, image_placement: str = "markers",
                video: VideoSampling = VideoSampling(), decode_threads: int = 0,
                checks: FileChecks) -> list[dict]:
    """``source``'s samples that pass every check (``decode_threads`` > 0: also decoded whole on that many threads,
    after the record checks); what was read, kept and skipped goes into ``report``; ``checks``: the load's file
    checks so far (sources share files)."""
    ctx = SourceContext(path=source.path, image_root=source.image_root, image_columns=image_columns,
                        image_cache_dir=image_cache_dir, image_placement=image_placement, video=video)
    records = list(read_records(source.path))
    rec_file = is_rec_file([r.value for r in records if isinstance(r, Record)])
    samples = []
    for index in sample_indices(len(records), source.sampling_strategy, seed):
        record = records[index]
        report.read[source.path] += 1
        try:
            if isinstance(record, BadRecord):
                raise SampleError(record.reason)
            sample = _adapt(record.value, source.format, ctx, rec_file, checks)
        except SampleError as e:
            where = record.where
            if strict:
                raise DataError(f"{where}: {e} (strict_data is on)") from None
            report.problems.append((where, str(e)))
            continue
        if source.reward_method and not sample.get("reward_method"):
            sample["reward_method"] = source.reward_method
        sample[SOURCE_KEY] = record.where
        samples.append(sample)
        report.kept[source.path] += 1
    if decode_threads:
        failures = decode_failures(samples, video, decode_threads, report.decoded)
        if failures and strict:
            index, reason = failures[0]
            raise DataError(f"{samples[index][SOURCE_KEY]}: {reason} (strict_data is on)")
        for index, reason in failures:
            report.problems.append((samples[index][SOURCE_KEY], reason))
            report.kept[source.path] -= 1
        failed = {index for index, _ in failures}
        samples = [sample for index, sample in enumerate(samples) if index not in failed]
    return samples


def is_data_path(path: str) -> bool:
    """Whether ``path`` names data as ``data_path`` takes it rather than a config file (``paddle-r1 check-data``
    takes either): a folder, a jsonl, csv, spreadsheet or table file, a mixture yaml, or a json file of rows (an
    array, or one object a line). A json file holding one object is a config."""
    if os.path.isdir(path):
        return True
    lower = path.lower()
    if lower.endswith((".jsonl", ".csv") + SPREADSHEET_EXTENSIONS + TABLE_EXTENSIONS):
        return True
    if lower.endswith((".yaml", ".yml")):
        return is_mixture(path)
    return lower.endswith(".json") and os.path.isfile(path) and holds_json_rows(path)


def sources_from(data_path: str, image_root: Optional[str] = None, data_format: Optional[str] = None,
                 sampling_strategy: str = "all") -> list[Source]:
    """A mixture yaml lists its sources; any other path is one source."""
    if data_path.endswith((".yaml", ".yml")):
        sources = read_mixture(data_path)
        for source in sources:  # the config's image_root serves entries that name none
            source.image_root = source.image_root if source.image_root is not None else image_root
        return sources
    check_strategy(sampling_strategy, "config key 'sampling_strategy'")
    return [Source(path=data_path, sampling_strategy=sampling_strategy, image_root=image_root, format=data_format)]


def load_samples(data_path: str, *, image_root: Optional[str] = None, data_format: Optional[str] = None,
                 strict: bool = False, seed: int = 0, image_columns=None, image_cache_dir=None,
                 sampling_strategy: str = "all", image_placement: str = "markers",
                 video: VideoSampling = VideoSampling(), decode_threads: int = 0) -> tuple[list[dict], DataReport]:
    """``video``: the job's clip sampling, over which a clip's own keys are checked; ``decode_threads``: see
    ``load_source``."""
    if image_placement not in IMAGE_PLACEMENTS:
        raise DataError(f"config key 'image_placement': {image_placement!r} is not one of "
                        f"{', '.join(IMAGE_PLACEMENTS)}")
    report, checks = DataReport(), FileChecks()
    samples = []
    for i, source in enumerate(sources_from(data_path, image_root, data_format, sampling_strategy)):
        samples.extend(load_source(source, report, strict=strict, seed=seed + i, image_columns=image_columns,
                                   image_cache_dir=image_cache_dir, image_placement=image_placement,
                                   video=video, decode_threads=decode_threads, checks=checks))
    if not samples:
        detail = report.summary() or "no records"
        raise DataError(f"{data_path}: the dataset is empty ({detail})")
    return samples, report
