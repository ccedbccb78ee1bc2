"""Tool episodes over clips: the ``frames`` tool (a span of one of the sample's clips re-read at a higher rate), its
errors as text for the model, and multi-turn rollouts whose prompts and tool results hold clips on the tiny
Qwen2.5-VL (absolute time) and Qwen3-VL (times written as text): the carried cache and the log-prob pass equal one
forward over each whole episode."""
import math

import numpy as np
import pytest

from paddle_r1.data.clip_spans import SpanReader
from paddle_r1.data.video import VideoSampling, read_clip
from paddle_r1.tools.builtins import ToolContext, frames
from paddle_r1.tools.calls import ToolCall, parse_tool_calls
from paddle_r1.tools.toolbox import Toolbox
from test_tool_rollouts import CALL, assert_episodes_equal_one_pass, episodes_and_turn_two, run_episodes
from test_video import SMALL, red_levels, write_clip

VIDEO = VideoSampling(**SMALL)  # every frame 56 x 56 (Qwen3-VL: its own clip budget)


def _context(path, sampling=VIDEO, factor=28):
    clip = read_clip(path, sampling, factor)
    return ToolContext([], [], [], "abs_resized", [path], [clip], SpanReader(sampling, factor))


@pytest.fixture
def clip_path(tmp_path):
    return write_clip(tmp_path / "a.mp4", count=12, fps=4)  # 3 s; frame i at i / 4 s, red level 20 i


def test_frames_rereads_a_span_at_a_higher_rate(clip_path):
    """The prompt's clip: 6 of the 12 frames at 2 fps (0, 2, 4, 7, 9, 11). The span 1 to 2 s holds frames 4..8:
    as many frames as the prompt's clip (6), no more than the span's 5, in pairs: 4 (4, 5, 7, 8), the clip's real
    indices and rate (Qwen3-VL writes their times), their spacing as their fps (Qwen2.5-VL's seconds per pair)."""
    context = _context(clip_path)
    assert red_levels(context.clips[0]) == [0, 2, 4, 7, 9, 11]
    text, (sub,) = frames({"start": 1.0, "end": 2.0}, context)
    assert text == "the frames from 1.00 to 2.00 s"
    assert red_levels(sub) == [4, 5, 7, 8] and sub.indices == [4, 5, 7, 8] and sub.frames.shape == (4, 56, 56, 3)
    assert sub.metadata()["fps"] == 4.0 and sub.fps == pytest.approx(3.2) and sub.second_per_grid == 0.625
    _, (two,) = frames({"start": 0.9, "end": 2.1, "count": 3}, context)  # 3 rounds down to a pair
    assert red_levels(two) == [4, 8]
    _, (clipped,) = frames({"start": -5, "end": 0.6}, context)  # reaching before the clip: clipped to it
    assert red_levels(clipped) == [0, 2]
    assert frames({"start": 1, "end": 2}, context)[1][0] is sub  # another completion's same call: read once


@pytest.mark.parametrize("arguments, message", [
    ({"start": 2.0, "end": 1.0}, "'end' (1 s) must come after 'start' (2 s)"),
    ({"start": 1.0, "end": 1.0}, "must come after"),
    ({"start": 3.5, "end": 9}, "the span 3.5 to 9 s is outside the clip, which lasts 3.00 s"),
    ({"start": -2, "end": 0}, "outside the clip"),
    ({"start": math.nan, "end": 2}, "'start' must be a number of seconds, got nan"),
    ({"start": 0, "end": math.inf}, "'end' must be a number of seconds, got inf"),
    ({"start": "1", "end": 2}, "'start' must be a number of seconds, got '1'"),
    ({"end": 2}, "'start' must be a number of seconds, got None"),
    ({"start": True, "end": 2}, "'start' must be a number"),
    ({"start": 1.0, "end": 1.2}, "holds 1 frame(s) of the clip (4 frames per second); a span needs 2, at least 0.50"),
    ({"start": 0, "end": 2, "video": 1}, "'video' must be an index from 0 to 0, got 1"),
    ({"start": 0, "end": 2, "video": math.nan}, "'video' must be an index from 0 to 0, got nan"),
    ({"start": 0, "end": 2, "count": 1}, "'count' must be a whole number of frames, at least 2, got 1"),
    ({"start": 0, "end": 2, "count": 2.5}, "'count' must be a whole number"),
])
def test_a_bad_span_is_an_error_for_the_model(clip_path, arguments, message):
    result = Toolbox(["frames"]).run(ToolCall("frames", arguments), _context(clip_path))
    assert result.text.startswith("Error: frames failed: ") and message in result.text, result.text
    assert result.videos == [] and result.images == []


def test_frames_needs_a_clip_and_reads_folders_and_animations(tmp_path):
    from PIL import Image

    from test_video import frame

    no_clip = Toolbox(["frames"]).run(ToolCall("frames", {"start": 0, "end": 1}),
                                      ToolContext([], [], [], "abs_resized"))
    assert no_clip.text == "Error: frames failed: the sample has no video"
    pictures = [Image.fromarray(frame(i)) for i in range(8)]
    gif = str(tmp_path / "a.gif")
    pictures[0].save(gif, save_all=True, append_images=pictures[1:], duration=250, loop=0)  # 4 fps
    folder = tmp_path / "frames"
    folder.mkdir()
    for i, picture in enumerate(pictures):
        picture.save(folder / f"{i:03d}.png")
    for path, sampling in ((gif, VIDEO), (str(folder), VideoSampling(frames_fps=4, **SMALL))):
        _, (sub,) = frames({"start": 0.5, "end": 1.5, "count": 4}, _context(path, sampling))
        assert red_levels(sub) == [2, 3, 5, 6], path  # frames 2..6: round(linspace(2, 6, 4))


def test_frames_calls_as_the_model_writes_them(clip_path):
    """A call parsed from model text runs; JSON has no NaN, so a NaN the model writes is refused before the tool."""
    toolbox, context = Toolbox(["frames"]), _context(clip_path)
    (call,) = parse_tool_calls(CALL.format("frames", '{"video": 0, "start": 0.5, "end": 2.5, "count": 4}'))
    result = toolbox.run(call, context)
    assert result.error is None and result.text == "the frames from 0.50 to 2.50 s"
    assert result.videos[0].indices == [2, 5, 7, 10]  # round(linspace(2, 10, 4))
    (nan,) = parse_tool_calls(CALL.format("frames", '{"start": NaN, "end": 2}'))
    assert "not JSON" in toolbox.run(nan, context).text


def _clip_samples(tmp_path):
    """Two prompts: a 3 s clip; an image and a 2 s clip (another length: the prompts' padding differs)."""
    image = tmp_path / "still.png"
    from PIL import Image

    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 80, 3), dtype=np.uint8)).save(image)
    return [{"images": [], "videos": [write_clip(tmp_path / "a.mp4", count=12, fps=4)], "problem": "<video>When?"},
            {"images": [str(image)], "videos": [write_clip(tmp_path / "b.mp4", count=8, fps=4)],
             "problem": "<image><video>What?"}]


CLIP_TURNS = [CALL.format("frames", '{"start": 0.5, "end": 2.0}'), "no call here",
              CALL.format("crop", '{"bbox_2d": [0, 0, 40, 30]}') + CALL.format("frames", '{"start": 0, "end": 1}'),
              CALL.format("frames", '{"start": 2, "end": 1}')]


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
def test_clip_episodes_equal_one_pass_over_the_episode(family_models, tmp_path, monkeypatch, family):
    """Turn 2 sampled on top of the cache turn 1 left, after tool messages holding clips (and an image), and the
    log-prob pass over the episode rows (the prompt's clip and the tools'), equal the model's own forward over each
    row's whole sequence with all its images and clips: the sub-clips' time positions (Qwen2.5-VL) and their times
    written as text (Qwen3-VL) are the same in the segment as in the whole row."""
    tiny = family_models(family)
    model, processor = tiny
    result, prompt, turn_two = episodes_and_turn_two(monkeypatch, lambda: run_episodes(
        tiny, _clip_samples(tmp_path), first_turns=CLIP_TURNS, tools=("crop", "frames"), video=VIDEO,
        max_new_tokens=128))
    rollout = result.rollout
    assert rollout.episode_videos_per_row == [2, 1, 2, 1] and rollout.episode_images_per_row == [0, 0, 2, 1]
    assert result.turns[3][1]["text"].startswith("Error: frames failed: 'end' (1 s) must come after")
    sub = result.turns[0][1]["videos"][0]
    # frames 2..8 of the clip (4 fps), as many as the prompt's clip has: round(linspace(2, 8, 6))
    assert sub["seconds"] == [0.5, 0.75, 1.0, 1.5, 1.75, 2.0] and sub["frames"].shape[0] == 6
    text = processor.tokenizer.decode(rollout.completion_ids[0].tolist())
    if family == "qwen3_vl":  # each pair stamped with its real time in the clip (its frames' mean), not from 0
        assert [part.split(">")[0] for part in text.split("<")[1:] if "seconds" in part] == [
            "0.6 seconds", "1.2 seconds", "1.9 seconds"]
    assert_episodes_equal_one_pass(model, prompt, rollout, turn_two, [0, 2, 3])


# ---- SFT on scripted episodes whose tool turns hold clips -------------------------------------------------------

SPAN = {"start": 0.5, "end": 2.0}


def _scripted(tmp_path, answer="<answer>1.00 to 2.00</answer>"):
    """A grounding row whose scripted episode looks closer at 0.5 to 2 s through ``frames``, then answers."""
    return {"images": [], "videos": [write_clip(tmp_path / "a.mp4", count=12, fps=4)],
            "problem": "<video>When does it turn red?",
            "solution": [1.0, 2.0], "duration": 3.0,
            "episode": [{"role": "assistant", "text": CALL.format("frames", '{"start": 0.5, "end": 2.0}')},
                        {"role": "tool", "name": "frames", "arguments": SPAN, "text": "the frames from 0.50 to 2.00 s",
                         "videos": [SPAN]},
                        {"role": "assistant", "text": answer}]}


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
def test_sft_and_the_rollout_give_a_scripted_clip_episode_the_same_tokens_and_logprobs(family_models, tmp_path,
                                                                                       family):
    """The rollout continuing from the scripted first turn (the frames call) runs the tool itself: its text is the
    scripted one, its episode's tokens up to the answer (prompt, call, the tool message with its clip's tokens and,
    for Qwen3-VL, its times) and its clips (patches, grid, seconds per pair) are the SFT conversation's, and the
    call's log-probs are the same in both: what SFT teaches is what GRPO shows the model."""
    import paddle

    from paddle_r1.algorithms.logprobs import completion_logprobs, conversation_logprobs
    from paddle_r1.config.jobs import SFTConfig
    from paddle_r1.trainer.sft import build_episode_batch

    model, processor = family_models(family)
    sample = _scripted(tmp_path)
    result, prompt = run_episodes((model, processor), [sample], first_turns=[sample["episode"][0]["text"]] * 2,
                                  tools=("frames",), video=VIDEO)
    assert [t["text"] for t in result.turns[0][:2]] == [t["text"] for t in sample["episode"][:2]]
    rollout = result.rollout
    own = rollout.completion_mask.numpy()[0]
    answer_starts = int(np.flatnonzero((own == 1) & (np.cumsum(own == 0) > 0))[0])
    episode = prompt.input_ids.numpy()[0].tolist() + rollout.completion_ids.numpy()[0, :answer_starts].tolist()
    config = SFTConfig(model_name_or_path="unused", question_template="{Question}")
    batch = build_episode_batch([sample], processor, config, "abs_resized", video=VIDEO)
    assert batch.input_ids.numpy()[0, :len(episode)].tolist() == episode
    row_media = rollout.episode_media.media_rows([0], *rollout.episode_media_counts)
    for name in ("pixel_values_videos", "video_grid_thw", "second_per_grid_ts"):
        np.testing.assert_array_equal(getattr(batch, name).numpy(), row_media[name].numpy(), err_msg=name)
    assert batch.video_grid_thw.shape[0] == 2  # the prompt's clip and the tool's
    with paddle.no_grad():
        taught = conversation_logprobs(model, batch, 4096).numpy()[0]
        sampled = completion_logprobs(model, rollout, 4096).numpy()[0]
    prompt_len = prompt.input_ids.shape[1]
    call = np.flatnonzero(own[:answer_starts] == 1)  # the call's tokens and its end of turn
    np.testing.assert_allclose(taught[prompt_len - 1 + call], sampled[call], atol=2e-4)
    # the answer, after the tool's clip: as the model's own forward over the whole conversation gives it
    media = {name: getattr(batch, name) for name in ("pixel_values_videos", "video_grid_thw", "second_per_grid_ts")}
    if family != "qwen2_5_vl":
        del media["second_per_grid_ts"]
    if hasattr(model.model, "rope_deltas"):
        model.model.rope_deltas = None
    with paddle.no_grad():
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, **media).logits[0]
    reference = paddle.nn.functional.log_softmax(logits[:-1], axis=-1).numpy()
    answer = np.flatnonzero(batch.loss_mask.numpy()[0] == 1)
    answer = answer[answer >= len(episode) - 1]
    assert answer.size > 5
    np.testing.assert_allclose(taught[answer], reference[answer, batch.input_ids.numpy()[0, answer + 1]], atol=2e-4)


def test_sft_on_clip_episodes_trains_on_what_the_tool_clip_shows(tiny_model_dir, tmp_path):
    """An SFT run on scripted clip episodes read from a file: the tool clip's frames reach the loss (its patches
    zeroed, the loss changes), and a few steps lower it."""
    import json

    import paddle

    from paddle_r1.config.jobs import SFTConfig
    from paddle_r1.trainer.sft import SFTTrainer, build_episode_batch, sft_loss

    (tmp_path / "rows.jsonl").write_text(json.dumps(_scripted(tmp_path)) + "\n")
    config = SFTConfig(model_name_or_path=tiny_model_dir, output_dir=str(tmp_path / "out"),
                       data_path=str(tmp_path / "rows.jsonl"), question_template="{Question}",
                       per_device_train_batch_size=1, max_steps=5, learning_rate=1e-2, save_steps=100,
                       use_visualdl=False, disable_tqdm=True, seed=0, video_min_pixels=56 * 56,
                       video_max_pixels=56 * 56)
    trainer = SFTTrainer(config)
    batch = build_episode_batch(trainer.samples, trainer.processor, config, trainer.coord_system,
                                video=trainer.generator.video)

    def loss() -> float:
        with paddle.no_grad():
            return float(sft_loss(trainer.forward(batch, 64, 1.0), batch.loss_mask))

    before = loss()
    frames_seen = batch.pixel_values_videos
    prompt_patches = int(batch.video_grid_thw[0].prod())
    batch.pixel_values_videos = paddle.concat([frames_seen[:prompt_patches],
                                               paddle.zeros_like(frames_seen[prompt_patches:])])
    assert abs(loss() - before) > 1e-4
    batch.pixel_values_videos = frames_seen
    trainer.train()
    assert loss() < before


@pytest.mark.parametrize("spans, message", [
    ([{"start": 0, "end": 1, "video": 1}], "episode[1]: videos[0]: 'video' must be the index of one of the sample's 1"),
    ([{"start": "0", "end": 1}], "episode[1]: videos[0]: 'start' must be a number of seconds, got '0'"),
    ([{"start": 0, "end": 1, "count": 2.5}], "'count' must be a whole number of frames, got 2.5"),
    (["clip.mp4"], "episode[1]: videos[0]: expected a span"),
    ({"start": 0}, "episode[1]: 'videos' must be a list of spans"),
])
def test_a_scripted_episodes_bad_clip_span_is_refused_when_the_data_loads(tmp_path, spans, message):
    import json

    from paddle_r1.data.loader import load_samples
    from paddle_r1.data.samples import DataError

    row = _scripted(tmp_path)
    row["episode"][1]["videos"] = spans
    (tmp_path / "rows.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(DataError, match="rows.jsonl") as info:
        load_samples(str(tmp_path / "rows.jsonl"), strict=True)
    assert message in str(info.value)


def test_a_scripted_span_the_tool_refuses_names_it(tiny, tmp_path):
    from paddle_r1.config.jobs import SFTConfig
    from paddle_r1.trainer.sft import build_episode_batch

    sample = _scripted(tmp_path)
    sample["episode"][1]["videos"] = [{"start": 5, "end": 6}]
    with pytest.raises(ValueError, match=r"tool clip \{'start': 5, 'end': 6\} of .*a.mp4: the span 5 to 6 s is "
                                         r"outside the clip, which lasts 3.00 s"):
        build_episode_batch([sample], tiny[1], SFTConfig(model_name_or_path="unused"), "abs_resized", video=VIDEO)


# ---- GRPO runs on clips with the frames tool (an SFT warm start on a scripted first turn) -----------------------

FRAMES_TURN = CALL.format("frames", '{"start": 0.5, "end": 2.0}')


@pytest.fixture(scope="module")
def frames_calling_model(tiny_model_dir, tmp_path_factory):
    """The tiny Qwen2.5-VL after SFT on clips whose target calls frames, then answers: most of its episodes call the
    tool."""
    from test_video import charades_samples

    from paddle_r1.config.jobs import SFTConfig
    from paddle_r1.trainer.sft import SFTTrainer

    folder = tmp_path_factory.mktemp("frames_sft")
    config = SFTConfig(model_name_or_path=tiny_model_dir, output_dir=str(folder / "out"), max_steps=80,
                       learning_rate=1e-2, per_device_train_batch_size=2, seed=1, question_template="{Question}",
                       answer_template=FRAMES_TURN + "{Answer}", use_visualdl=False, disable_tqdm=True,
                       video_min_pixels=56 * 56, video_max_pixels=56 * 56)
    samples = charades_samples(folder, count=2)
    return SFTTrainer(config, samples=samples).train()["checkpoint"], samples


def _grpo(model_dir, out, samples, **kw):
    from paddle_r1.config.jobs import GRPOConfig
    from paddle_r1.trainer.grpo import GRPOTrainer

    config = dict(model_name_or_path=model_dir, output_dir=str(out), question_template="{Question}",
                  reward_funcs=["reward_helpers:short_reward", "tool_format"], tools=["frames"], max_turns=2,
                  num_generations=2, per_device_train_batch_size=4, max_completion_length=100, temperature=0.3,
                  learning_rate=1e-3, max_steps=2, save_steps=100, use_visualdl=False, disable_tqdm=True, seed=7,
                  beta=0.0, video_min_pixels=56 * 56, video_max_pixels=56 * 56)
    trainer = GRPOTrainer(GRPOConfig(**{**config, **kw}), samples=samples)
    history = trainer.train()["history"]
    return history, {k: v.numpy().copy() for k, v in trainer.policy.state_dict().items()}


def test_a_grpo_run_on_clips_calls_frames_logs_its_clips_and_resumes_exactly(frames_calling_model, tmp_path):
    """A GRPO run whose episodes call frames: the calls run, the weights move, completions.jsonl names each tool
    clip's strip of frames and their times; stopped mid-way through num_iterations (its buffer holding episodes with
    clips) and resumed, it ends where the uninterrupted run does."""
    import json
    import os
    import shutil

    from PIL import Image

    from paddle_r1.cli import main
    from paddle_r1.models.loading import load_model

    model_dir, samples = frames_calling_model
    extra = dict(max_steps=2, num_iterations=2)
    history, weights = _grpo(model_dir, tmp_path / "straight", samples, **extra)
    assert history[0]["tools/calls"] > 0 and history[0]["tools/errors"] == 0 and history[0]["turns"] > 1
    before = load_model(model_dir).state_dict()
    assert any(not np.array_equal(value.numpy(), weights[k]) for k, value in before.items())
    rows = [json.loads(line) for line in open(tmp_path / "straight" / "completions.jsonl")]
    clips = [clip for row in rows for turn in row["turns"] for clip in turn.get("videos", [])]
    assert clips and all(clip["seconds"] == [0.5, 0.75, 1.0, 1.5, 1.75, 2.0] for clip in clips)
    assert Image.open(tmp_path / "straight" / clips[0]["strip"]).size == (6 * 56, 56)
    assert main(["view", str(tmp_path / "straight")]) == 0  # the report shows each tool clip's strip with its turn
    html = open(tmp_path / "straight" / "report" / "index.html").read()
    tool_turns = html.split('<div class="turn tool">')[1:]
    assert tool_turns and all('<img class="tool-image"' in turn.split("</div>")[0] for turn in tool_turns)

    split = tmp_path / "split"
    _grpo(model_dir, split, samples, save_steps=1, **extra)  # step 1: mid-way through the generation's iterations
    shutil.rmtree(split / "checkpoint-2")
    assert os.path.isdir(split / "checkpoint-1")
    rest, resumed = _grpo(model_dir, split, samples, resume_from_checkpoint="latest", **extra)
    assert len(rest) == 1
    np.testing.assert_allclose(rest[0]["loss"], history[1]["loss"], rtol=1e-6, atol=1e-7)
    for key, value in weights.items():
        np.testing.assert_allclose(resumed[key], value, rtol=1e-6, atol=1e-7, err_msg=key)
