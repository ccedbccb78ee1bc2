"""Video data: clips written here by PyAV (MPEG-4 in MP4, VP9 in WebM), folders of frames and GIF/WebP animations
drawn with Pillow, read back through paddle_r1's reader; the formats users bring; bad clips skipped and counted; a
mixed image + video batch through the rollout and log-probs of a tiny Qwen2.5-VL; families without video refused."""
import json
import os
from fractions import Fraction

import av
import numpy as np
import pytest
from PIL import Image

from paddle_r1.data.loader import load_samples
from paddle_r1.data.samples import DataError
from paddle_r1.data.video import VideoSampling, read_clip
from paddle_r1.errors import ConfigError
from paddle_r1.generation.generator import build_messages

SMALL = dict(min_pixels=56 * 56, max_pixels=56 * 56)  # every frame 56 x 56


def frame(i: int, size=(56, 56)) -> np.ndarray:
    """Frame ``i``: its red level 20 * i, so a frame read back tells which it was."""
    picture = np.zeros((size[1], size[0], 3), np.uint8)
    picture[..., 0] = 20 * i
    return picture


def write_clip(path, count=8, fps=4, size=(56, 56), codec="mpeg4", index_first=False, picture=frame, gop=None,
               b_frames=0, pts_ms=None):
    """A clip of ``count`` frames (``picture``: frame i's pixels, ``frame`` by default); ``index_first``: the MP4
    index before the frames (faststart), so that a file cut short still opens and states its full length; ``gop``: a
    key frame at least every ``gop`` frames; ``b_frames``: up to that many B-frames in a row (frames stored out of
    display order); ``pts_ms``: frame i's time stamp in milliseconds (a first one other than 0, a variable rate)."""
    with av.open(str(path), "w", options={"movflags": "faststart"} if index_first else {}) as container:
        stream = container.add_stream(codec, rate=fps)
        stream.width, stream.height, stream.pix_fmt = size[0], size[1], "yuv420p"
        if gop:
            stream.codec_context.gop_size = gop
        if b_frames:
            stream.codec_context.max_b_frames = b_frames
        if pts_ms is not None:
            stream.codec_context.time_base = Fraction(1, 1000)
        for i in range(count):
            image = av.VideoFrame.from_ndarray(picture(i, size), format="rgb24")
            if pts_ms is not None:
                image.pts, image.time_base = pts_ms[i], Fraction(1, 1000)
            container.mux(stream.encode(image))
        container.mux(stream.encode())
    return str(path)


def red_levels(clip) -> list[int]:
    """Which frames a clip holds (``frame``'s red level / 20)."""
    return [int(round(f[..., 0].mean() / 20)) for f in clip.frames]


def test_frames_are_sampled_as_qwen_vl_utils_does(tmp_path):
    """8 frames at 4 fps = 2 s: at 2 fps 4 frames, spread evenly (round(linspace(0, 7, 4)) = 0, 2, 5, 7), sampled
    at 2 fps: 1 second per frame pair."""
    clip = read_clip(write_clip(tmp_path / "a.mp4"), VideoSampling(**SMALL))
    assert clip.frames.shape == (4, 56, 56, 3) and clip.size == (56, 56)
    assert red_levels(clip) == [0, 2, 5, 7]
    assert clip.fps == pytest.approx(2.0) and clip.second_per_grid == pytest.approx(1.0)
    assert clip.duration == pytest.approx(2.0)


@pytest.mark.parametrize("total, clip_fps, sampling, want", [
    (8, 4, VideoSampling(), 4),  # 2 s at 2 fps
    (100, 25, VideoSampling(), 8),  # 4 s at 2 fps
    (10, 25, VideoSampling(), 4),  # 0.4 s: the minimum, 4
    (3, 25, VideoSampling(), 2),  # fewer frames than the minimum: all of them, rounded down to 2
    (10_000, 25, VideoSampling(), 768),  # 400 s: the maximum
    (100, 25, VideoSampling(fps=1, min_frames=5), 6),  # min 5 rounds up to 6
    (100, 25, VideoSampling(max_frames=7), 6),  # max 7 rounds down to 6
])
def test_frame_count(total, clip_fps, sampling, want):
    assert sampling.frame_count(total, clip_fps) == want


def test_the_pixel_budget_shrinks_the_frames_of_a_long_clip():
    """qwen-vl-utils: each frame at most min(max_pixels, total_pixels / n * 2) pixels, never below 1.05 min_pixels."""
    sampling = VideoSampling(min_pixels=28 * 28, max_pixels=224 * 224, total_pixels=224 * 224 * 4)
    assert sampling.frame_size(448, 448, 4, 28) == (224, 224)  # 2 pairs: the per-frame cap
    w, h = sampling.frame_size(448, 448, 64, 28)
    assert w * h <= 224 * 224 * 4 / 64 * 2 and w % 28 == h % 28 == 0


def test_a_webm_clip_a_folder_of_frames_and_animations(tmp_path):
    webm = read_clip(write_clip(tmp_path / "a.webm", codec="libvpx-vp9"), VideoSampling(**SMALL))
    assert red_levels(webm) == [0, 2, 5, 7]
    folder = tmp_path / "frames"
    folder.mkdir()
    for i in range(6):
        Image.fromarray(frame(i)).save(folder / f"{i:03d}.png")
    clip = read_clip(str(folder), VideoSampling(frames_fps=3, **SMALL))  # 2 s at 3 fps -> 4 frames at 2 fps
    assert red_levels(clip) == [0, 2, 3, 5] and clip.fps == pytest.approx(2.0)
    for suffix in ("gif", "webp"):
        pictures = [Image.fromarray(frame(i)) for i in range(8)]
        path = str(tmp_path / f"a.{suffix}")
        pictures[0].save(path, save_all=True, append_images=pictures[1:], duration=250, loop=0)  # 4 fps
        clip = read_clip(path, VideoSampling(**SMALL))
        assert red_levels(clip) == [0, 2, 5, 7] and clip.fps == pytest.approx(2.0), suffix


def bad_clips(tmp_path) -> dict:
    good = open(write_clip(tmp_path / "good.mp4", count=40), "rb").read()
    indexed = open(write_clip(tmp_path / "indexed.mp4", count=40, index_first=True), "rb").read()
    files = {"empty.mp4": b"", "truncated.mp4": good[:len(good) // 3], "noise.mp4": os.urandom(4000),
             "cut_short.mp4": indexed[:len(indexed) // 2],
             "text.webm": b"not a video at all\n" * 50}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    unreadable = tmp_path / "unreadable.mp4"
    unreadable.write_bytes(good)
    unreadable.chmod(0)
    Image.new("RGB", (56, 56)).save(tmp_path / "still.png")
    return {**{name: str(tmp_path / name) for name in files}, "unreadable.mp4": str(unreadable),
            "missing.mp4": str(tmp_path / "missing.mp4")}


def test_a_bad_clip_is_a_message_naming_it(tmp_path, capfd):
    for name, path in bad_clips(tmp_path).items():
        if name == "unreadable.mp4" and os.geteuid() == 0:
            continue  # root reads a mode-0 file
        with pytest.raises(DataError) as info:
            read_clip(path, VideoSampling(**SMALL))
        assert path in str(info.value), name
    assert "Traceback" not in capfd.readouterr().err


def test_bad_clips_are_skipped_and_counted(tmp_path):
    clips = bad_clips(tmp_path)
    good = write_clip(tmp_path / "ok.mp4")
    rows = [{"videos": [path], "problem": "<video>What?", "answer": "a"} for path in [good, *clips.values()]]
    (tmp_path / "data.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    samples, report = load_samples(str(tmp_path / "data.jsonl"))
    assert [s["videos"] for s in samples] == [[good]] + ([[clips["unreadable.mp4"]]] if os.geteuid() == 0 else [])
    skipped = {reason.split(": ")[0] for _, reason in report.problems}
    assert report.skipped == len(rows) - len(samples) and all("video" in reason for reason in skipped)
    assert all(any(path in reason for _, reason in report.problems)
               for name, path in clips.items() if name != "unreadable.mp4" or os.geteuid() != 0)


def test_easyr1_and_charades_rows(tmp_path):
    clip = write_clip(tmp_path / "v.mp4")
    Image.new("RGB", (56, 56)).save(tmp_path / "p.png")
    rows = [{"problem": "<video>Which color?", "answer": "<answer>red</answer>", "videos": ["v.mp4"]},
            {"problem": "<image>Which color?", "answer": "black", "images": ["p.png"]},
            {"video": "v.mp4", "duration": 2.0, "timestamp": [0.5, 1.5], "sentence": "the screen turns red"},
            {"video": "v.mp4", "duration": 2.0, "timestamp": [1.5, 0.5], "sentence": "reversed"}]
    (tmp_path / "data.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    samples, report = load_samples(str(tmp_path / "data.jsonl"))
    assert samples[0]["videos"] == [clip] and samples[0]["solution"] == "red" and "videos" not in samples[1]
    grounding = samples[2]
    assert grounding["solution"] == [0.5, 1.5] and grounding["duration"] == 2.0
    assert grounding["reward_method"] == "temporal_iou" and "the screen turns red" in grounding["problem"]
    assert len(samples) == 3 and "timestamp" in report.problems[0][1]


def test_markers_place_images_and_videos():
    sample = {"images": ["a.png"], "videos": ["v.mp4"], "problem": "First <video> then <image> now."}
    content = build_messages(sample, "{Question}")[0]["content"]
    assert [part["type"] for part in content] == ["text", "video", "text", "image", "text"]
    no_markers = {"images": ["a.png"], "videos": ["v.mp4", "w.mp4"], "problem": "Compare <video> them."}
    content = build_messages(no_markers, "{Question}")[0]["content"]  # 1 marker for 2 videos: media first
    assert content == [{"type": "image"}, {"type": "video"}, {"type": "video"},
                       {"type": "text", "text": "Compare <video> them."}]


def test_video_config_keys_are_checked():
    from paddle_r1.config.jobs import GRPOConfig

    with pytest.raises(ConfigError, match="video_min_frames"):
        GRPOConfig(model_name_or_path="m", video_min_frames=10, video_max_frames=8)
    with pytest.raises(ConfigError, match="video_fps"):
        GRPOConfig(model_name_or_path="m", video_fps=0)


def test_families_without_video_are_refused():
    from paddle_r1.models.families import check_video

    with pytest.raises(ConfigError, match="images only"):
        check_video("paddleocr_vl")
    for family in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl"):
        check_video(family)


def test_a_mixed_batch_through_rollout_and_logprobs(tmp_path):
    """An image sample and a video sample in one batch, G = 2: the clip is read once per prompt, its time positions
    step by its own seconds per frame pair, and the log-probs re-embed both prompts."""
    import paddle

    from paddle_r1.algorithms.logprobs import completion_logprobs
    from paddle_r1.generation.generator import Generator
    from paddle_r1.generation.rollout import SamplingParams
    from paddle_r1.models.loading import load_model, load_processor
    from paddle_r1.testing.tiny import make_tiny_model

    folder = make_tiny_model(str(tmp_path / "tiny"), family="qwen2_5_vl")
    model, processor = load_model(folder), load_processor(folder)
    Image.new("RGB", (56, 56), (200, 0, 0)).save(tmp_path / "r.png")
    samples = [{"images": [str(tmp_path / "r.png")], "problem": "What?", "solution": "x"},
               {"images": [], "videos": [write_clip(tmp_path / "a.mp4", count=24, fps=3)], "problem": "<video>When?",
                "solution": [0, 1]}]
    generator = Generator(model, processor, "abs_resized", VideoSampling(fps=0.5, **SMALL))
    out = generator.generate(samples, 2, SamplingParams(max_new_tokens=5), "{Question}")
    prompt = out.rollout.prompt
    # 8 s at 0.5 fps: the minimum, 4 frames, so 0.5 frames per second and 4 s per frame pair
    assert prompt.video_grid_thw.tolist() == [[2, 4, 4]] and prompt.image_grid_thw.tolist() == [[1, 4, 4]]
    assert prompt.pixel_values_videos.shape[0] == 2 * 4 * 4  # the clip's patches once, not once per completion
    np.testing.assert_allclose(prompt.second_per_grid_ts.numpy(), [4.0])
    positions, next_position = prompt.positions(model)
    video = prompt.input_ids[1] == model.config.video_token_id
    times = sorted(set(positions[0, 1][video].tolist()))
    step = int(4.0 * model.config.vision_config.tokens_per_second)
    assert len(times) == 2 and times[1] - times[0] == step
    assert int(next_position[1]) == int(positions[:, 1].max()) + 1
    logp = completion_logprobs(model, out.rollout, chunk_size=64)
    assert logp.shape == out.rollout.completion_ids.shape and bool(paddle.isfinite(logp).all())


def charades_samples(tmp_path, count=2) -> list[dict]:
    clip = write_clip(tmp_path / "v.mp4", count=12, fps=4)
    rows = [{"video": clip, "duration": 3.0, "timestamp": [0.5 + i, 2.0 + i / 2], "sentence": f"event {i}"}
            for i in range(count)]
    (tmp_path / "charades.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    return load_samples(str(tmp_path / "charades.jsonl"))[0]


def test_grpo_steps_on_charades_rows(tiny_model_dir, tmp_path):
    """Two GRPO steps of the tiny Qwen2.5-VL on clips: the rollout, temporal_iou and the loss's log-probs all take
    them, and the weights move."""
    from paddle_r1.config.jobs import GRPOConfig
    from paddle_r1.trainer.grpo import GRPOTrainer

    config = GRPOConfig(model_name_or_path=tiny_model_dir, output_dir=str(tmp_path / "out"), num_generations=2,
                        reward_funcs=["temporal_iou", "reward_helpers:short_reward"], per_device_train_batch_size=4,
                        max_completion_length=6, learning_rate=5e-3, max_steps=2, save_steps=100,
                        use_visualdl=False, disable_tqdm=True, seed=3, video_min_pixels=56 * 56,
                        video_max_pixels=56 * 56)
    trainer = GRPOTrainer(config, samples=charades_samples(tmp_path))
    before = {k: v.numpy().copy() for k, v in trainer.policy.state_dict().items()}
    trainer.train()
    metrics = [json.loads(line) for line in open(tmp_path / "out" / "metrics.jsonl")]
    assert [m["step"] for m in metrics] == [1, 2] and "rewards/temporal_iou/mean" in metrics[0]
    assert any(not np.array_equal(before[k], v.numpy()) for k, v in trainer.policy.state_dict().items())


def test_a_clip_that_breaks_in_the_middle_is_skipped_at_its_step(tiny_model_dir, tmp_path, caplog):
    """A clip of frame files whose later frames are cut short passes the load's checks (each frame's header reads)
    and fails when the step reads it: that sample is skipped with a warning naming its row and the frame, and counted,
    as a bad image is, and the run goes on (it used to stop with the error)."""
    from paddle_r1.config.jobs import GRPOConfig
    from paddle_r1.trainer.grpo import GRPOTrainer

    frames = []
    for i in range(4):
        Image.new("RGB", (56, 56), (60 * i, 0, 0)).save(tmp_path / f"f{i}.png")
        data = (tmp_path / f"f{i}.png").read_bytes()
        if i:
            (tmp_path / f"f{i}.png").write_bytes(data[:len(data) // 2])
        frames.append(str(tmp_path / f"f{i}.png"))
    rows = [{"videos": [clip], "problem": "<video>What is red?", "answer": "a"}
            for clip in (write_clip(tmp_path / "good.mp4", count=8), frames)]
    (tmp_path / "data.jsonl").write_text("\n".join(json.dumps(row) for row in rows))
    samples, report = load_samples(str(tmp_path / "data.jsonl"))
    assert len(samples) == 2 and not report.problems
    config = GRPOConfig(model_name_or_path=tiny_model_dir, output_dir=str(tmp_path / "out"), num_generations=2,
                        reward_funcs=["reward_helpers:short_reward"], per_device_train_batch_size=4,
                        max_completion_length=4, max_steps=2, save_steps=100, use_visualdl=False, disable_tqdm=True,
                        video_min_pixels=56 * 56, video_max_pixels=56 * 56)
    with caplog.at_level("WARNING"):
        GRPOTrainer(config, samples=samples).train()
    metrics = [json.loads(line) for line in open(tmp_path / "out" / "metrics.jsonl")]
    assert [(m["step"], m["data/skipped_samples"]) for m in metrics] == [(1, 1), (2, 1)], metrics
    assert f"skipping sample {tmp_path / 'data.jsonl'}:2: cannot read image {frames[1]}: image file is truncated" \
        in caplog.text, caplog.text


def test_sft_on_clips_teaches_the_span_the_reward_reads(tiny_model_dir, tmp_path):
    """SFT's target for a grounding sample is its span as "start to end" seconds, which temporal_iou scores 1; a
    few steps on one clip lower the loss on it (the clip's frames reach the forward: with them replaced by zeros the
    loss differs)."""

    from paddle_r1.config.jobs import SFTConfig
    from paddle_r1.rewards.families.temporal import temporal_iou_reward
    from paddle_r1.trainer.sft import SFTTrainer, build_sft_batch

    samples = charades_samples(tmp_path, count=1)
    config = SFTConfig(model_name_or_path=tiny_model_dir, output_dir=str(tmp_path / "out"),
                       per_device_train_batch_size=1, max_steps=6, learning_rate=1e-2, save_steps=100,
                       use_visualdl=False, disable_tqdm=True, seed=0, video_min_pixels=56 * 56,
                       video_max_pixels=56 * 56)
    trainer = SFTTrainer(config, samples=samples)
    batch, texts = build_sft_batch(samples, trainer.processor, config, trainer.coord_system,
                                   video=trainer.generator.video)
    assert "0.50 to 2.00" in texts[0]
    assert temporal_iou_reward(texts, [samples[0]["solution"]], [samples[0]["duration"]]) == [1.0]

    assert_frames_reach_the_loss_and_training_lowers_it(trainer, batch)


def assert_frames_reach_the_loss_and_training_lowers_it(trainer, batch) -> None:
    """The SFT loss on ``batch`` changes when its clips' frames are replaced by zeros, and falls after
    ``trainer.train()`` (shared with tests/test_qwen3_video.py)."""
    import paddle

    from paddle_r1.trainer.sft import sft_loss

    def loss() -> float:
        with paddle.no_grad():
            return float(sft_loss(trainer.forward(batch, 64, 1.0), batch.completion_mask))

    before = loss()
    frames = batch.prompt.pixel_values_videos
    batch.prompt.pixel_values_videos = paddle.zeros_like(frames)
    assert abs(loss() - before) > 1e-4
    batch.prompt.pixel_values_videos = frames
    trainer.train()
    assert loss() < before


def test_dynamic_sampling_keeps_the_clips_of_the_groups_it_keeps(tiny_model_dir, tmp_path):
    """Half the clips' groups tie (a constant reward): dynamic sampling drops them and draws again; the kept groups'
    prompts carry their own clips (patches, grid, seconds per pair), so their log-probs equal those of the same
    completions on a prompt batch built anew from the kept samples."""
    import dataclasses

    import paddle

    from paddle_r1.algorithms.logprobs import completion_logprobs
    from paddle_r1.config.jobs import GRPOConfig
    from paddle_r1.generation.generator import build_prompt_batch
    from paddle_r1.trainer.grpo import GRPOTrainer

    clips = [write_clip(tmp_path / f"v{i}.mp4", count=8 + 4 * i, fps=4) for i in range(2)]
    rows = [{"video": clips[i % 2], "duration": 2.0 + i % 2, "timestamp": [0.25, 1.5], "sentence": f"event {i}",
             "tied": (i // 2) % 2 == 1} for i in range(8)]
    (tmp_path / "rows.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    config = GRPOConfig(model_name_or_path=tiny_model_dir, output_dir=str(tmp_path / "out"), num_generations=2,
                        data_path=str(tmp_path / "rows.jsonl"),
                        reward_funcs=["reward_helpers:short_reward_unless_tied"],
                        per_device_train_batch_size=4, max_completion_length=6, max_steps=1, save_steps=100,
                        use_visualdl=False, disable_tqdm=True, seed=2, beta=0.0, temperature=1.5,
                        dynamic_sampling=True, max_num_gen_batches=4, video_min_pixels=56 * 56,
                        video_max_pixels=56 * 56)
    trainer = GRPOTrainer(config)
    metrics = trainer.train()["history"][-1]
    assert metrics["num_gen_batches"] >= 2
    kept = [sample for exp in trainer.buffer for sample in exp.samples]
    # seed 2 keeps groups of both clips (8 and 12 frames: other grids), so a clip taken from the wrong prompt shows
    assert not any(sample["tied"] for sample in kept) and len({sample["videos"][0] for sample in kept}) == 2
    for exp in trainer.buffer:
        prompt = exp.rollout.prompt
        assert prompt.video_grid_thw.shape[0] == len(exp.samples) == prompt.second_per_grid_ts.shape[0]
        fresh, _ = build_prompt_batch(exp.samples, trainer.processor, config.question_template,
                                      video=trainer.generator.video)
        with paddle.no_grad():
            joined = completion_logprobs(trainer.policy, exp.rollout, 64, 1.5)
            anew = completion_logprobs(trainer.policy, dataclasses.replace(exp.rollout, prompt=fresh), 64, 1.5)
        np.testing.assert_allclose(joined.numpy(), anew.numpy(), rtol=1e-5, atol=1e-5)
