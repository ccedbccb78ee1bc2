"""Every source format, read from small files the tests write (the seeds' own examples included)."""
import csv
import json
import os

import pytest
from PIL import Image

from paddle_r1.config.jobs import GRPOConfig
from paddle_r1.errors import ConfigError
from paddle_r1.config.reading.loading import load_config
from paddle_r1.data.loader import load_samples
from paddle_r1.job_data import load_from_config
from paddle_r1.data.mixture import sample_indices
from paddle_r1.data.samples import DataError
from paddle_r1.generation.generator import build_prompt_batch


def image(folder, name, size=(64, 48), color=(200, 30, 30)):
    path = os.path.join(folder, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.new("RGB", size, color).save(path)
    return path


def write(path, rows, jsonl=False):
    with open(path, "w", encoding="utf-8") as f:
        if jsonl:
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        else:
            json.dump(rows, f, ensure_ascii=False)
    return str(path)


# seed 000, as the document shows them
SEED_MULTI_BOX = {
    "image_path": "345.jpg", "height": 720, "width": 1280,
    "instruction": "Draw bounding boxes around product positions and label them with tags 0, 1, 2, 3, "
                   "then output in JSON format",
    "abs_box": {"0": [[456, 337, 725, 557]], "1": [], "2": [[849, 407, 961, 482], [965, 480, 1099, 550]], "3": []},
}
SEED_SINGLE_BOX = {
    "image_path": "APP_20250815_103045.png", "height": 1080, "width": 1920,
    "instruction": "请帮我找出包含“立即领取”按钮的区域，输出其坐标，格式为 [x_min, y_min, x_max, y_max]。",
    "bbox": [850, 720, 1070, 780],
}


def test_grounding_seed_examples(tmp_path):
    image(tmp_path, "345.jpg", (1280, 720))
    image(tmp_path, "APP_20250815_103045.png", (1920, 1080))
    path = write(tmp_path / "multi_box_grounding_RL_sample.json", [SEED_MULTI_BOX, SEED_SINGLE_BOX])
    samples, report = load_samples(path)
    assert report.skipped == 0
    multi, single = samples
    assert multi["images"] == [str(tmp_path / "345.jpg")] and multi["problem"] == SEED_MULTI_BOX["instruction"]
    assert multi["solution"] == SEED_MULTI_BOX["abs_box"] and multi["width"] == 1280
    assert single["solution"] == [850, 720, 1070, 780]


def test_rec_with_image_root(tmp_path):
    image(tmp_path / "coco", "train2014/a.jpg")
    rows = [{"image": "train2014/a.jpg", "problem": "the red one", "solution": [1, 2, 30.5, 40],
             "normal_caption": "red"}]
    path = write(tmp_path / "rec.json", rows)
    samples, _ = load_samples(path, image_root=str(tmp_path / "coco"))
    assert samples == [{"images": [str(tmp_path / "coco/train2014/a.jpg")], "problem": "the red one",
                        "solution": [1, 2, 30.5, 40], "normal_caption": "red", "reward_method": None,
                        "_source": f"{path}[0]"}]


def test_vlm_r1_conversation_multi_image_keeps_order(tmp_path, tiny):
    image(tmp_path, "left.png", (56, 56), (255, 0, 0))
    image(tmp_path, "right.png", (112, 56), (0, 0, 255))
    row = {"id": 7, "image": ["left.png", "right.png"], "accu_reward_method": "mcq",
           "conversations": [{"from": "human", "value": "<image> first, <image> second. Which is wider?"},
                             {"from": "gpt", "value": "<answer>B</answer>"}]}
    samples, _ = load_samples(write(tmp_path / "conv.jsonl", [row], jsonl=True))
    sample = samples[0]
    assert sample["images"] == [str(tmp_path / "left.png"), str(tmp_path / "right.png")]
    assert sample["solution"] == "B" and sample["reward_method"] == "mcq" and sample["id"] == 7

    _, processor = tiny
    batch, facts = build_prompt_batch([sample], processor, "{Question}")
    assert facts.image_sizes == [[(56, 56), (112, 56)]]
    assert batch.image_grid_thw.shape[0] == 2  # one grid per image
    text = facts.texts[0]
    assert text.count("<|vision_start|><|image_pad|><|vision_end|>") == 2
    assert text.index("<|vision_start|>") < text.index(" first") < text.rindex("<|vision_start|>") < \
        text.index(" second")
    ids = batch.input_ids[0].tolist()
    pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    blocks = [n for n in "".join("x" if t == pad else " " for t in ids).split()]
    grids = batch.image_grid_thw.tolist()
    assert [len(b) for b in blocks] == [t * h * w // 4 for t, h, w in grids]  # one block per image, in order


def test_r1v_saved_dataset_and_eval_jsonl(tmp_path):
    from datasets import Dataset, Features, Image as ImageFeature, Value

    images = [Image.new("RGB", (40, 30), (i * 60, 0, 0)) for i in range(3)]
    data = Dataset.from_dict({"image": images, "problem": [f"How many? {i}" for i in range(3)],
                              "solution": [f"<answer> {i} </answer>" for i in range(3)]},
                             features=Features({"image": ImageFeature(), "problem": Value("string"),
                                                "solution": Value("string")}))
    folder = str(tmp_path / "clevr_cogen_a_train")
    data.save_to_disk(folder)
    samples, _ = load_samples(folder, image_cache_dir=str(tmp_path / "cache"))
    assert [s["solution"] for s in samples] == ["0", "1", "2"]
    assert all(s["images"][0].startswith(str(tmp_path / "cache")) for s in samples)
    assert Image.open(samples[2]["images"][0]).getpixel((0, 0)) == (120, 0, 0)

    image(tmp_path / "superclevr", "a.png")
    rows = [{"image_path": "a.png", "question": "How many cubes?", "ground_truth": 3}]
    samples, _ = load_samples(write(tmp_path / "superclevr_test200_counting_problems.jsonl", rows, jsonl=True),
                              image_root=str(tmp_path / "superclevr"))
    assert samples[0]["problem"] == "How many cubes?" and samples[0]["solution"] == 3


def test_products_csv_and_json(tmp_path):
    image(tmp_path / "img", "sku1.jpg")
    image(tmp_path / "img", "spu1.jpg")
    header = ["text", "label", "sku_img", "spu_img_1", "spu_img_2"]
    with open(tmp_path / "products.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerow(["红色的杯子", "12 8 15", "https://cdn.example/x/sku1.jpg?v=2", "spu1.jpg", ""])
    samples, _ = load_samples(str(tmp_path / "products.csv"), image_root=str(tmp_path / "img"))
    assert samples[0]["images"] == [str(tmp_path / "img/sku1.jpg"), str(tmp_path / "img/spu1.jpg")]
    assert samples[0]["problem"] == "红色的杯子" and samples[0]["solution"] == "12 8 15"
    row = {"text": "a box", "label": "3 2 1", "front": "sku1.jpg"}
    samples, _ = load_samples(write(tmp_path / "p.json", [row]), image_root=str(tmp_path / "img"),
                              image_columns=["front"], data_format="products")
    assert samples[0]["images"] == [str(tmp_path / "img/sku1.jpg")]


def test_generic(tmp_path):
    image(tmp_path, "a.png")
    rows = [{"images": ["a.png"], "problem": "q", "solution": {"any": "thing"}, "reward_method": "llm"}]
    samples, _ = load_samples(write(tmp_path / "g.jsonl", rows, jsonl=True))
    assert samples[0]["solution"] == {"any": "thing"} and samples[0]["reward_method"] == "llm"


def test_sampling_strategies():
    assert sample_indices(10, "all", 0) == list(range(10))
    assert sample_indices(10, "first:3", 0) == [0, 1, 2]
    assert sample_indices(10, "end:2", 0) == [8, 9]
    assert sample_indices(10, "first:10%", 0) == [0]
    assert sample_indices(10, "end:50%", 0) == [5, 6, 7, 8, 9]
    picked = sample_indices(10, "random:4", 1)
    assert len(set(picked)) == 4 and picked == sample_indices(10, "random:4", 1) == sorted(picked)
    assert sample_indices(10, "random:4", 1) != sample_indices(10, "random:4", 2)
    assert len(sample_indices(10, "random:50%", 0)) == 5 and sample_indices(3, "first:99", 0) == [0, 1, 2]


def test_mixture_yaml(tmp_path):
    image(tmp_path, "345.jpg", (1280, 720))
    image(tmp_path / "coco", "a.jpg")
    grounding = write(tmp_path / "multi_box_grounding_RL_sample.json", [SEED_MULTI_BOX] * 4)
    rec = write(tmp_path / "rec.jsonl", [{"image": "a.jpg", "problem": f"p{i}", "solution": [0, 0, 5, 5]}
                                         for i in range(10)], jsonl=True)
    mixture = tmp_path / "mix.yaml"
    mixture.write_text(f"""datasets:
  - json_path: "{os.path.basename(grounding)}"
    sampling_strategy: "all" # or "first:100", "random:50%", "end:10"
    reward_method: multi_iou
  - json_path: {rec}
    sampling_strategy: "random:30%"
    image_root: {tmp_path / "coco"}
    format: rec
""")
    samples, report = load_samples(str(mixture), seed=5)
    assert len(samples) == 4 + 3
    assert {s["reward_method"] for s in samples[:4]} == {"multi_iou"}
    assert samples[4:] == load_samples(str(mixture), seed=5)[0][4:]  # seeded
    assert report.read[rec] == 3
    mixture.write_text("datasets:\n  - json_path: x.json\n    sampling: all\n")
    with pytest.raises(DataError, match=r"mix.yaml: datasets\[0\]: unknown key\(s\) 'sampling'"):
        load_samples(str(mixture))
    mixture.write_text("datasets:\n  - json_path: x.json\n    sampling_strategy: some\n")
    with pytest.raises(DataError, match="sampling_strategy 'some'"):
        load_samples(str(mixture))
    # two mixtures pasted into one file: yaml would keep the second list alone and train on half the data
    mixture.write_text(f"datasets:\n  - json_path: {grounding}\n# the counting data\ndatasets:\n"
                       f"  - json_path: {rec}\n")
    with pytest.raises(DataError, match=r"mix.yaml: key 'datasets' is given twice, on line 1 and line 4"):
        load_samples(str(mixture))


def test_files_saved_with_a_byte_order_mark_read_as_without(tmp_path):
    """Notepad's "UTF-8 with BOM" and Excel's "CSV UTF-8" start a file with U+FEFF: json refused the first line
    ("Unexpected UTF-8 BOM") and csv named the first column "\\ufefftext"; a json config the same (yaml skips it)."""
    image(tmp_path, "a.png")
    row = {"image": "a.png", "problem": "红色的杯子在哪里", "solution": [0, 0, 5, 5]}
    bom = "\ufeff"
    (tmp_path / "rows.jsonl").write_text(bom + json.dumps(row, ensure_ascii=False) + "\n", encoding="utf-8")
    (tmp_path / "rows.json").write_text(bom + json.dumps([row], ensure_ascii=False), encoding="utf-8")
    (tmp_path / "rows.csv").write_text(bom + "image,problem,solution\na.png,红色的杯子在哪里,\"[0, 0, 5, 5]\"\n",
                                       encoding="utf-8")
    for name in ("rows.jsonl", "rows.json", "rows.csv"):
        samples, report = load_samples(str(tmp_path / name), data_format="rec")
        assert report.skipped == 0 and samples[0]["problem"] == "红色的杯子在哪里", name
        assert samples[0]["solution"] == [0, 0, 5, 5], name
    (tmp_path / "mix.yaml").write_text(bom + "datasets:\n  - json_path: rows.jsonl\n    format: rec\n",
                                       encoding="utf-8")
    assert len(load_samples(str(tmp_path / "mix.yaml"))[0]) == 1
    for name, text in (("c.yaml", "beta: 0.02\n"), ("c.json", '{"beta": 0.02}')):
        (tmp_path / name).write_text(bom + text, encoding="utf-8")
        assert load_config(GRPOConfig, str(tmp_path / name), []).beta == 0.02


def _bad_rows(tmp_path):
    image(tmp_path, "ok.png")
    image(tmp_path, "strip.png", (4000, 10))
    (tmp_path / "broken.png").write_bytes(b"\x89PNG not really")
    good = {"image": "ok.png", "problem": "p", "solution": [0, 0, 4, 4]}
    lines = [json.dumps(good), '{"image": "ok.png", "problem": "p", "solution": [0, 0',
             json.dumps({**good, "image": "gone.png"}),
             json.dumps({**good, "image": "broken.png"}), json.dumps({**good, "problem": "  "}),
             json.dumps({**good, "solution": [[0, 0, 4, 4]]}), json.dumps({**good, "image": "strip.png"}),
             json.dumps(good)]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_bad_data_is_skipped_counted_and_named(tmp_path):
    path = _bad_rows(tmp_path)
    samples, report = load_samples(path, data_format="rec")
    assert len(samples) == 2 and report.skipped == 6
    reasons = dict(report.problems)
    assert reasons[f"{path}:2"].startswith("malformed json line")
    assert reasons[f"{path}:3"] == f"image not found: {tmp_path}/gone.png"
    assert reasons[f"{path}:4"].startswith(f"cannot read image {tmp_path}/broken.png")
    assert reasons[f"{path}:5"] == "missing or empty 'problem'"
    assert reasons[f"{path}:6"].startswith("solution must be [x1, y1, x2, y2]")
    assert "aspect ratio above 200" in reasons[f"{path}:7"]
    summary = report.summary()
    assert summary.startswith(f"skipped 6 of 8 samples: {path}:2 malformed json line")
    assert summary.endswith("; and 1 more") and "\n" not in summary


def test_strict_data_stops_at_the_first(tmp_path):
    path = _bad_rows(tmp_path)
    with pytest.raises(DataError, match=rf"{path}:2: malformed json line.*strict_data"):
        load_samples(path, data_format="rec", strict=True)


def test_easydistill_config_from_seed_000(tmp_path):
    image(tmp_path, "345.jpg", (1280, 720))
    write(tmp_path / "multi_box_grounding_RL_sample.json", [SEED_MULTI_BOX])
    (tmp_path / "multi_box_grounding.yaml").write_text(
        'datasets:\n  - json_path: "multi_box_grounding_RL_sample.json"\n    sampling_strategy: "all"\n')
    seed_config = {
        "job_type": "mmkd_rl_grounding",
        "dataset": {"labeled_path": str(tmp_path / "multi_box_grounding.yaml")},
        "models": {"student": "Qwen/Qwen2.5-VL-3B-Instruct"},
        "training": {"reward_funcs": ["multi_box_format_reward", "multi_gaussian_point", "multi_gaussian_plane_reward"],
                     "deepspeed": "configs/accelerate_config/stage3.json", "output_dir": "./result/",
                     "max_length": 4096, "num_train_epochs": 1, "per_device_train_batch_size": 8, "roll_out_num": 8,
                     "save_steps": 400, "logging_steps": 4, "learning_rate": 1e-6, "max_pixels": 12845056},
    }
    path = tmp_path / "mmkd_rl_grounding.json"
    path.write_text(json.dumps(seed_config))
    config = load_config(GRPOConfig, str(path))
    assert config.model_name_or_path == "Qwen/Qwen2.5-VL-3B-Instruct" and config.num_generations == 8
    assert config.reward_funcs == ["multi_box_format", "multi_gaussian_point", "multi_gaussian_plane"]
    assert config.max_completion_length == 4096 and config.max_pixels == 12845056 and config.save_steps == 400
    samples, _ = load_from_config(config)
    assert samples[0]["solution"]["2"][1] == [965, 480, 1099, 550]
    seed_config["training"]["rollouts"] = 8
    path.write_text(json.dumps(seed_config))
    with pytest.raises(ConfigError, match="unknown config key 'training.rollouts'"):
        load_config(GRPOConfig, str(path))


def test_media_paths_are_recorded_absolute_when_the_data_path_is_relative(tmp_path, monkeypatch):
    """``--data_path data/rows.jsonl`` run from the project folder: completions.jsonl and the evaluation's results
    record each sample's image path, and ``paddle-r1 view`` reads it from the run's folder, where a path relative to
    where training ran named nothing (every image "not found")."""
    image(tmp_path / "data" / "图片 #1", "a b.png")
    monkeypatch.chdir(tmp_path)
    write("data/rows.jsonl", [{"image": "图片 #1/a b.png", "problem": "p", "solution": [0, 0, 5, 5]}], jsonl=True)
    mixture = tmp_path / "mix.yaml"
    mixture.write_text("datasets:\n  - json_path: data/rows.jsonl\n    image_root: data\n")
    for path in ("data/rows.jsonl", "mix.yaml"):
        samples, _ = load_samples(path, data_format="rec")
        assert samples[0]["images"] == [str(tmp_path / "data" / "图片 #1" / "a b.png")], path
    monkeypatch.chdir(tmp_path / "data")  # where view and the evaluation's pictures read them from
    assert os.path.isfile(samples[0]["images"][0])
