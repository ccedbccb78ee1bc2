"""``paddle-r1 estimate-memory`` with clips: the tokens it counts for a clip equal those the processor gives the
same clip, written here by PyAV, for a family that budgets frames (Qwen2.5-VL) and one that budgets clips (Qwen3-VL);
the clip's tokens and frames enter the table."""
import pytest

from test_video import write_clip

KEYS = dict(video_min_pixels=32 * 32, video_max_pixels=96 * 96, video_total_pixels=20 * 64 * 64)


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
@pytest.mark.parametrize("seconds, fps, size", [(3.0, 10, (160, 128)), (2.5, 4, (64, 96))])
def test_the_estimates_video_tokens_are_the_processors(family, seconds, fps, size, tmp_path):
    from paddle_r1.config.jobs import GRPOConfig
    from paddle_r1.data.video import VideoSampling
    from paddle_r1.generation.generator import build_prompt_batch
    from paddle_r1.memory import ModelShape, VideoClip, read_model_config, video_load
    from paddle_r1.models.loading import load_processor
    from paddle_r1.testing.tiny import make_tiny_model

    folder = make_tiny_model(str(tmp_path / family), family=family)
    config = GRPOConfig(model_name_or_path=folder, **KEYS)
    model_config = read_model_config(folder)
    load = video_load(config, ModelShape.from_config(model_config), VideoClip(seconds, *size, fps=fps), folder)

    clip = write_clip(tmp_path / "clip.mp4", count=round(seconds * fps), fps=fps, size=size)
    processor = load_processor(folder)
    sample = {"images": [], "videos": [clip], "problem": "<video>When?"}
    batch, _ = build_prompt_batch([sample], processor, "{Question}", video=VideoSampling.from_config(config))
    tokens = int((batch.input_ids == model_config["video_token_id"]).sum())
    print(f"{family} {seconds} s at {fps} fps, {size}: {tokens} video tokens, {int(batch.video_grid_thw[0, 0])} "
          "frame pairs")
    assert (load.tokens, load.pairs) == (tokens, int(batch.video_grid_thw[0, 0]))
    assert load.patches == batch.pixel_values_videos.shape[0]


def test_clips_enter_the_table(tmp_path):
    """A minute at 640 x 360 on the tiny Qwen3-VL: 120 frames within its clip budget (8 x 64 x 64 pixels), 60 frame
    pairs of one token each, and their times: the sequences grow by 60 + 60 x 9 tokens."""
    import contextlib
    import io
    import re

    from paddle_r1.cli import main
    from paddle_r1.testing.tiny import make_tiny_model

    folder = make_tiny_model(str(tmp_path / "qwen3_vl"), family="qwen3_vl")
    tables = {}
    for name, extra in (("images", []), ("video", ["--video_seconds", "60", "--video_size", "640x360"])):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            main(["estimate-memory", "--gpus", "1", "--model_name_or_path", folder, *extra])
        tables[name] = out.getvalue()
    assert "1 x 60 video tokens, 60 frame pairs" in tables["video"] and "video tokens" not in tables["images"]
    length = {name: int(re.search(r"sequences x (\d+) tokens", table).group(1)) for name, table in tables.items()}
    assert length["video"] - length["images"] == 60 + 60 * 9
    with pytest.raises(SystemExit):
        main(["estimate-memory", "--model_name_or_path", folder, "--video_seconds", "6", "--video_size", "big"])


def test_frames_tool_results_count_as_clips(tmp_path):
    """With the frames tool and clips, each tool result counts as a clip as large as the prompt's (the tool's default
    count) when that is larger than an image at max_pixels: 2 tool results of the tiny Qwen3-VL's 60-token minute
    (and its 60 times as text) instead of 2 images of 16 tokens; crop's results stay images."""
    import re

    from paddle_r1.config.jobs import GRPOConfig
    from paddle_r1.memory import VideoClip, estimate
    from paddle_r1.testing.tiny import make_tiny_model

    folder = make_tiny_model(str(tmp_path / "qwen3_vl"), family="qwen3_vl")
    clip = VideoClip(60, 640, 360)

    def table(tools) -> str:
        config = GRPOConfig(model_name_or_path=folder, reward_funcs=["format"], tools=tools, max_turns=3,
                            max_pixels=128 * 128)
        return estimate(config, 1, 80, video=clip).table()

    length = {tool: int(re.search(r"sequences x (\d+) tokens", table([tool])).group(1)) for tool in ("crop", "frames")}
    assert length["frames"] - length["crop"] == 2 * (60 + 60 * 9 - 16)
    assert "2 tool clips" in table(["frames"]) and "2 tool images" in table(["crop"])
