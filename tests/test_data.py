import json
import os

import numpy as np
import pytest
from PIL import Image

from paddle_r1.data.images import load_image
from paddle_r1.data.samples import DataError, load_rec_file
from paddle_r1.data.synthetic import COLORS, make_synthetic_rec


def test_rec_json_and_jsonl(tmp_path):
    record = {"image": "a.jpg", "problem": "the dog", "solution": [1, 2, 3.5, 4], "normal_caption": "dog"}
    (tmp_path / "r.json").write_text(json.dumps([record, record]))
    (tmp_path / "r.jsonl").write_text(json.dumps(record) + "\n\n" + json.dumps(record) + "\n")
    for name in ("r.json", "r.jsonl"):
        samples = load_rec_file(str(tmp_path / name), image_root="/imgs")
        assert len(samples) == 2
        assert samples[0] == {"images": ["/imgs/a.jpg"], "problem": "the dog", "solution": [1, 2, 3.5, 4],
                              "normal_caption": "dog", "reward_method": None}


@pytest.mark.parametrize("content, message", [
    ('{"image": "a", "problem": "p", "solution": [1,2,3,4]}\n{"image": "a", "problem"\n', r"r.jsonl:2: malformed json"),
    ('{"image": "a", "problem": "", "solution": [1,2,3,4]}\n', r"r.jsonl:1: empty or missing 'problem'"),
    ('{"image": "a", "problem": "p", "solution": "left"}\n', r"r.jsonl:1: REC 'solution' must be"),
    ("\n", "the dataset is empty"),
])
def test_bad_rec_files(tmp_path, content, message):
    (tmp_path / "r.jsonl").write_text(content)
    with pytest.raises(DataError, match=message):
        load_rec_file(str(tmp_path / "r.jsonl"))


def test_images(tmp_path):
    with pytest.raises(DataError, match="image not found: .*missing.png"):
        load_image(str(tmp_path / "missing.png"))
    (tmp_path / "bad.png").write_bytes(b"not an image")
    with pytest.raises(DataError, match="cannot read image .*bad.png"):
        load_image(str(tmp_path / "bad.png"))
    img = Image.new("L", (30, 10))
    exif = img.getexif()
    exif[0x0112] = 6  # rotated 90 degrees: displayed as 10 x 30
    img.save(tmp_path / "rot.jpg", exif=exif)
    loaded = load_image(str(tmp_path / "rot.jpg"))
    assert loaded.mode == "RGB" and loaded.size == (10, 30)


def test_synthetic_set_is_seeded_and_boxes_hold_their_colour(tmp_path):
    a = make_synthetic_rec(str(tmp_path / "a"), num_samples=6, seed=5)
    b = make_synthetic_rec(str(tmp_path / "b"), num_samples=6, seed=5)
    assert open(a).read() == open(b).read()
    for line in open(a):
        row = json.loads(line)
        color = row["problem"].split()[2]
        img = np.asarray(Image.open(os.path.join(tmp_path, "a", "images", row["image"])))
        x1, y1, x2, y2 = row["solution"]
        assert 0 <= x1 < x2 <= img.shape[1] and 0 <= y1 < y2 <= img.shape[0]
        assert tuple(img[(y1 + y2) // 2, (x1 + x2) // 2]) == COLORS[color]
