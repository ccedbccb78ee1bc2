"""Chosen frames of a video file, by their index in it, read by seeking to the key frame at or before the first of
them and decoding forward (the ``frames`` tool's sub-clips: ``clip_spans.py``), so a span near the end of an hour-long
clip costs one group of pictures, not the hour.

A frame's index is its place in the stream as ``video.read_clip`` counts it: the n-th frame decoded from the start.
A seek knows only time stamps, so frame i is looked for at pts ``origin + i * ticks`` (``origin`` the first frame's
pts, ``ticks`` = 1 / (average rate x time base)), which is frame i only when every frame sits on that grid. The reader
checks what it can before and after the seek, and scans from the start as ``read_clip`` does when a check fails:

- the stream states a constant rate: its average rate equals its base (real) rate (a variable rate is scanned);
- the grid spans exactly the clip's frames: the first two frames decoded sit on its first two slots, and the last
  packet (found by a seek to the end, demuxed, not decoded) on slot ``total - 1``, ``total`` the clip's frame count.
  A stream whose time stamps skip somewhere (a dropped frame, a pause) ends later than that; one whose first pts is
  not 0 (an edit list, a cut) is placed from its own first frame;
- after the seek: the frame landed on is on the grid and at or before the first one wanted, and each next frame is on
  the next slot (an AVI, which stores no presentation times, can give B-frames out of order; an MPEG program stream's
  time stamps after a seek come off the grid). MP4's seek goes by decoding time, so with B-frames it can land on the
  key frame just after the frame wanted: the seek is tried again further back, a few times. Any miss, a seek the
  container refuses, or the stream ending before the last frame wanted: what was read is dropped and the file is
  scanned.

Decoding from a key frame gives the pixels decoding from the start gives (``tests/test_video_seek.py``: spans at the
start, middle and end and across key frames, on MP4 and Matroska with B-frames and a first pts other than 0, WebM,
AVI with B-frames; and the streams that are scanned). What the checks cannot see: frames off the grid between the
first two and the span, in a stream whose stated rates agree and whose frame count and last time stamp fit the grid
(a variable rate that evens out); there the seek goes by the time stamps where a scan counts frames.
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
    """The frames ``indices`` (increasing) of the video file at ``path``, whose stream decodes ``total`` frames (the
    count ``read_clip`` read it with), each passed through ``convert`` (a ``PIL.Image`` in; what is kept out) as it
    decodes; by a seek when the stream's time stamps place them (``seek=False``: always a scan)."""
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
    """Where the stream's frames sit, when its time stamps say so for all ``total`` of them (the module's checks);
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
