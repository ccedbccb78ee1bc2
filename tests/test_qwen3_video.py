"""Qwen3-VL on video: its video processor's frame count and clip budget (``VideoSampling.clip_pixels``), each frame
pair's time written as text, GRPO steps with LoRA on clips through the rollout (its own layers' cached decode) and
the loss's log-probs, and SFT steps on a clip. Its logits against transformers': tests/test_video_parity.py."""
import json

import numpy as np
import pytest

from paddle_r1.data.video import VideoSampling, read_clip
from test_video import assert_frames_reach_the_loss_and_training_lowers_it, red_levels, write_clip

CLIP = (4096, 8 * 64 * 64)  # the tiny Qwen3-VL's video budget (paddle_r1.testing.tiny)


@pytest.fixture(scope="module")
def qwen3_dir(tmp_path_factory):
    from paddle_r1.testing.tiny import make_tiny_model

    return make_tiny_model(str(tmp_path_factory.mktemp("tiny") / "qwen3_vl"), family="qwen3_vl")


@pytest.mark.parametrize("total, clip_fps, sampling, want", [
    (10, 4, VideoSampling(), 5),  # 2.5 s at 2 fps: 5, not rounded to pairs
    (100, 25, VideoSampling(), 8),
    (10, 25, VideoSampling(), 4),  # the minimum
    (3, 25, VideoSampling(), 3),  # fewer frames than the minimum: all of them
    (10_000, 25, VideoSampling(max_frames=7), 7),  # the maximum, as it is
    (100, 25, VideoSampling(fps=1, min_frames=5), 5),
])
def test_qwen3_frame_count_as_its_video_processor(total, clip_fps, sampling, want):
    """transformers' ``Qwen3VLVideoProcessor.sample_frames``: int(total / fps x 2) within [min, max] and the total."""
    from dataclasses import replace

    assert replace(sampling, clip_pixels=CLIP).frame_count(total, clip_fps) == want


def test_an_odd_count_repeats_the_last_frame(tmp_path):
    """10 frames at 4 fps: frames 0, 2, 4, 7, 9 kept (qwen-vl-utils' rule keeps 4: 0, 3, 6, 9) and the last repeated,
    so the clip fills three frame pairs; its metadata states the indices and the clip's fps."""
    path = write_clip(tmp_path / "a.mp4", count=10, fps=4, size=(64, 64))
    clip = read_clip(path, VideoSampling(clip_pixels=CLIP), factor=32)
    assert red_levels(clip) == [0, 2, 4, 7, 9, 9] and clip.frames.shape == (6, 64, 64, 3)
    assert clip.metadata() == {"total_num_frames": 10, "fps": 4.0, "frames_indices": [0, 2, 4, 7, 9, 9]}
    per_frame = read_clip(path, VideoSampling(min_pixels=64 * 64, max_pixels=64 * 64), factor=32)
    assert red_levels(per_frame) == [0, 3, 6, 9]


def test_the_clip_budget_bounds_all_frames_together():
    """Qwen3-VL's video smart_resize: t x h x w (t rounded up to 2) within the budget, sides multiples of 32; a
    smaller ``video_total_pixels`` caps the model's budget."""
    sampling = VideoSampling(clip_pixels=CLIP)
    assert sampling.frame_size(96, 64, 4, 32) == (96, 64)  # 4 x 64 x 96 = 24,576: within 32,768
    w, h = sampling.frame_size(160, 128, 4, 32)  # 81,920: shrunk by sqrt(81,920 / 32,768)
    assert (w, h) == (96, 64) and 4 * w * h <= CLIP[1]
    assert sampling.frame_size(32, 32, 2, 32) == (64, 64)  # 2 x 32 x 32 = 2,048: grown to the minimum, 4,096

    size = {"shortest_edge": 4096, "longest_edge": 1 << 30}
    assert VideoSampling().for_family("frame", size).clip_pixels is None
    assert VideoSampling().for_family("clip", size).clip_pixels == (4096, VideoSampling().total_pixels)
    capped = VideoSampling(total_pixels=4 * 32 * 64).for_family("clip", size)
    assert capped.frame_size(160, 128, 4, 32) == (32, 32)  # shrunk by sqrt(10)


def test_each_frame_pair_is_stamped_with_its_time(qwen3_dir, tmp_path):
    """The tiny Qwen3-VL's prompt for a 5 s clip at 2 fps: 10 of its 20 frames (0, 2, 4, 6, 8, 11, 13, 15, 17, 19,
    at 4 fps), five pairs, each after its time as text (the mean of its frames' times: 0.25, 1.25, 2.375, 3.5, 4.5
    s, printed with one decimal as Python rounds them), each its own vision block whose positions continue the
    text's. 10 frames of 64 x 64 are above the tiny budget (32,768 pixels): each is shrunk to 32 x 32, one token
    per pair."""
    from paddle_r1.generation.generator import build_prompt_batch
    from paddle_r1.models.loading import load_model, load_processor

    model, processor = load_model(qwen3_dir), load_processor(qwen3_dir)
    sample = {"images": [], "videos": [write_clip(tmp_path / "a.mp4", count=20, fps=4, size=(64, 64))],
              "problem": "<video>When?"}
    batch, _ = build_prompt_batch([sample], processor, "{Question}")
    text = processor.tokenizer.decode(batch.input_ids[0].tolist())
    assert [part.split(">")[0] for part in text.split("<")[1:] if "seconds" in part] == [
        "0.2 seconds", "1.2 seconds", "2.4 seconds", "3.5 seconds", "4.5 seconds"]
    assert batch.video_grid_thw.tolist() == [[5, 2, 2]]
    positions, next_position = batch.positions(model)
    video = (batch.input_ids[0] == model.config.video_token_id).numpy()
    times = positions[0, 0].numpy()[video]  # each pair's time position
    assert len(times) == 5 and all(b - a > 5 for a, b in zip(times, times[1:]))  # "<t seconds>" between pairs
    assert int(next_position[0]) == int(positions[:, 0].max()) + 1


def test_grpo_steps_with_lora_on_clips(qwen3_dir, tmp_path):
    """Two GRPO steps of the tiny Qwen3-VL with LoRA on clips: only the adapters move, and the rollout, the rewards
    and the loss's log-probs all took the clips."""
    from paddle_r1.config.jobs import GRPOConfig
    from paddle_r1.data.loader import load_samples
    from paddle_r1.trainer.grpo import GRPOTrainer

    clip = write_clip(tmp_path / "v.mp4", count=12, fps=4, size=(64, 64))
    rows = [{"video": clip, "duration": 3.0, "timestamp": [0.5 + i, 2.0], "sentence": f"event {i}"} for i in range(2)]
    (tmp_path / "charades.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    samples = load_samples(str(tmp_path / "charades.jsonl"))[0]
    config = GRPOConfig(model_name_or_path=qwen3_dir, output_dir=str(tmp_path / "out"), num_generations=2,
                        reward_funcs=["temporal_iou", "reward_helpers:short_reward"], per_device_train_batch_size=4,
                        max_completion_length=5, learning_rate=5e-2, max_steps=2, save_steps=100, lora=True,
                        use_visualdl=False, disable_tqdm=True, seed=3)
    trainer = GRPOTrainer(config, samples=samples)
    before = {k: v.numpy().copy() for k, v in trainer.policy.state_dict().items()}
    trainer.train()
    metrics = [json.loads(line) for line in open(tmp_path / "out" / "metrics.jsonl")]
    assert [m["step"] for m in metrics] == [1, 2] and "rewards/temporal_iou/mean" in metrics[0]
    moved = {k for k, v in trainer.policy.state_dict().items() if not np.array_equal(before[k], v.numpy())}
    assert moved and all("lora" in k for k in moved)


def test_sft_steps_on_clips(qwen3_dir, tmp_path):
    """paddle-r1 sft on a Qwen3-VL clip: the clip's frames reach the forward (zeros instead change the loss) and a
    few steps lower the loss on it."""

    from paddle_r1.config.jobs import SFTConfig
    from paddle_r1.trainer.sft import SFTTrainer, build_sft_batch
    from test_video import charades_samples

    samples = charades_samples(tmp_path, count=1)
    config = SFTConfig(model_name_or_path=qwen3_dir, output_dir=str(tmp_path / "out"), per_device_train_batch_size=1,
                       max_steps=6, learning_rate=1e-2, save_steps=100, use_visualdl=False, disable_tqdm=True, seed=0)
    trainer = SFTTrainer(config, samples=samples)
    batch, _ = build_sft_batch(samples, trainer.processor, config, trainer.coord_system, video=trainer.generator.video)
    assert "seconds>" in trainer.processor.tokenizer.decode(batch.prompt.input_ids[0].tolist())

    assert_frames_reach_the_loss_and_training_lowers_it(trainer, batch)
