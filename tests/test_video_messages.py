"""Clips as verl and Qwen's chat form bring them: message parts ``{"type": "video", "video": path | [frame paths],
"fps", "nframes", ...}`` and verl's ``videos`` column entries, each clip with its own sampling keys over the job's;
the frames and sizes qwen-vl-utils itself gives (the golden of tests/fixtures/make_qwen_vl_utils_sampling.py); bad
keys skipped and named by file:line; a clip of one frame given to the model as its video processor pads it."""
import json
import os

import numpy as np
import pytest
from PIL import Image
from test_cli import paddle_r1
from test_video import frame, red_levels, write_clip

from paddle_r1.data.loader import load_samples
from paddle_r1.data.samples import DataError
from paddle_r1.data.video import VideoSampling, part_options, read_clip
from paddle_r1.generation.generator import build_messages

GOLDEN = os.path.join(os.path.dirname(__file__), "fixtures", "qwen_vl_utils_sampling.json")
CASES = json.load(open(GOLDEN, encoding="utf-8"))["cases"]
SMALL = dict(min_pixels=56 * 56, max_pixels=56 * 56)


def frame_files(folder, count, size=(56, 56)) -> list[str]:
    os.makedirs(folder, exist_ok=True)
    paths = [os.path.join(folder, f"{i:03d}.png") for i in range(count)]
    for i, path in enumerate(paths):
        Image.fromarray(frame(i, size)).save(path)
    return paths


def sampling_for(part: dict, job: VideoSampling = VideoSampling()) -> VideoSampling:
    return job.with_options(part_options(part))


@pytest.mark.parametrize("case", [c for c in CASES if c["kind"] == "file"],
                         ids=lambda c: f"{c['frames']}@{c['fps']}-{c['size'][0]}x{c['size'][1]}-{c['part']}")
def test_a_clip_file_is_sampled_as_qwen_vl_utils_samples_it(case):
    """qwen-vl-utils' fetch_video on the same clip and part: the frames kept, their rate and their size (the job's
    keys at their defaults, qwen-vl-utils' own)."""
    sampling, want = sampling_for({"video": "clip.mp4", **case["part"]}), case["qwen_vl_utils"]
    if "error" in want:
        with pytest.raises(DataError, match="'nframes'"):
            sampling.frame_count(case["frames"], case["fps"])
        return
    count = sampling.frame_count(case["frames"], case["fps"])
    assert np.linspace(0, case["frames"] - 1, count).round().astype(int).tolist() == want["indices"]
    assert count / case["frames"] * case["fps"] == pytest.approx(want["sample_fps"])
    assert list(sampling.frame_size(*case["size"], count, 28)) == want["size"]


@pytest.mark.parametrize("case", [c for c in CASES if c["kind"] == "list"],
                         ids=lambda c: f"{c['frames']}-{c['size'][0]}x{c['size'][1]}-{c['part']}")
def test_a_list_of_frames_is_read_as_qwen_vl_utils_reads_it(case, tmp_path):
    """Every frame kept, an odd count padded with the last, each sized as fetch_image sizes an image and then as a
    clip; its rate the part's sample_fps (else video_frames_fps)."""
    paths = frame_files(tmp_path, case["frames"], tuple(case["size"]))
    clip = read_clip(paths, sampling_for({"video": paths, **case["part"]}))
    want = case["qwen_vl_utils"]
    assert clip.frames.shape == (want["frames"], want["size"][1], want["size"][0], 3)
    assert clip.fps == pytest.approx(want["sample_fps"])
    levels = list(range(case["frames"]))
    assert red_levels(clip) == levels + levels[-1:] * (want["frames"] - case["frames"])


def test_frame_count_refuses_what_qwen_vl_utils_refuses_and_keeps_one_frame():
    assert VideoSampling(nframes=5).frame_count(300, 30) == 4  # 2.5 pairs round to an even 2
    with pytest.raises(DataError, match="'nframes' 7 keeps 8 frames"):
        VideoSampling(nframes=7).frame_count(7, 7)
    assert VideoSampling().frame_count(1, 25) == 1  # padded to a pair on reading


def verl_rows(tmp_path) -> tuple[list[dict], dict]:
    clip = write_clip(tmp_path / "a.mp4", count=16, fps=4)  # 4 s
    Image.new("RGB", (56, 56), "blue").save(tmp_path / "p.png")
    frames = frame_files(tmp_path / "frames", 3)
    rows = [
        {"data_source": "clips", "prompt": [{"role": "user", "content": "<image>Then <video>: what changes?"}],
         "images": [{"image": "p.png"}], "videos": [{"video": "a.mp4", "fps": 1, "max_frames": 32}],
         "reward_model": {"style": "rule", "ground_truth": "colour"}},
        {"prompt": [{"role": "system", "content": "Answer briefly."},
                    {"role": "user", "content": [
                        {"type": "text", "text": "Watch "}, {"type": "video", "video": f"file://{clip}", "nframes": 2},
                        {"type": "text", "text": " then "}, {"type": "video", "video": frames, "sample_fps": 3},
                        {"type": "text", "text": " and "}, {"type": "image", "image": "p.png"},
                        {"type": "text", "text": "?"}]}],
         "reward_model": {"ground_truth": 3}},
        {"problem": "<video>How long?", "answer": "4", "videos": [{"video": "a.mp4", "fps": 0.5}]},  # EasyR1 + verl
    ]
    return rows, {"clip": clip, "frames": frames, "image": str(tmp_path / "p.png")}


def test_verl_rows_place_each_image_and_clip_where_it_stands(tmp_path):
    rows, files = verl_rows(tmp_path)
    (tmp_path / "data.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    samples, report = load_samples(str(tmp_path / "data.jsonl"))
    assert report.skipped == 0
    first, second, easyr1 = samples
    assert first["images"] == [files["image"]] and first["videos"] == [files["clip"]]
    assert first["video_sampling"] == [{"fps": 1.0, "max_frames": 32}] and first["solution"] == "colour"
    assert first["data_source"] == "clips" and "system_prompt" not in first
    assert [p["type"] for p in build_messages(first, "{Question}")[0]["content"]] == ["image", "text", "video", "text"]
    assert second["videos"] == [files["clip"], files["frames"]] and second["solution"] == 3
    assert second["video_sampling"] == [{"nframes": 2}, {"frames_fps": 3.0}]
    messages = build_messages(second, "{Question}", system_prompt="the config's")
    assert messages[0]["content"] == [{"type": "text", "text": "Answer briefly."}]
    assert messages[1]["content"] == [
        {"type": "text", "text": "Watch "}, {"type": "video"}, {"type": "text", "text": " then "}, {"type": "video"},
        {"type": "text", "text": " and "}, {"type": "image"}, {"type": "text", "text": "?"}]
    assert easyr1["video_sampling"] == [{"fps": 0.5}]


def test_a_clips_own_keys_change_its_frames_and_no_other(tmp_path, tiny):
    """The same 16-frame clip read through the generator's reader: the job's 2 fps keeps 8 frames, a part's fps 1
    keeps 4, nframes 2 keeps 2, fps 0.5 keeps the job's minimum, 4; a list of 3 frames keeps them all (padded to 4)
    at its sample_fps."""
    from paddle_r1.generation.generator import load_sample_videos

    rows, files = verl_rows(tmp_path)
    (tmp_path / "data.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    samples, _ = load_samples(str(tmp_path / "data.jsonl"))
    job = VideoSampling(**SMALL)
    plain = {"images": [], "videos": [files["clip"]], "problem": "?", "solution": 1}
    counts = [[len(c.frames) for c in load_sample_videos(s, job, tiny[1])] for s in [plain, *samples]]
    assert counts == [[8], [4], [2, 4], [4]]
    listed = load_sample_videos(samples[1], job, tiny[1])[1]
    assert listed.fps == pytest.approx(3.0) and red_levels(listed) == [0, 1, 2, 2]


BAD_PARTS = [  # (the part's keys, what the message says)
    ({"fps": -2}, "'fps' must be a positive number, got -2"),
    ({"fps": "2"}, "'fps' must be a positive number, got '2'"),
    ({"max_frames": 4.5}, "'max_frames' must be a positive whole number, got 4.5"),
    ({"min_pixels": True}, "'min_pixels' must be a positive whole number, got True"),
    ({"min_frames": 10, "max_frames": 4}, "'min_frames' 10 is above 'max_frames' 4"),
    ({"min_frames": 800}, "'min_frames' 800 is above the job's video_max_frames 768"),
    ({"fps": 1, "nframes": 4}, "'fps' and 'nframes' are both given"),
    ({"nframes": 0}, "'nframes' must be a positive whole number, got 0"),
    ({"video_start": 1.5}, "key 'video_start' is not read here"),
    ({"nframes": 40}, "'nframes' 40 keeps 40 frames (rounded to pairs), the clip has 16"),
]


def test_bad_part_keys_are_skipped_counted_and_named_by_check_data(tmp_path):
    """Each bad key costs its own row, named by file:line and key, in the loader's report and in check-data's."""
    clip = write_clip(tmp_path / "a.mp4", count=16, fps=4)
    rows = [{"prompt": [{"role": "user", "content": [{"type": "video", "video": clip, **keys},
                                                     {"type": "text", "text": "?"}]}],
             "reward_model": {"ground_truth": "a"}} for keys, _ in BAD_PARTS]
    rows.append({"prompt": [{"role": "user", "content": "<video>?"}], "videos": [{"video": clip, "nframes": 4}],
                 "reward_model": {"ground_truth": "a"}})
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows))
    samples, report = load_samples(str(data))
    assert [s["video_sampling"] for s in samples] == [[{"nframes": 4}]]
    assert [where for where, _ in report.problems] == [f"{data}:{i + 1}" for i in range(len(BAD_PARTS))]
    for (_, said), (_, reason) in zip(BAD_PARTS, report.problems):
        assert said in reason, reason
    assert report.problems[0][1].startswith("prompt[0].content[0]: ")

    config = tmp_path / "c.yaml"
    config.write_text(f"data_path: {data}\n")
    result = paddle_r1("check-data", str(config))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for i, (_, said) in enumerate(BAD_PARTS):
        assert any(line.startswith(f"skipped {data}:{i + 1}: ") and said in line for line in lines), said
    assert lines[-1] == f"skipped {len(BAD_PARTS)} of {len(rows)} samples"


def test_rows_that_do_not_fit_verls_form_are_bad_rows(tmp_path):
    clip = write_clip(tmp_path / "a.mp4")
    user, truth = {"role": "user", "content": "<video>?"}, {"ground_truth": 1}
    rows = [
        ({"prompt": [user], "videos": [], "reward_model": truth}, "more <video> placeholders"),
        ({"prompt": [user], "videos": [clip, clip], "reward_model": truth}, "2 'videos' entries for 1"),
        ({"prompt": [user, {"role": "assistant", "content": "x"}], "videos": [clip], "reward_model": truth},
         "prompt[1]: a prompt is read as one user turn"),
        ({"prompt": [{"role": "user", "content": [{"type": "video", "video": []}]}], "reward_model": truth},
         "prompt[0].content[0]: a video is a path or a list of frame paths"),
        ({"prompt": [user], "videos": ["https://x/a.mp4"], "reward_model": truth},
         "videos[0]: https://x/a.mp4 is a URL: download it"),
        ({"prompt": [user], "videos": [clip], "reward_model": {}}, "no 'reward_model'"),
    ]
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps(r) for r, _ in rows) + "\n" + json.dumps(rows[1][0] | {"videos": [clip]}))
    samples, report = load_samples(str(data))
    assert len(samples) == 1 and report.skipped == len(rows)
    for (_, said), (_, reason) in zip(rows, report.problems):
        assert said in reason, reason


@pytest.fixture(scope="module")
def qwen3_dir(tmp_path_factory):
    from paddle_r1.testing.tiny import make_tiny_model

    return make_tiny_model(str(tmp_path_factory.mktemp("tiny") / "qwen3_vl"), family="qwen3_vl")


@pytest.mark.parametrize("family, side", [("qwen2_5_vl", 56), ("qwen3_vl", 64)])
@pytest.mark.parametrize("kind", ["mp4", "gif", "folder"])
def test_a_one_frame_clip_is_the_model_input_its_processor_makes(family, side, kind, tmp_path, request):
    """A clip of one frame (an MP4, a GIF, a folder of one image) reaches the model as the family's video processor
    makes it from that frame alone, padding it to a pair: the same tokens (and Qwen3-VL's time text), pixels and
    grid."""
    from paddle_r1.generation.generator import build_prompt_batch
    from paddle_r1.models.loading import load_processor

    folder = request.getfixturevalue("tiny_model_dir" if family == "qwen2_5_vl" else "qwen3_dir")
    processor = load_processor(folder)
    path = {"mp4": lambda: write_clip(tmp_path / "one.mp4", count=1, size=(side, side)),
            "gif": lambda: Image.fromarray(frame(3, (side, side))).save(tmp_path / "one.gif") or
            str(tmp_path / "one.gif"),
            "folder": lambda: os.path.dirname(frame_files(tmp_path / "one", 1, (side, side))[0])}[kind]()
    sample = {"images": [], "videos": [path], "problem": "<video>What colour?", "solution": "red"}
    job = VideoSampling(min_pixels=side * side, max_pixels=side * side)
    ours, facts = build_prompt_batch([sample], processor, "{Question}", video=job)

    clip = read_clip(path, job.for_family("clip" if family == "qwen3_vl" else "frame", processor.video_processor.size),
                     factor=processor.image_processor.patch_size * processor.image_processor.merge_size)
    assert len(clip.frames) == 2 and (clip.frames[0] == clip.frames[1]).all() and clip.indices == [0, 0]
    alone = {"total_num_frames": 1, "fps": clip.source_fps, "frames_indices": [0]}
    theirs = processor(text=facts.texts, videos=[clip.frames[:1]], padding=True, return_tensors="pd",
                       videos_kwargs={"do_resize": False, "do_sample_frames": False, "video_metadata": [alone]})
    assert ours.input_ids.tolist() == theirs["input_ids"].tolist()
    assert ours.video_grid_thw.tolist() == theirs["video_grid_thw"].tolist()
    assert ours.video_grid_thw.tolist()[0][0] == 1  # one frame pair
    assert np.array_equal(ours.pixel_values_videos.numpy(), theirs["pixel_values_videos"].numpy())


def test_a_verl_parquet_file_whose_parts_differ_in_keys(tmp_path):
    """Parquet gives every entry of a column every key any entry has (null where it had none): a null key is not
    given, so each clip keeps its own keys."""
    import datasets

    clip = write_clip(tmp_path / "a.mp4", count=16, fps=4)
    rows = [{"prompt": [{"role": "user", "content": "<video>How long?"}], "videos": [videos],
             "reward_model": {"ground_truth": "4"}} for videos in ({"video": clip, "fps": 1.0}, {"video": clip,
                                                                                              "nframes": 4})]
    datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "train.parquet"))
    samples, report = load_samples(str(tmp_path / "train.parquet"))
    assert report.skipped == 0 and [s["video_sampling"] for s in samples] == [[{"fps": 1.0}], [{"nframes": 4}]]


def test_the_report_draws_a_list_of_frames_as_a_strip(tmp_path):
    """paddle-r1 view: a clip given as 12 frame files is drawn as 8 of them, spread evenly, over its 6 s (at the
    default 2 frames per second)."""
    from paddle_r1.view.clips import frame_strip

    strip = frame_strip(frame_files(tmp_path / "frames", 12), str(tmp_path / "report"))
    levels = [int(round(np.asarray(Image.open(tmp_path / "report" / name))[..., 0].mean() / 20))
              for name in strip.frames]
    assert levels == [0, 2, 3, 5, 6, 8, 9, 11] and strip.duration == pytest.approx(6.0)
