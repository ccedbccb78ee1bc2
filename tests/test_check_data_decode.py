"""``paddle-r1 check-data --decode``: images and clips whose headers read but whose data does not (a PNG cut in half, a
JPEG cut short, a clip given as frame files some of which are cut short) pass the load's checks
and fail when training opens them; with ``--decode`` each is a skipped row naming the data file's line and the file,
before a job starts. Real files corrupted on disk."""
import json

import numpy as np
from PIL import Image
from test_video import write_clip

from paddle_r1.cli import main
from paddle_r1.data.loader import decode_failures, load_samples
from paddle_r1.data.video import VideoSampling


def _picture(seed: int) -> Image.Image:
    return Image.fromarray((np.random.default_rng(seed).random((48, 64, 3)) * 255).astype(np.uint8))


def _cut(path, keep: float = 0.5) -> str:
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * keep)])
    return str(path)


def _data(tmp_path):
    """A REC file (rows 1 and 2 share a good image; 3: a PNG cut in half; 4: a JPEG cut at 70%) and a video file
    (1: a clip of four frame files whose last three are cut short; 2: a good MP4), as one mixture."""
    for name, seed in (("good.png", 0), ("cut.png", 1), ("cut.jpg", 2)):
        _picture(seed).save(tmp_path / name)
    images = {"good": str(tmp_path / "good.png"), "cut": _cut(tmp_path / "cut.png"),
              "cut_jpeg": _cut(tmp_path / "cut.jpg", 0.7)}
    rec = tmp_path / "rec.jsonl"
    rec.write_text("\n".join(json.dumps({"image": images[name], "problem": "the square", "solution": [1, 2, 30, 40]})
                             for name in ("good", "good", "cut", "cut_jpeg")))
    frames = []
    for i in range(4):
        _picture(10 + i).save(tmp_path / f"frame{i}.png")
        frames.append(str(tmp_path / f"frame{i}.png") if i == 0 else _cut(tmp_path / f"frame{i}.png", 0.6))
    clip = write_clip(tmp_path / "good.mp4", count=8)
    video = tmp_path / "video.jsonl"
    video.write_text("\n".join(json.dumps({"problem": "<video>What moves?", "answer": "a", "videos": [path]})
                               for path in (frames, clip)))
    mixture = tmp_path / "mix.yaml"
    mixture.write_text(f"datasets:\n  - json_path: {rec}\n  - json_path: {video}\n")
    return images, frames, str(rec), str(video), mixture


def test_check_data_decode_skips_what_does_not_decode_and_names_it(tmp_path, capsys):
    images, frames, rec, video, mixture = _data(tmp_path)
    config = tmp_path / "c.yaml"
    config.write_text(f"data_path: {mixture}\nvideo_min_frames: 4\n")

    assert main(["check-data", str(config)]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == "all 6 samples are usable"  # the headers all read

    assert main(["check-data", str(config), "--decode", "--threads", "2"]) == 0
    decoded = capsys.readouterr()
    lines = decoded.out.strip().splitlines()
    assert f"| {rec} | 4 | 2 | 2 |" in lines and f"| {video} | 2 | 1 | 1 |" in lines, lines
    assert f"skipped {rec}:3: cannot read image {images['cut']}: image file is truncated" in lines, lines
    assert [line for line in lines if line.startswith(  # "... truncated (38 bytes not processed)"
        f"skipped {rec}:4: cannot read image {images['cut_jpeg']}: image file is truncated")], lines
    assert f"skipped {video}:1: cannot read image {frames[1]}: image file is truncated" in lines, lines
    # each file once: the two rows' shared image is one of the 3 images
    assert any(line.startswith("decoded 3 images and 2 clips whole on 2 threads; the checks took ") for line in lines)
    assert lines[-1] == "skipped 3 of 6 samples" and "Traceback" not in decoded.err

    config.write_text(f"data_path: {mixture}\nvideo_min_frames: 4\nstrict_data: true\n")
    assert main(["check-data", str(config), "--decode"]) == 2
    assert capsys.readouterr().err == (f"paddle-r1 check-data: error: {rec}:3: cannot read image {images['cut']}: "
                                       "image file is truncated (strict_data is on)\n")


def test_decode_failures_name_each_sample_by_its_first_failing_file(tmp_path):
    images, _, rec, _, _ = _data(tmp_path)
    samples, _ = load_samples(rec)
    failures = decode_failures(samples, VideoSampling(), threads=1)
    assert [index for index, _ in failures] == [2, 3]
    assert failures[0][1] == f"cannot read image {images['cut']}: image file is truncated"
    assert decode_failures(samples[:2], VideoSampling(), threads=3) == []


def _until_it_reads_an_image(process, folder) -> None:
    """Wait until ``process`` has a .png of ``folder`` open (``/proc/PID/fd``): it is past its start-up and reading
    the data (a fixed wait sent the signal during the interpreter's start-up on a busy machine)."""
    import os
    import time

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        try:
            targets = [os.readlink(f"/proc/{process.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{process.pid}/fd")]
        except OSError:  # a descriptor closed while listed
            targets = []
        if any(t.startswith(str(folder)) and t.endswith(".png") for t in targets):
            return
        time.sleep(0.05)
    raise AssertionError(f"check-data opened no image in 120 s (exit code {process.poll()})")


def test_ctrl_c_stops_a_long_decode_at_once(tmp_path):
    """400 rows, each its own path (hard links) to one 3000 x 3000 image that takes a tenth of a second or more to
    decode: SIGINT once the command has an image open ends the command within seconds (the files not yet begun are
    dropped, also when the signal comes before the decoding's results are first awaited), exit code 130 and one line
    that promises nothing about checkpoints (check-data writes none)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    ramp = np.linspace(0, 255, 3000, dtype=np.uint8)
    Image.fromarray(np.stack([np.tile(ramp, (3000, 1))] * 3, axis=-1)).save(tmp_path / "big.png")
    rows = []
    for i in range(400):
        os.link(tmp_path / "big.png", tmp_path / f"{i}.png")
        rows.append(json.dumps({"image": str(tmp_path / f"{i}.png"), "problem": "p", "solution": [1, 2, 3, 4]}))
    (tmp_path / "rec.jsonl").write_text("\n".join(rows))
    (tmp_path / "c.yaml").write_text(f"data_path: {tmp_path / 'rec.jsonl'}\n")
    process = subprocess.Popen([sys.executable, "-m", "paddle_r1.cli", "check-data", str(tmp_path / "c.yaml"),
                                "--decode", "--threads", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        _until_it_reads_an_image(process, tmp_path)
        signalled = time.perf_counter()
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert time.perf_counter() - signalled < 10 and "decoded" not in out
    assert process.returncode == 130 and err.strip().splitlines()[-1] == "paddle-r1 check-data: interrupted", err


def test_check_data_takes_the_data_itself(tmp_path, capsys):
    """``paddle-r1 check-data rows.jsonl``, as the command's name invites: a data file, a json array or json lines
    named .json, a mixture yaml or a folder is checked as the config's data_path would be, under the default config
    and the overrides after it; a yaml or json config is still read as one (the data file was read as a config and
    stopped at yaml's "expected '<document start>'")."""
    _, _, rec, _, mixture = _data(tmp_path)
    rows = [json.loads(line) for line in open(rec)]
    (tmp_path / "array.json").write_text(json.dumps(rows))
    (tmp_path / "lines.json").write_text(open(rec).read())
    (tmp_path / "c.json").write_text(json.dumps({"data_path": rec}))
    (tmp_path / "c.yaml").write_text(f"data_path: {rec}\n")

    def last_line(*args):
        assert main(["check-data", *args]) == 0
        return capsys.readouterr().out.strip().splitlines()[-1]

    for data in (rec, tmp_path / "array.json", tmp_path / "lines.json", tmp_path / "c.json", tmp_path / "c.yaml"):
        assert last_line(str(data)) == "all 4 samples are usable", data
    assert last_line(str(mixture)) == "all 6 samples are usable"
    assert last_line(rec, "--decode") == "skipped 2 of 4 samples"
    assert main(["check-data", rec, "--decode", "--strict_data", "true"]) == 2  # an override after the data
    assert "(strict_data is on)" in capsys.readouterr().err
