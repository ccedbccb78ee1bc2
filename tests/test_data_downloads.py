"""Data as users download it: a `huggingface-cli download --local-dir` folder of parquet shards, single
parquet and arrow files, product tables as .xlsx, and VLM-R1's image placement. The files are written with
`datasets` / pandas in the shape the published ones have."""
import io
import os
import shutil

import pytest
from PIL import Image

from paddle_r1.config.jobs import GRPOConfig
from paddle_r1.data.loader import load_samples
from paddle_r1.job_data import load_from_config
from paddle_r1.data.samples import DataError
from paddle_r1.generation.generator import build_messages

README = """---
dataset_info:
  features:
  - name: image
    dtype: image
  - name: problem
    dtype: string
  - name: solution
    dtype: string
configs:
- config_name: default
  data_files:
  - split: train
    path: data/train-*
---
"""


def png(color, size=(40, 30)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format="PNG")
    return buffer.getvalue()


def r1v_rows(count, start=0):
    """R1-V's columns (clevr_cogen_a_train, GEOQA_R1V_Train_8K): image with embedded bytes, problem, solution."""
    return {"image": [{"bytes": png((10 * (start + i), 0, 0)), "path": None} for i in range(count)],
            "problem": [f"How many items are there in the image? ({start + i})" for i in range(count)],
            "solution": [f"<answer> {start + i} </answer>" for i in range(count)]}


def r1v_dataset(rows):
    from datasets import Dataset, Features, Image as ImageFeature, Value

    features = Features({"image": ImageFeature(), "problem": Value("string"), "solution": Value("string")})
    return Dataset.from_dict(rows, features=features)


def hub_download(folder, shards, test_rows=0):
    """What `huggingface-cli download leonardPKU/clevr_cogen_a_train --local-dir folder` leaves: README.md and
    data/train-0000i-of-0000n.parquet (plus a test split's shard when asked)."""
    os.makedirs(os.path.join(folder, "data"))
    with open(os.path.join(folder, "README.md"), "w") as f:
        f.write(README)
    for i, rows in enumerate(shards):
        r1v_dataset(rows).to_parquet(os.path.join(folder, "data", f"train-{i:05d}-of-{len(shards):05d}.parquet"))
    if test_rows:
        r1v_dataset(r1v_rows(test_rows, 100)).to_parquet(os.path.join(folder, "data", "test-00000-of-00001.parquet"))
    return str(folder)


def test_hub_download_folder_of_parquet_shards(tmp_path):
    corrupt = r1v_rows(2, 3)
    corrupt["image"][1] = {"bytes": b"not an image", "path": None}
    folder = hub_download(tmp_path / "clevr_cogen_a_train", [r1v_rows(3), corrupt], test_rows=2)
    cache = tmp_path / "cache"
    samples, report = load_samples(folder, image_cache_dir=str(cache))
    assert [s["solution"] for s in samples] == ["0", "1", "2", "3"]  # the train split only, shards in order
    assert samples[3]["_source"] == f"{folder}/data/train-00001-of-00002.parquet[0]"
    (where, reason), = report.problems  # the corrupt image costs its own row, named by shard and row
    assert where == f"{folder}/data/train-00001-of-00002.parquet[1]" and "cannot read image" in reason
    assert Image.open(samples[2]["images"][0]).convert("RGB").getpixel((0, 0)) == (20, 0, 0)
    cached = sorted(os.listdir(cache))
    assert len(cached) == 5  # written once each (the corrupt one too: it is the file the error names)
    load_samples(folder, image_cache_dir=str(cache))
    assert sorted(os.listdir(cache)) == cached


def test_images_stored_in_rows_are_named_absolute_under_a_relative_cache(tmp_path, monkeypatch):
    """A relative ``image_cache_dir``: the cached images' paths are recorded absolute, as a data file's are."""
    path = str(tmp_path / "geoqa.parquet")
    r1v_dataset(r1v_rows(1)).to_parquet(path)
    monkeypatch.chdir(tmp_path)
    samples, _ = load_samples(path, image_cache_dir="cache")
    assert os.path.dirname(samples[0]["images"][0]) == str(tmp_path / "cache")


def test_single_parquet_and_arrow_files(tmp_path):
    path = str(tmp_path / "geoqa.parquet")
    r1v_dataset(r1v_rows(2)).to_parquet(path)
    samples, _ = load_samples(path, image_cache_dir=str(tmp_path / "cache"))
    assert [s["solution"] for s in samples] == ["0", "1"] and samples[1]["_source"] == f"{path}[1]"

    r1v_dataset(r1v_rows(3)).save_to_disk(str(tmp_path / "saved"))
    arrows = [n for n in os.listdir(tmp_path / "saved") if n.endswith(".arrow")]
    loose = tmp_path / "arrows"
    loose.mkdir()
    shutil.copy(tmp_path / "saved" / arrows[0], loose / "train-00000-of-00001.arrow")
    samples, _ = load_samples(str(loose / "train-00000-of-00001.arrow"), image_cache_dir=str(tmp_path / "cache"))
    assert [s["solution"] for s in samples] == ["0", "1", "2"]
    samples, _ = load_samples(str(loose), image_cache_dir=str(tmp_path / "cache"))  # a folder of arrow files
    assert len(samples) == 3


def test_folder_without_data_files_is_one_clear_error(tmp_path):
    (tmp_path / "README.md").write_text("# nothing here\n")
    with pytest.raises(FileNotFoundError, match="no parquet or arrow data files"):
        load_samples(str(tmp_path))


def test_products_xlsx_bad_rows_named_by_sheet_and_row(tmp_path):
    import pandas

    for name in ("sku1.jpg", "spu1.jpg"):
        Image.new("RGB", (32, 32), (9, 9, 9)).save(tmp_path / name)
    columns = ["text", "label", "sku_img", "spu_img_1"]
    first = [["红色的杯子", "12 8 15", "https://cdn.example/x/sku1.jpg?v=2", "spu1.jpg"],
             ["", "", "", ""],  # a blank row, skipped like a blank csv line
             ["no label", "", "sku1.jpg", ""]]
    second = [["a box", 3, "sku1.jpg", ""], ["lost", "1 1 1", "missing.jpg", ""]]
    path = str(tmp_path / "products.xlsx")
    with pandas.ExcelWriter(path) as writer:
        pandas.DataFrame(first, columns=columns).to_excel(writer, sheet_name="cups", index=False)
        pandas.DataFrame(second, columns=columns).to_excel(writer, sheet_name="boxes", index=False)
    samples, report = load_samples(path, image_root=str(tmp_path))
    assert [(s["problem"], s["solution"]) for s in samples] == [("红色的杯子", "12 8 15"), ("a box", "3")]
    assert samples[0]["images"] == [str(tmp_path / "sku1.jpg"), str(tmp_path / "spu1.jpg")]
    assert samples[1]["_source"] == f"{path}:boxes:2"
    assert [where for where, _ in report.problems] == [f"{path}:cups:4", f"{path}:boxes:3"]


def conversation_sample(tmp_path, placement):
    for name in ("a.png", "b.png"):
        Image.new("RGB", (28, 28)).save(tmp_path / name)
    path = tmp_path / "vlm_r1.jsonl"
    path.write_text('{"id": 1, "image": ["a.png", "b.png"], "conversations": [{"from": "human", "value": '
                    '"<image>Left.<image>Right. Which is wider?"}, {"from": "gpt", "value": "<answer>B</answer>"}]}\n')
    config = GRPOConfig(data_path=str(path), image_placement=placement)
    return load_from_config(config)[0][0]


def test_image_placement_markers_default_and_vlm_r1_before_text(tmp_path):
    template = "{Question} Think first."
    ours = build_messages(conversation_sample(tmp_path, "markers"), template)[0]["content"]
    assert [c["type"] for c in ours] == ["image", "text", "image", "text"]
    sample = conversation_sample(tmp_path, "before_text")
    assert sample["problem"] == "Left.Right. Which is wider?"  # VLM-R1's problem: markers removed
    theirs = build_messages(sample, template)[0]["content"]
    assert theirs == [{"type": "image"}, {"type": "image"},
                      {"type": "text", "text": "Left.Right. Which is wider? Think first."}]
    with pytest.raises(DataError, match="config key 'image_placement'"):
        conversation_sample(tmp_path, "after_text")
