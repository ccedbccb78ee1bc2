"""The synthetic zoom task: the pattern vanishes at the model's input resolution and shows in the episode's crop; the
scripted episode's crop box is in the model's coordinates and covers the framed square; episodes load checked."""
import json
import os

import numpy as np
import pytest
from PIL import Image

from paddle_r1.config.jobs import SFTConfig
from paddle_r1.data.loader import load_samples
from paddle_r1.job_data import load_from_config
from paddle_r1.data.samples import DataError
from paddle_r1.synthetic.zoom import BACKGROUND, PATTERNS, TINY_RESIZER, make_synthetic_zoom, pattern_pixels
from paddle_r1.models.coords import box_to_original
from paddle_r1.models.resize import Resizer
from paddle_r1.rewards import get_reward


@pytest.fixture(scope="module")
def zoom_jsonl(tmp_path_factory):
    return make_synthetic_zoom(str(tmp_path_factory.mktemp("zoom")), num_samples=6, seed=2)


@pytest.fixture(scope="module")
def grid_jsonl(tmp_path_factory):
    return make_synthetic_zoom(str(tmp_path_factory.mktemp("zoom_grid")), num_samples=8, seed=2, cells=4)


def _rows(path):
    return [json.loads(line) for line in open(path)]


def _pattern_spreads(processor, folder, row) -> tuple[list, list]:
    """The four patterns painted into ``row``'s canvas, through the processor: the pairwise sums of absolute
    pixel-value differences of the whole canvas, then of the episode's crop of it."""
    canvas = Image.open(os.path.join(folder, row["images"][0])).convert("RGB")
    x1, y1 = row["target_box"][:2]
    cut = [round(v) for v in box_to_original(row["episode"][1]["arguments"]["bbox_2d"], "abs_resized",
                                             canvas.size, (112, 112))]

    def pixel_values(pattern, crop):
        painted = canvas.copy()
        painted.paste(Image.fromarray(pattern_pixels(pattern, 24)).convert("RGB"), (x1 + 3, y1 + 3))
        image = painted.crop(cut) if crop else painted
        return processor.image_processor(images=[image], return_tensors="pd")["pixel_values"].numpy()

    def spread(crop):
        values = {p: pixel_values(p, crop) for p in PATTERNS}
        return [np.abs(values[a] - values[b]).sum() for i, a in enumerate(PATTERNS) for b in PATTERNS[i + 1:]]

    return spread(False), spread(True)


def test_the_pattern_vanishes_at_input_resolution_and_shows_in_the_crop(tiny, zoom_jsonl):
    """The four patterns painted into the same canvas, through the tiny processor: the whole canvas (resized to
    112 x 112) differs between patterns by less than 1/20 of what the episode's crop of it differs by."""
    for row in _rows(zoom_jsonl)[:3]:
        whole, cropped = _pattern_spreads(tiny[1], os.path.dirname(zoom_jsonl), row)
        assert max(whole) < min(cropped) / 20, (whole, cropped)


def test_episode_crops_the_framed_square_in_model_coordinates(zoom_jsonl):
    folder = os.path.dirname(zoom_jsonl)
    rows = _rows(zoom_jsonl)
    assert {r["solution"] for r in rows} <= set(PATTERNS) and len({r["solution"] for r in rows}) > 1
    for row in rows:
        call, result, answer = row["episode"]
        box = json.loads(call["text"].removeprefix("<tool_call>").removesuffix("</tool_call>"))["arguments"]["bbox_2d"]
        assert box == result["arguments"]["bbox_2d"] and all(isinstance(v, int) for v in box)
        assert all(0 <= v <= 112 for v in box)  # pixels of the 112 x 112 input, not of the 448 x 448 canvas
        cut = [round(v) for v in box_to_original(box, "abs_resized", (448, 448), (112, 112))]
        x1, y1, x2, y2 = row["target_box"]
        assert cut[0] <= x1 and cut[1] <= y1 and x2 <= cut[2] and y2 <= cut[3]
        canvas = Image.open(os.path.join(folder, row["images"][0]))
        crop = Image.open(os.path.join(folder, result["images"][0]))
        assert np.array_equal(np.asarray(crop), np.asarray(canvas.crop(cut)))
        # the scripted answer is what the task's reward credits; another pattern's name is not
        scores = get_reward("all_match")([answer["text"]] + [f"<answer>{p}</answer>" for p in PATTERNS],
                                         solution=[row["solution"]] * 5)
        assert scores == [1.0] + [float(p == row["solution"]) for p in PATTERNS]


def test_relative_coordinates_and_seeding(tmp_path):
    a = make_synthetic_zoom(str(tmp_path / "a"), num_samples=4, seed=7, coord_system="rel_1000")
    b = make_synthetic_zoom(str(tmp_path / "b"), num_samples=4, seed=7, coord_system="rel_1000")
    assert open(a).read() == open(b).read()
    for row in _rows(a):
        box = row["episode"][1]["arguments"]["bbox_2d"]
        cut = box_to_original(box, "rel_1000", (448, 448))
        x1, y1, x2, y2 = row["target_box"]
        assert max(box) > 112 and cut[0] <= x1 and cut[1] <= y1 and x2 <= cut[2] and y2 <= cut[3]
    # a larger max_pixels (Qwen2.5-VL sees the canvas at 224 x 224): the call's pixels double
    wide = make_synthetic_zoom(str(tmp_path / "c"), num_samples=1, seed=7,
                               resizer=Resizer(28, 56 * 56, 224 * 224, "abs_resized"))
    small = make_synthetic_zoom(str(tmp_path / "d"), num_samples=1, seed=7, resizer=TINY_RESIZER)
    assert _rows(wide)[0]["episode"][1]["arguments"]["bbox_2d"] == [
        2 * v for v in _rows(small)[0]["episode"][1]["arguments"]["bbox_2d"]]


def test_episodes_load_with_their_images_and_bad_ones_are_named(zoom_jsonl, tmp_path):
    samples, report = load_samples(zoom_jsonl)
    assert report.skipped == 0 and len(samples) == 6
    tool = samples[0]["episode"][1]
    assert os.path.isabs(tool["images"][0]) and os.path.isfile(tool["images"][0])
    rows = _rows(zoom_jsonl)
    bad = [dict(rows[0], episode=rows[0]["episode"][:2]),
           dict(rows[0], episode=[rows[0]["episode"][0], dict(rows[0]["episode"][1], images=["crops/none.png"]),
                                  rows[0]["episode"][2]]),
           dict(rows[0], episode=[{"role": "tool", "name": "crop", "text": ""}, rows[0]["episode"][2]]),
           dict(rows[0], episode=[dict(rows[0]["episode"][0], text=" ")])]
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows[:1] + bad))
    image_root = os.path.dirname(zoom_jsonl)
    samples, report = load_samples(str(path), image_root=image_root)
    assert len(samples) == 1 and [where for where, _ in report.problems] == [f"{path}:{i}" for i in (2, 3, 4, 5)]
    reasons = [reason for _, reason in report.problems]
    assert "episode[1]: an episode ends with the assistant's answer" in reasons[0]
    assert reasons[1] == f"image not found: {image_root}/crops/none.png"
    assert reasons[2].startswith("episode[0]: expected an assistant turn")
    assert reasons[3] == "episode[0]: 'text' must be a non-empty string"
    with pytest.raises(DataError, match=r"bad.jsonl:2: episode\[1\]"):
        load_samples(str(path), image_root=image_root, strict=True)


def test_dataset_name_writes_the_set_for_the_models_resize(tiny_model_dir, tmp_path):
    config = SFTConfig(model_name_or_path=tiny_model_dir, dataset_name="synthetic_zoom", output_dir=str(tmp_path),
                       max_pixels=224 * 224)
    samples, _ = load_from_config(config)
    box = samples[0]["episode"][1]["arguments"]["bbox_2d"]
    assert len(samples) == 32 and max(box) > 112  # boxes over the 224 x 224 input that max_pixels asks for
    with pytest.raises(DataError, match="synthetic_zoom .* needs a local model folder"):
        load_from_config(SFTConfig(model_name_or_path="Qwen/Qwen2.5-VL-3B-Instruct", dataset_name="synthetic_zoom",
                                   output_dir=str(tmp_path)))


def test_cells_put_the_target_inside_one_cell_and_the_call_crops_that_cell(grid_jsonl):
    """cells=4: the call's box is one of 16 in the 112 x 112 input (multiples of 28); mapped back to the canvas it is
    exactly a 112-pixel grid cell, the framed square lies centred in it, and the crop written is that cell."""
    folder = os.path.dirname(grid_jsonl)
    rows = _rows(grid_jsonl)
    cells = set()
    for row in rows:
        box = row["episode"][1]["arguments"]["bbox_2d"]
        assert all(v % 28 == 0 for v in box) and box[2] - box[0] == box[3] - box[1] == 28
        cut = box_to_original(box, "abs_resized", (448, 448), (112, 112))
        column, line = cut[0] // 112, cut[1] // 112
        assert cut == [column * 112, line * 112, column * 112 + 112, line * 112 + 112]
        x1, y1, x2, y2 = row["target_box"]
        assert [x1, y1, x2, y2] == [cut[0] + 41, cut[1] + 41, cut[0] + 71, cut[1] + 71]  # (112 - 30) / 2 = 41
        canvas = Image.open(os.path.join(folder, row["images"][0]))
        crop = Image.open(os.path.join(folder, row["episode"][1]["images"][0]))
        assert np.array_equal(np.asarray(crop), np.asarray(canvas.crop([int(v) for v in cut])))
        cells.add((column, line))
    assert len(cells) > 3


def test_a_cell_is_one_merged_vision_token_and_its_crop_shows_the_pattern(tiny, grid_jsonl):
    """Through the tiny processor (448 -> 112 x 112, 14-pixel patches merged 2 x 2: 16 tokens of 4 patch rows each,
    row-major): erasing the framed square changes the pixel values of the token the call's box names (95% of the
    change or more; the resize's kernel bleeds a little past the cell's edge); the cell's crop is seen at its own
    resolution (8 x 8 patches) and there the four patterns differ 20x more than on the whole canvas."""
    _, processor = tiny
    folder = os.path.dirname(grid_jsonl)
    for row in _rows(grid_jsonl)[:4]:
        canvas = Image.open(os.path.join(folder, row["images"][0])).convert("RGB")
        erased = canvas.copy()
        erased.paste(BACKGROUND, row["target_box"])
        values = [processor.image_processor(images=[image], return_tensors="pd")["pixel_values"].numpy()
                  for image in (canvas, erased)]
        change = np.abs(values[0] - values[1]).reshape(16, -1).sum(axis=1)
        x1, y1 = row["episode"][1]["arguments"]["bbox_2d"][:2]
        assert change[(y1 // 28) * 4 + x1 // 28] >= 0.95 * change.sum(), change
        crop = Image.open(os.path.join(folder, row["episode"][1]["images"][0]))
        grid = processor.image_processor(images=[crop], return_tensors="pd")["image_grid_thw"].numpy()
        assert grid.tolist() == [[1, 8, 8]]
        whole, cropped = _pattern_spreads(processor, folder, row)
        assert max(whole) < min(cropped) / 20, (whole, cropped)


def test_cells_reject_a_grid_that_does_not_fit(tmp_path):
    with pytest.raises(ValueError, match="cells=3 must be a positive whole number dividing the canvas size 448 x 448"):
        make_synthetic_zoom(str(tmp_path), num_samples=1, cells=3)
    with pytest.raises(ValueError, match="cells=16 makes cells of 28 x 28 pixels, smaller than the 30-pixel"):
        make_synthetic_zoom(str(tmp_path), num_samples=1, cells=16)
    with pytest.raises(ValueError, match="crop_side and cells exclude each other"):
        make_synthetic_zoom(str(tmp_path), num_samples=1, cells=4, crop_side=112)


def test_cell_hint_names_the_cell_the_call_crops(tmp_path, grid_jsonl):
    """cell_hint: each question names the row and column (from 1, top left) of the cell the scripted call crops;
    the canvases and episodes are those without it, and without it no question names a cell."""
    hinted = _rows(make_synthetic_zoom(str(tmp_path), num_samples=8, seed=2, cells=4, cell_hint=True))
    plain = _rows(grid_jsonl)
    for row, same in zip(hinted, plain):
        x1, y1 = row["episode"][1]["arguments"]["bbox_2d"][:2]
        assert f"the small square in row {y1 // 28 + 1}, column {x1 // 28 + 1} with the red frame" in row["problem"]
        assert row["episode"] == same["episode"] and row["target_box"] == same["target_box"]
        assert "row" not in same["problem"]
    assert len({row["problem"] for row in hinted}) > 3
    with pytest.raises(ValueError, match="cell_hint names the square's cell and needs cells"):
        make_synthetic_zoom(str(tmp_path / "no_cells"), num_samples=1, cell_hint=True)
