"""``paddle-r1 check-data`` on video rows, with real files: a clip that is noise, one whose container holds no frames,
one shorter than video_min_frames and one of a single frame (kept, with a note), a grounding row without its duration;
each reported on its own line naming the data file's line and the clip."""
import json

import av
from test_cli import paddle_r1
from test_video import write_clip

from paddle_r1.data.loader import load_samples, short_clips
from paddle_r1.data.video import VideoSampling


def frameless(path, codec="mpeg4"):
    """A container with a video stream and not one frame (its header written, nothing muxed)."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=4)
        stream.width, stream.height, stream.pix_fmt = 56, 56, "yuv420p"
        container.start_encoding()
    return str(path)


def test_check_data_names_each_bad_clip_and_the_short_ones(tmp_path):
    clips = {"good": write_clip(tmp_path / "good.mp4", count=8), "short": write_clip(tmp_path / "short.mp4", count=3),
             "one_frame": write_clip(tmp_path / "one.mp4", count=1), "frameless": frameless(tmp_path / "empty.avi"),
             "headless": frameless(tmp_path / "empty.mkv")}
    (tmp_path / "noise.mp4").write_bytes(bytes(range(256)) * 40)
    clips["noise"] = str(tmp_path / "noise.mp4")
    rows = [{"problem": "<video>What?", "answer": "a", "videos": [path]} for path in clips.values()]
    rows.append({"video": clips["good"], "timestamp": [0.5, 1.5], "sentence": "the screen turns red"})  # no duration
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps(row) for row in rows))
    config = tmp_path / "c.yaml"
    config.write_text(f"data_path: {data}\nvideo_min_frames: 4\n")

    result = paddle_r1("check-data", str(config))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert f"| {data} | 7 | 3 | 4 |" in lines
    expected = {
        f"skipped {data}:4: cannot read video {clips['frameless']}: it holds no frames",
        f"skipped {data}:5: cannot read video {clips['headless']}: it ends before its first frame",
        f"skipped {data}:7: no 'duration': a grounding row needs its clip's length in seconds (Charades-STA's "
        "'duration'), by which temporal_iou normalises the spans",
        f"note {data}:2: clip {clips['short']} has 3 frames, fewer than video_min_frames (4): it is read with all of "
        "them",
        f"note {data}:3: clip {clips['one_frame']} has 1 frames, fewer than video_min_frames (4): it is read with all "
        "of them",
    }
    assert expected <= set(lines), "\n".join(lines)
    noise = [line for line in lines if line.startswith(f"skipped {data}:6: cannot read video {clips['noise']}: ")]
    assert len(noise) == 1 and "Traceback" not in result.stdout + result.stderr
    assert lines[-1] == "skipped 4 of 7 samples"

    samples, _ = load_samples(str(data))
    assert [where for where, _ in short_clips(samples, VideoSampling(min_frames=4))] == [f"{data}:2", f"{data}:3"]
    assert [where for where, _ in short_clips(samples, VideoSampling(min_frames=3))] == [f"{data}:3"]
