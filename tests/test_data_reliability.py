"""Bad records that used to slip through or stop a whole load: each is now skipped, counted and named by file:line."""
import json
import struct
import zlib

import pytest
from PIL import Image

from paddle_r1.config.jobs import GRPOConfig
from paddle_r1.data.images import load_image
from paddle_r1.data.loader import load_samples
from paddle_r1.job_data import load_from_config
from paddle_r1.data.samples import DataError


@pytest.fixture
def folder(tmp_path):
    Image.new("RGB", (64, 48), (200, 30, 30)).save(tmp_path / "a.png")
    return tmp_path


def _rec(solution):
    return {"image": "a.png", "problem": "the red square", "solution": solution}


def _write_lines(path, lines: list[bytes]):
    path.write_bytes(b"\n".join(lines) + b"\n")
    return str(path)


def test_a_rec_file_stays_rec_and_its_non_box_solutions_are_bad_rows(folder):
    rows = [_rec([1, 2, 30, 40]), _rec([1, 2, 3]), _rec("abc"), _rec([5, 6, 20, 30]), _rec([0, 0, 9, 9])]
    path = _write_lines(folder / "rec.jsonl", [json.dumps(r).encode() for r in rows])
    samples, report = load_samples(path)
    assert [s["solution"] for s in samples] == [[1, 2, 30, 40], [5, 6, 20, 30], [0, 0, 9, 9]]
    reasons = dict(report.problems)
    assert reasons[f"{path}:2"] == "solution must be [x1, y1, x2, y2], got [1, 2, 3]"
    assert reasons[f"{path}:3"] == "solution is not a box: 'abc'"


def test_an_r1v_file_is_still_detected_from_its_answers(folder):
    rows = [_rec("<answer> 3 </answer>"), _rec(2)]
    samples, report = load_samples(_write_lines(folder / "count.jsonl", [json.dumps(r).encode() for r in rows]))
    assert [s["solution"] for s in samples] == ["3", 2] and not report.problems


def test_a_box_with_nan_or_overflowing_coordinates_is_bad(folder):
    lines = [b'{"image": "a.png", "problem": "p", "solution": [1, 2, 30, 40]}',
             b'{"image": "a.png", "problem": "p", "solution": [1, NaN, 30, 40]}',
             b'{"image": "a.png", "problem": "p", "solution": [1, 2, 1e400, 40]}']
    path = _write_lines(folder / "rec.jsonl", lines)
    samples, report = load_samples(path)
    assert len(samples) == 1
    reasons = dict(report.problems)
    assert reasons[f"{path}:2"] == "solution has a coordinate that is not a finite number: [1, nan, 30, 40]"
    assert reasons[f"{path}:3"] == "solution has a coordinate that is not a finite number: [1, 2, inf, 40]"


def test_a_line_that_is_not_utf8_is_one_bad_line(folder):
    lines = [json.dumps(_rec([1, 2, 30, 40])).encode(),
             b'{"image": "a.png", "problem": "the caf\xe9 sign", "solution": [1, 2, 30, 40]}',  # latin-1
             json.dumps(_rec([3, 4, 30, 40]), ensure_ascii=False).encode()]
    path = _write_lines(folder / "rec.jsonl", lines)
    samples, report = load_samples(path)
    assert len(samples) == 2 and report.problems == [(f"{path}:2", "not valid UTF-8 text")]
    csv_path = _write_lines(folder / "rec.csv", [b"image,problem,solution", b'a.png,caf\xe9,"[1, 2, 30, 40]"',
                                                 b'a.png,ok,"[1, 2, 30, 40]"'])
    samples, report = load_samples(csv_path, data_format="rec")
    assert len(samples) == 1 and report.problems == [(f"{csv_path}:2", "not valid UTF-8 text")]


def _png_header_only(path, width, height):
    """A PNG whose header claims width x height (no pixel data worth decoding)."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"")) +
                     chunk(b"IEND", b""))


def test_an_image_over_the_pixel_limit_is_a_bad_image(folder, monkeypatch):
    _png_header_only(folder / "bomb.png", 30000, 30000)
    rows = [_rec([1, 2, 30, 40]), {**_rec([1, 2, 30, 40]), "image": "bomb.png"}]
    path = _write_lines(folder / "rec.jsonl", [json.dumps(r).encode() for r in rows])
    samples, report = load_samples(path)
    assert len(samples) == 1
    assert report.problems[0][0] == f"{path}:2" and "bomb.png: more than max_image_pixels" in report.problems[0][1]
    with pytest.raises(DataError, match="cannot read image .*bomb.png"):
        load_image(str(folder / "bomb.png"))  # at step time too: a skipped sample, not a traceback

    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", Image.MAX_IMAGE_PIXELS)  # restored after the test
    config = GRPOConfig(data_path=path, max_image_pixels=2000, output_dir=str(folder / "out"))
    with pytest.raises(DataError, match=r"a.png is 64x48: more than max_image_pixels \(2000\) pixels"):
        load_from_config(config)


def test_each_sample_names_its_file_and_line(folder):
    lines = [b"not json", json.dumps(_rec([1, 2, 30, 40])).encode()]
    path = _write_lines(folder / "rec.jsonl", lines)
    samples, _ = load_samples(path)
    assert samples[0]["_source"] == f"{path}:2"


def test_rows_that_share_a_file_check_it_once_and_share_its_verdict(folder, monkeypatch, tmp_path):
    """RefCOCO's rows share their COCO images (120,624 rows over 16,994 images) and Charades-STA's their clips: a load
    opens each file once, however many rows and sources name it (before: once per row); a bad file skips every row
    that names it, each with the same reason."""
    from PIL import Image as PILImage
    from test_video import write_clip

    from paddle_r1.data import loader

    Image.new("RGB", (64, 48), (0, 200, 30)).save(folder / "b.png")
    names = ["a.png", "b.png", "missing.png"] * 4
    rec = _write_lines(folder / "rec.jsonl", [json.dumps({**_rec([1, 2, 30, 40]), "image": name}).encode()
                                              for name in names])
    clip = write_clip(tmp_path / "clip.mp4", count=8)
    clips = _write_lines(folder / "clips.jsonl", [json.dumps({"video": clip, "duration": 2.0, "timestamp": [0.5, 1],
                                                              "sentence": f"event {i}"}).encode() for i in range(3)])
    mixture = folder / "mix.yaml"
    mixture.write_text(f"datasets:\n  - json_path: {rec}\n  - json_path: {rec}\n  - json_path: {clips}\n")
    opened, checked = [], []
    real_open, real_check_clip = PILImage.open, loader.check_clip
    monkeypatch.setattr(PILImage, "open", lambda path, *a, **k: opened.append(path) or real_open(path, *a, **k))
    monkeypatch.setattr(loader, "check_clip", lambda path: checked.append(path) or real_check_clip(path))

    samples, report = load_samples(str(mixture), image_root=str(folder))
    assert sorted(opened) == [str(folder / "a.png"), str(folder / "b.png")] and checked == [clip]
    assert len(samples) == 2 * 8 + 3 and report.skipped == 2 * 4
    assert {reason for _, reason in report.problems} == {f"image not found: {folder / 'missing.png'}"}
