"""Images as users have them: 16-bit, 32-bit and float files keep their contrast in 8 bits, on the training path and
the server's; the modes Pillow already converted right are converted as before."""
import io

import numpy as np
import pytest
from PIL import Image

from paddle_r1.data.images import as_rgb, load_image
from paddle_r1.generation.generator import load_sample_images
from paddle_r1.serve.chat import open_image
from paddle_r1.serve.limits import ServeLimits

WIDTH = 256


def _gradient(low, high, dtype):
    """8 rows of one left-to-right ramp from ``low`` to ``high``."""
    return np.tile(np.linspace(low, high, WIDTH), (8, 1)).astype(dtype)


def _save(values, path):
    Image.fromarray(values).save(path)  # the mode follows the array's type
    return str(path)


def _grey(img):
    pixels = np.asarray(img)
    assert img.mode == "RGB" and (pixels == pixels[..., :1]).all()  # grey: R = G = B
    return pixels[..., 0].astype(int)


# (file, values as written, Pillow mode, the 8-bit grey expected: each value scaled by the range it is written in)
GRADIENT = _gradient(0, 65535, np.uint16)
CASES = {
    "16-bit PNG (I;16)": ("png", GRADIENT, "I;16", GRADIENT / 65535 * 255),
    "16-bit big-endian TIFF (I;16B)": ("tif", GRADIENT.astype(">u2"), "I;16B", GRADIENT / 65535 * 255),
    "dim 12-bit scan in a 16-bit PNG: stays dim": ("png", GRADIENT // 16, "I;16", (GRADIENT // 16) / 65535 * 255),
    "32-bit TIFF (I) of 16-bit values": ("tif", GRADIENT.astype(np.int32), "I", GRADIENT / 65535 * 255),
    "32-bit TIFF (I) past 16 bits: its own min..max": ("tif", _gradient(-1000, 1e6, np.int32), "I",
                                                      np.linspace(0, 255, WIDTH)),
    "float TIFF (F) in 0..1": ("tif", _gradient(0, 1, np.float32), "F", _gradient(0, 1, np.float32) * 255),
    "float TIFF (F) of depths: its own min..max": ("tif", _gradient(-5, 40, np.float32), "F",
                                                   np.linspace(0, 255, WIDTH)),
}


@pytest.mark.parametrize("case", CASES)
def test_high_bit_depth_and_float_images_keep_their_contrast(tmp_path, case):
    extension, values, mode, expected = CASES[case]
    path = _save(values, tmp_path / f"image.{extension}")
    assert Image.open(path).mode == mode  # the file reads back as the mode it was written in
    grey = _grey(load_image(path))
    np.testing.assert_array_equal(grey, np.broadcast_to(np.round(expected), grey.shape).astype(int))
    assert (np.diff(grey[0]) >= 0).all()  # a gradient stays a gradient
    if "dim" not in case:  # ... spanning 0..255 in as many levels as it has pixels across
        assert grey[0, 0] == 0 and grey[0, -1] == 255 and len(np.unique(grey)) >= 200
        # where Pillow alone clipped it to (almost) white or black: a few levels
        assert len(np.unique(np.asarray(Image.open(path).convert("RGB")))) < 50


def test_training_and_the_server_see_the_same_pixels(tmp_path):
    path = _save(GRADIENT, tmp_path / "scan.png")
    grey = _grey(load_image(path))
    assert len(np.unique(grey)) == 256  # the whole 16-bit ramp spans every 8-bit level
    (trained,) = load_sample_images({"images": [path]})  # what the trainer's rollout opens
    served = open_image(open(path, "rb").read(), "messages[0]", ServeLimits())
    np.testing.assert_array_equal(np.asarray(trained), np.asarray(load_image(path)))
    np.testing.assert_array_equal(np.asarray(served), np.asarray(load_image(path)))


def test_constant_nan_and_rotated_high_bit_depth_images(tmp_path):
    with np.errstate(all="raise"):  # no division by a zero range
        assert _grey(load_image(_save(np.full((4, 4), 1e6, np.float32), tmp_path / "c.tif"))).max() == 0
        assert (_grey(load_image(_save(np.full((4, 4), 3000, np.uint16), tmp_path / "c.png")))
                == round(3000 / 65535 * 255)).all()
    values = _gradient(0, 1, np.float32)
    values[0, :10] = np.nan
    grey = _grey(load_image(_save(values, tmp_path / "nan.tif")))
    assert (grey[0, :10] == 0).all() and grey[1, -1] == 255
    # a 16-bit image with an EXIF orientation is turned upright, then scaled
    exif = Image.Exif()
    exif[0x0112] = 6  # rotated 90 degrees clockwise for display
    Image.fromarray(GRADIENT).save(tmp_path / "rot.png", exif=exif)
    upright = _grey(load_image(str(tmp_path / "rot.png")))
    assert upright.shape == (WIDTH, 8) and upright[0, 0] == 0 and upright[-1, 0] == 255


def _animated_gif():
    frames = [Image.new("P", (8, 8), i) for i in (3, 7)]
    buffer = io.BytesIO()
    frames[0].save(buffer, "GIF", save_all=True, append_images=frames[1:])
    return Image.open(io.BytesIO(buffer.getvalue()))


@pytest.mark.parametrize("make", [
    lambda: Image.new("CMYK", (8, 8), (10, 200, 30, 40)),
    lambda: Image.new("P", (8, 8), 5),
    lambda: Image.new("LA", (8, 8), (90, 128)),
    lambda: Image.new("L", (8, 8), 77),
    _animated_gif,
], ids=["CMYK", "palette", "grey+alpha", "grey", "animated GIF"])
def test_other_modes_convert_as_before(make):
    np.testing.assert_array_equal(np.asarray(as_rgb(make())), np.asarray(make().convert("RGB")))
