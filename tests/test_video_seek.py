"""Frames of a video file read by seeking (``data/video_seek.py``, the ``frames`` tool's reader): clips written here
by PyAV with a key frame every few frames, B-frames and a first time stamp other than 0 give, by a seek, exactly the
frames a scan from the start gives (each frame numbered in its colour, and the pixels equal), for spans at the start,
in the middle across a key frame and at the end; streams whose time stamps do not place their frames are scanned; a
span near the end of a long clip decodes a few frames, not the clip."""
import numpy as np
import pytest

from paddle_r1.data.clip_spans import SpanReader
from paddle_r1.data.video import VideoSampling, read_clip
from paddle_r1.data.video_seek import read_frames
from test_video import SMALL, write_clip

GOP = 8


def numbered(i: int, size=(32, 32)) -> np.ndarray:
    """Frame ``i`` with its number in base 6 in its colour: red, green and blue levels 40 x its three digits."""
    picture = np.zeros((size[1], size[0], 3), np.uint8)
    picture[...] = [40 * (i % 6), 40 * (i // 6 % 6), 40 * (i // 36 % 6)]
    return picture


def number(picture: np.ndarray) -> int:
    red, green, blue = (int(round(level / 40)) for level in picture.reshape(-1, 3).mean(0))
    return red + 6 * green + 36 * blue


def as_array(image) -> np.ndarray:
    return np.asarray(image.convert("RGB"))


SPANS = {"start": [0, 1, 2, 3], "middle, across a key frame": [GOP * 3 - 2, GOP * 3 - 1, GOP * 3, GOP * 3 + 2],
         "one key frame's group": [GOP * 2, GOP * 2 + 3, GOP * 2 + 5, GOP * 3 - 1], "end": [54, 56, 58, 59],
         "one frame after another key frame": [GOP * 4 + 1, GOP * 4 + 2]}
CLIPS = {  # name: (file name, write_clip's arguments)
    "mp4, B-frames, starting at 0.5 s": ("a.mp4", dict(b_frames=2, pts_ms=[500 + 100 * i for i in range(60)])),
    "mp4, H.264, starting at 0.7 s": ("b.mp4", dict(codec="libx264", pts_ms=[700 + 100 * i for i in range(60)])),
    "mkv, B-frames, starting at 0.3 s": ("c.mkv", dict(b_frames=2, pts_ms=[300 + 100 * i for i in range(60)])),
    "webm, VP9": ("d.webm", dict(codec="libvpx-vp9")),
    "avi, B-frames (no time stamps of their own)": ("e.avi", dict(b_frames=2)),
}


@pytest.mark.parametrize("name", CLIPS)
def test_a_seek_gives_the_frames_a_scan_gives(tmp_path, name):
    """60 frames at 10 fps, a key frame every 8 (or sooner): every span sought (the retry when MP4's seek by decoding
    time lands on the key frame after a B-frame wanted included; without it the read would be a scan) equals the
    scan's read, pixel for pixel, and holds the frames numbered so."""
    file, options = CLIPS[name]
    path = write_clip(tmp_path / file, count=60, fps=10, size=(32, 32), picture=numbered, gop=GOP, **options)
    for span, indices in SPANS.items():
        sought = read_frames(path, indices, 60, as_array)
        scanned = read_frames(path, indices, 60, as_array, seek=False)
        assert sought.sought and not scanned.sought, span
        assert [number(f) for f in sought.frames] == indices, span
        assert all(np.array_equal(a, b) for a, b in zip(sought.frames, scanned.frames, strict=True)), span


def test_a_span_near_the_end_of_a_long_clip_decodes_a_few_frames(tmp_path):
    """600 frames (a minute at 10 fps), a key frame every 8: the last 4 frames by a seek decode the checks' 2, at
    most a group of pictures to reach them and themselves; the scan decodes all 600."""
    path = write_clip(tmp_path / "long.mp4", count=600, fps=10, size=(32, 32), picture=numbered, gop=GOP, b_frames=2)
    indices = [596, 597, 598, 599]
    sought = read_frames(path, indices, 600, as_array)
    scanned = read_frames(path, indices, 600, as_array, seek=False)
    assert [number(f) for f in sought.frames] == [n % 216 for n in indices]
    assert sought.sought and sought.decoded <= 2 + GOP + len(indices) and scanned.decoded == 600


@pytest.mark.parametrize("name, file, options", [
    ("variable rate: a pause of half a frame after frame 20", "vfr.mp4",
     dict(pts_ms=[100 * i + (50 if i > 20 else 0) for i in range(60)])),
    ("a frame's time stamp off its slot", "off.mp4",
     dict(pts_ms=[100 * i + (40 if i == 30 else 0) for i in range(60)])),
    ("a raw H.264 stream: no time stamps, no stated rate", "raw.h264", dict(codec="libx264")),
    ("MPEG program stream: after a seek its time stamps come off the grid", "ps.mpg", dict(codec="mpeg2video")),
])
def test_a_stream_its_time_stamps_do_not_place_is_scanned(tmp_path, name, file, options):
    """Frames whose time stamps leave the grid of the stream's rate, or a container whose seek cannot be checked: the
    read is a scan, frames counted from the start."""
    path = write_clip(tmp_path / file, count=60, fps=10, size=(32, 32), picture=numbered, gop=GOP, **options)
    indices = [40, 42, 44, 46]
    read = read_frames(path, indices, 60, as_array)
    assert not read.sought, name
    assert [number(f) for f in read.frames] == indices, name


def test_the_frames_tool_reads_its_span_by_a_seek(tmp_path):
    """Through the tool's reader: the span's frames of a clip starting at 0.5 s with B-frames, as the prompt's clip
    counts them (its indices and times)."""
    path = write_clip(tmp_path / "a.mp4", count=60, fps=10, size=(32, 32), picture=numbered, gop=GOP, b_frames=2,
                      pts_ms=[500 + 100 * i for i in range(60)])
    sampling = VideoSampling(**SMALL)
    clip = read_clip(path, sampling)
    assert [number(f) for f in clip.frames] == clip.indices  # the prompt's reader counts frames from the start
    sub = SpanReader(sampling, 28).read(path, clip, [41, 43, 46, 49])
    assert [number(f) for f in sub.frames] == [41, 43, 46, 49] and sub.indices == [41, 43, 46, 49]
