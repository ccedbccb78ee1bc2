"""Chosen frames of a video file, by their index in it, read by seeking to the key frame at or before the first of
them and decoding forward (the ``frames`` tool's sub-clips: ``clip_spans.py``), so a span near the end of an hour-long
clip costs one group of pictures, not the hour.

A frame's index is its place in the stream as ``video.read_clip`` counts it: the n-th frame decoded from the start.
Seeking knows only timestamps, so frame i is found at pts ``origin + i * ticks`` (``origin`` the first frame's pts,
``ticks`` = 1 / (average rate x time base)), which holds only for a stream whose every frame sits on that grid. The
reader checks that before it seeks, and scans from the start as ``read_clip`` does whenever it cannot tell:

- the stream states a constant rate: its average rate equals its base (real) rate; a variable-rate stream is scanned;
- the grid spans exactly the clip's frames: the first frame decoded is frame 0, the second is on the grid's next
  slot, and the last packet (after a seek to
  the end, demuxed, not decoded) is at ``origin + (total - 1) * ticks``, ``total`` the clip's frame count. A stream
  whose timestamps skip somewhere (a dropped frame, a pause) ends later than that and is scanned; one that starts at a
  pts other than 0 (an edit list, a cut) is placed from its own first frame;
- after the seek: every frame decoded has a pts on the grid, the frame landed on is at or before the first one wanted
  (a container whose seek goes by decoding time, as MP4's does, can land on the key frame just after it when frames
  are reordered (B-frames): the seek is tried again earlier, a few times), and each next frame is the next index (an
  AVI whose B-frames carry no pts gives them out of order). Any miss, or the stream ending before the last frame
  wanted, discards what was read and scans.

The frames a seek gives are the ones a scan gives, pixel for pixel (decoding from a key frame reproduces its group of
pictures): ``tests/test_video_seek.py`` checks spans at the start, middle and end and across key frames, on MP4,
Matroska and AVI with B-frames and a first pts other than 0, and the fallbacks.
"""
from __future__ import annotations

import itertools
import math
from fractions import Fraction
from typing import Callable, NamedTuple, Optional

from .video import open_video_stream

GRID_TOLERANCE = 0.25  # of a frame: pts rounded to the container's clock (Matroska's milliseconds) stay this close
SEEK_TRIES = 4  # seeks, each further back, before a landing after the first frame wanted gives way to a scan


class FramesRead(NamedTuple):
    frames: list  # ``convert`` of each frame wanted that decodes, in order (fewer when the stream ends before them)
    decoded: int  # frames decoded in all, the checks' and a discarded seek's included
    sought: bool  # True: read by seeking; False: by a scan from the start


class _Grid(NamedTuple):
    origin: int  # frame 0's pts
    ticks: Fraction  # pts per frame

    def index(self, pts: Optional[int]) -> Optional[int]:
        """The frame at ``pts``, or None when ``pts`` is missing or off the grid."""
        if pts is None:
            return None
        position = (pts - self.origin) / self.ticks
        index = round(position)
        return index if abs(position - index) <= GRID_TOLERANCE else None

    def pts(self, index: int) -> Fraction:
        return self.origin + index * self.ticks


def read_frames(path: str, indices: list[int], total: int, convert: Callable, seek: bool = True) -> FramesRead:
    """The frames ``indices`` (increasing) of the video file at ``path``, whose stream holds ``total`` frames (the
    count ``read_clip`` gave it), each passed through ``convert`` (a ``PIL.Image`` in; what is kept out) as it
    decodes; by a seek when the stream's timestamps place them (``seek=False``: always a scan)."""
    decoded = 0
    if seek:
        import av

        with open_video_stream(path) as (container, stream):
            stream.thread_type = "AUTO"
            try:
                grid, decoded = _grid(container, stream, total)
                if grid is not None:
                    frames, count = _sought(container, stream, grid, indices, convert)
                    decoded += count
                    if frames is not None:
                        return FramesRead(frames, decoded, True)
            except av.FFmpegError:  # a seek the container refuses (an AVI without an index), a bad packet: the scan
                pass  # reads it as read_clip does, and names what is wrong
    with open_video_stream(path) as (container, stream):
        stream.thread_type = "AUTO"
        frames, count = _scanned(container, stream, indices, convert)
    return FramesRead(frames, decoded + count, False)


def _grid(container, stream, total: int) -> tuple[Optional[_Grid], int]:
    """Where the stream's frames sit, when its timestamps say so for all ``total`` of them (the module's checks);
    and the frames decoded to find out."""
    rate, base = stream.average_rate, stream.base_rate
    if not rate or rate != base or not stream.time_base or total < 2:
        return None, 0
    head = list(itertools.islice(container.decode(stream), 2))
    if len(head) < 2 or head[0].pts is None:
        return None, len(head)
    grid = _Grid(head[0].pts, 1 / (rate * stream.time_base))
    if grid.index(head[1].pts) != 1:
        return None, 2
    container.seek(math.floor(grid.pts(total - 1)), stream=stream, backward=True, any_frame=False)
    last = max((packet.pts for packet in container.demux(stream) if packet.size and packet.pts is not None),
               default=None)
    return (grid if grid.index(last) == total - 1 else None), 2


def _sought(container, stream, grid: _Grid, indices: list[int], convert: Callable) -> tuple[Optional[list], int]:
    """The frames ``indices`` decoded forward from the key frame at or before the first of them; None when the
    frames decoded do not follow the grid one by one from there. Also the frames decoded."""
    wanted, decoded = grid.pts(indices[0]), 0
    offset = wanted
    for _ in range(SEEK_TRIES):
        if offset > grid.origin:
            container.seek(math.floor(offset), stream=stream, backward=True, any_frame=False)
        else:  # within the first group of pictures: from the start of the file
            container.seek(0)
        frames = container.decode(stream)
        landing = next(frames, None)
        decoded += landing is not None
        at = grid.index(landing.pts) if landing is not None else None
        if at is None:
            return None, decoded
        if at <= indices[0]:
            break
        offset -= 2 * (landing.pts - wanted)  # landed after it: back twice as far as it overshot
    else:
        return None, decoded
    kept, keep = [], set(indices)
    for expected, frame in enumerate(itertools.chain([landing], frames), start=at):
        decoded += frame is not landing
        if grid.index(frame.pts) != expected:
            return None, decoded
        if expected in keep:
            kept.append(convert(frame.to_image()))
        if expected == indices[-1]:
            return kept, decoded
    return None, decoded  # the stream ended before the last frame wanted: the scan says how far it reads


def _scanned(container, stream, indices: list[int], convert: Callable) -> tuple[list, int]:
    """The frames ``indices`` counted from the stream's start, as ``read_clip`` counts them."""
    kept, keep, decoded = [], set(indices), 0
    for index, frame in enumerate(container.decode(stream)):
        decoded += 1
        if index in keep:
            kept.append(convert(frame.to_image()))
        if index >= indices[-1]:
            break
    return kept, decoded
