import json
import os

import numpy as np
import pytest
from PIL import Image

from paddle_r1.data.images import load_image
from paddle_r1.data.samples import DataError
from paddle_r1.synthetic import COLORS, make_synthetic_rec


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
        img = np.asarray(Image.open(os.path.join(tmp_path, "a", row["image"])))
        x1, y1, x2, y2 = row["solution"]
        assert 0 <= x1 < x2 <= img.shape[1] and 0 <= y1 < y2 <= img.shape[0]
        assert tuple(img[(y1 + y2) // 2, (x1 + x2) // 2]) == COLORS[color]
