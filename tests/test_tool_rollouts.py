"""Multi-turn tool rollouts (config keys ``tools``, ``max_turns``): tool calls read and run, errors as text for the
model, crop's box conversion, the episode's log-probs and the carried cache against one pass over the whole episode,
tool tokens out of the loss, and a GRPO run that calls tools, trains and resumes exactly."""
import json
import os
import shutil

import numpy as np
import paddle
import pytest
from PIL import Image

from paddle_r1.config.jobs import GRPOConfig, SFTConfig
from paddle_r1.errors import ConfigError
from paddle_r1.generation import episodes as episodes_module
from paddle_r1.data.video import VideoSampling
from paddle_r1.generation.generator import build_prompt_batch, eos_token_ids, load_sample_images, tool_contexts
from paddle_r1.generation.rollout import SamplingParams
from paddle_r1.models.coords import COORD_SYSTEMS, box_from_original
from paddle_r1.models.families import family_of
from paddle_r1.rewards.lookup import get_reward
from paddle_r1.rewards.registry import BadSolution
from paddle_r1.tools.builtins import ToolContext, crop
from paddle_r1.tools.calls import ToolCall, parse_tool_calls
from paddle_r1.tools.toolbox import Toolbox
from paddle_r1.trainer.grpo import GRPOTrainer
from paddle_r1.algorithms.logprobs import completion_logprobs
from paddle_r1.algorithms.loss import LossSettings, grpo_loss

CALL = '<tool_call>{{"name": "{}", "arguments": {}}}</tool_call>'


def _contexts(tiny, samples, coord_system="abs_resized", video=VideoSampling()):
    _, processor = tiny
    images = [load_sample_images(s) for s in samples]
    prompt, facts = build_prompt_batch(samples, processor, "{Question}", images=images, video=video)
    return prompt, tool_contexts(samples, images, facts, processor, coord_system, video)


def test_tool_calls_are_read_in_qwen_format_and_unreadable_ones_carry_their_error():
    text = ('look <tool_call>{"name": "crop", "arguments": {"bbox_2d": [1, 2, 3, 4]}}</tool_call> then '
            '<tool_call>{"name": "zoom"}</tool_call> <tool_call>{bad}</tool_call> <tool_call>[1]</tool_call> '
            '<tool_call>{"name": "crop", "arguments": 3}</tool_call> <tool_call>{"name": "zoom"')
    calls = parse_tool_calls(text)
    assert [(c.name, c.arguments) for c in calls[:2]] == [("crop", {"bbox_2d": [1, 2, 3, 4]}), ("zoom", {})]
    assert [c.error is None for c in calls] == [True, True, False, False, False, False]
    assert "not JSON" in calls[2].error and "JSON object" in calls[3].error and "arguments" in calls[4].error
    assert "never closed" in calls[5].error
    assert parse_tool_calls("the answer is [1, 2, 3, 4]") == []


def raising_tool(arguments, context):
    raise RuntimeError("the tool's own bug")


def test_bad_calls_become_error_text_for_the_model(tiny, rec_samples):
    _, contexts = _contexts(tiny, rec_samples[:1])
    context = contexts[0]
    width, height = context.image_sizes[0]
    toolbox = Toolbox(["crop", "zoom", "test_tool_rollouts:raising_tool"])
    cases = {
        "not JSON": parse_tool_calls("<tool_call>{oops</tool_call>")[0],
        "unknown tool 'rotate'": ToolCall("rotate", {}),
        "'bbox_2d' must be": ToolCall("crop", {"bbox_2d": [5, 5, 1, 1]}),
        "covers no pixel": ToolCall("crop", {"bbox_2d": [width * 3, 0, width * 4, 10]}),
        "covers no pixel of": ToolCall("crop", {"bbox_2d": [10, 10, 10, 30]}),  # empty
        "'image' must be": ToolCall("crop", {"bbox_2d": [0, 0, 10, 10], "image": 1}),
        "'factor' must be": ToolCall("zoom", {"bbox_2d": [0, 0, 10, 10], "factor": 9}),
        "the tool's own bug": ToolCall("raising_tool", {}),
    }
    for expected, call in cases.items():
        result = toolbox.run(call, context)
        assert result.error is not None and expected in result.text and result.text.startswith("Error: "), result
        assert result.images == []
    fine = toolbox.run(ToolCall("zoom", {"bbox_2d": [0, 0, 20, 10], "factor": 2}), context)
    assert fine.error is None and len(fine.images) == 1
    with pytest.raises(KeyError, match="unknown tool 'rotate'"):
        Toolbox(["rotate"])


@pytest.mark.parametrize("coord_system", COORD_SYSTEMS)
def test_crop_takes_its_box_in_the_models_coordinates_as_the_rewards_convert_them(coord_system):
    image = Image.fromarray(np.random.default_rng(0).integers(0, 255, (95, 130, 3), dtype=np.uint8))
    size, input_size = (130, 95), (140, 84)  # as smart_resize would make it: abs_resized's conversion is no identity
    context = ToolContext([image], [size], [input_size], coord_system)
    pixels = [7, 11, 43, 37]  # original pixels
    model_box = box_from_original(pixels, coord_system, size, input_size)
    _, (cropped,) = crop({"bbox_2d": model_box}, context)
    np.testing.assert_array_equal(np.asarray(cropped), np.asarray(image.crop(pixels)))
    if coord_system != "abs_original":  # the box taken as pixels as it is would be another region
        as_pixels = ToolContext(context.images, context.image_sizes, context.input_sizes, "abs_original")
        unconverted = Toolbox(["crop"]).run(ToolCall("crop", {"bbox_2d": model_box}), as_pixels)
        assert unconverted.error is not None or unconverted.images[0].size != cropped.size


def test_tool_format_reward():
    reward = get_reward("tool_format")
    calls = [[{"name": "crop", "arguments": {}, "error": None}],
             [{"name": "crop", "arguments": {}, "error": None}, {"name": None, "arguments": {}, "error": "not JSON"}],
             []]
    assert reward(["a", "b", "c"], tool_calls=calls) == [1.0, 0.0, None]
    assert reward(["a"]) == [None]  # a single-turn run has no calls


def test_crop_covers_target_reward():
    """The zoom task's shaping reward: 1 for a crop run that covers the target and is at most 16x its area, in the
    rollout's coordinates (the 448 x 448 canvas seen at 112 x 112; rel_1000; a second image of another size)."""
    reward = get_reward("crop_covers_target")
    target = [130, 20, 160, 50]  # inside the 112-pixel cell [112, 0, 224, 112]

    def crop_run(box, error=None, **more):
        return {"name": "crop", "arguments": {"bbox_2d": box, **more}, "error": error}

    episodes = [[crop_run([28, 0, 56, 28])],  # the cell: covers, 13.9x the target's area
                [crop_run([0, 0, 28, 28]), crop_run([28, 0, 56, 28])],  # the second call covers
                [crop_run([56, 0, 84, 28])],  # the next cell
                [crop_run([0, 0, 112, 112])],  # the whole canvas covers it, 223x its area
                [crop_run([28, 0, 56, 28], error="Error: ...")],  # not run
                [{"name": "crop", "arguments": {"bbox_2d": "anywhere", "image": "x"}, "error": None}],
                [crop_run([50, 0, 100, 50], image=1)],  # image 1 (200 x 200 at 100 x 100): [100, 0, 200, 100]
                []]
    n = len(episodes)
    columns = dict(tool_calls=episodes, target_box=[target] * n, image_sizes=[[(448, 448), (200, 200)]] * n,
                   input_sizes=[[(112, 112), (100, 100)]] * n, coord_system=["abs_resized"] * n)
    assert reward(["text"] * n, **columns) == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    assert reward(["text"], tool_calls=[[crop_run([28, 0, 56, 28])]], target_box=[target],
                  image_sizes=[[(448, 448)]], input_sizes=[[(112, 112)]], coord_system=["abs_resized"],
                  max_area_ratio=8) == [0.0]  # the cell is 13.9x the target's area
    relative = dict(image_sizes=[[(448, 448)]], input_sizes=[[(112, 112)]], coord_system=["rel_1000"])
    assert reward(["text"], tool_calls=[[crop_run([250, 0, 500, 250])]], target_box=[target], **relative) == [1.0]
    assert reward(["text"], tool_calls=[[crop_run([250, 0, 500, 250])]], target_box=[None], **relative) == [None]
    assert reward(["text"]) == [None]  # a single-turn run
    with pytest.raises(BadSolution, match=r"target_box \[160, 20, 130, 50\] is not a box"):
        reward(["text"], tool_calls=[[]], target_box=[[160, 20, 130, 50]], **relative)


def test_tools_need_max_turns_and_known_names(tiny_model_dir, tmp_path):
    base = dict(model_name_or_path=tiny_model_dir, output_dir=str(tmp_path), reward_funcs=["iou"])
    with pytest.raises(ConfigError, match="'tools' and 'max_turns'"):
        GRPOConfig(**base, tools=["crop"])
    with pytest.raises(ConfigError, match="'tools' and 'max_turns'"):
        GRPOConfig(**base, max_turns=3)
    with pytest.raises(ConfigError, match="config key 'tools': unknown tool 'rotate'"):
        GRPOTrainer(GRPOConfig(**base, tools=["rotate"], max_turns=2), samples=[])


FIRST_TURNS = [CALL.format("crop", '{"bbox_2d": [0, 0, 50, 40]}'), "no call here",
               CALL.format("zoom", '{"bbox_2d": [10, 10, 30, 30], "factor": 3}'), "<tool_call>{bad</tool_call>"]


def run_episodes(tiny, samples, engine="auto", max_turns=2, first_turns=FIRST_TURNS, tools=("crop", "zoom"),
              video=VideoSampling(), max_new_tokens=96, repetition_penalty=1.0):
    model, processor = tiny
    prompt, contexts = _contexts(tiny, samples[:2], video=video)
    return episodes_module.sample_episodes(
        model, processor, prompt, contexts, 2,
        SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, engine=engine,
                       repetition_penalty=repetition_penalty),
        eos_token_ids(processor.tokenizer), processor.tokenizer.pad_token_id, Toolbox(list(tools)), max_turns,
        first_turns=first_turns), prompt


def test_episodes_keep_every_turn_and_go_on_after_a_bad_call(tiny, rec_samples):
    result, _ = run_episodes(tiny, rec_samples, max_turns=3)
    roles = [[t["role"] for t in turns] for turns in result.turns]
    assert roles[1] == ["assistant"]  # answered at once: out of the batch
    assert all(r[:3] == ["assistant", "tool", "assistant"] for i, r in enumerate(roles) if i != 1)
    crop_turn, zoom_turn, bad_turn = result.turns[0][1], result.turns[2][1], result.turns[3][1]
    assert crop_turn["name"] == "crop" and len(crop_turn["images"]) == 1 and zoom_turn["name"] == "zoom"
    assert bad_turn["text"].startswith("Error: the tool call is not JSON") and bad_turn["images"] == []
    assert result.tool_calls[3][0]["error"] is not None and result.tool_calls[0][0]["error"] is None
    assert result.texts == [turns[-1]["text"] for turns in result.turns]
    rollout = result.rollout
    own, whole = rollout.completion_mask.numpy(), rollout.episode_mask.numpy()
    assert (own <= whole).all() and (own < whole).any(axis=1).tolist() == [True, False, True, True]
    assert rollout.episode_images_per_row == [2, 1, 2, 1]  # the prompt's image, and crop's / zoom's


@paddle.no_grad()
def _one_pass_logits(model, prompt, rollout, row):
    """The model's own forward (positions from its rope index) over the row's whole token sequence: its prompt
    (padding dropped), every episode token, with all its images and clips."""
    prompt_ids = prompt.input_ids[row // rollout.num_generations]
    prompt_ids = prompt_ids[prompt.attention_mask[row // rollout.num_generations] == 1]
    length = int(rollout.episode_mask[row].sum())
    ids = paddle.concat([prompt_ids, rollout.completion_ids[row, :length]]).unsqueeze(0)
    media = rollout.episode_media.media_rows([row], *rollout.episode_media_counts)
    if family_of(model).video_time != "seconds":
        del media["second_per_grid_ts"]
    if hasattr(model.model, "rope_deltas"):
        model.model.rope_deltas = None
    logits = model(input_ids=ids, attention_mask=paddle.ones_like(ids),
                   **{name: value for name, value in media.items() if value is not None}).logits[0]
    return logits, prompt_ids.shape[0]


def episodes_and_turn_two(monkeypatch, run):
    """``run()``'s (episodes, prompt) and the logits turn 2 sampled from: the tool segment's prefill, then each
    decode step's."""
    turn_two = []
    prefill_segment, make_decoder = episodes_module.prefill_segment, episodes_module.make_decoder

    def recorded_prefill(*args):
        out = prefill_segment(*args)
        turn_two.append(out[0])
        return out

    def recorded_decoder(*args):
        decoder, step = make_decoder(*args), None

        def recorded_step(token):
            logits = step(token)
            if turn_two:  # turn 1's steps (through the given turns) come before the segment
                turn_two.append(logits)
            return logits

        step, decoder.step = decoder.step, recorded_step
        return decoder

    monkeypatch.setattr(episodes_module, "prefill_segment", recorded_prefill)
    monkeypatch.setattr(episodes_module, "make_decoder", recorded_decoder)
    result, prompt = run()
    monkeypatch.undo()
    assert len(turn_two) >= 4
    return result, prompt, turn_two


def assert_episodes_equal_one_pass(model, prompt, rollout, turn_two, rows):
    """The log-prob pass over the episode rows, and the logits turn 2 sampled from (``episodes_and_turn_two``; the
    rows that called a tool: ``rows``), equal the model's own forward over each row's whole sequence."""
    with paddle.no_grad():
        logp = completion_logprobs(model, rollout, 4096).numpy()
    own = rollout.completion_mask.numpy()
    for j, row in enumerate(rows):
        logits, prompt_len = _one_pass_logits(model, prompt, rollout, row)
        reference = paddle.nn.functional.log_softmax(logits[prompt_len - 1:-1], axis=-1).numpy()
        tokens = rollout.completion_ids[row, :reference.shape[0]].numpy()
        picked = reference[np.arange(tokens.shape[0]), tokens]
        mine = own[row, :tokens.shape[0]] == 1
        np.testing.assert_allclose(logp[row, :tokens.shape[0]][mine], picked[mine], atol=2e-4)
        second_turn = np.flatnonzero(np.diff(own[row, :tokens.shape[0]]) == 1)[0] + 1  # first token of turn 2
        turn_length = int(own[row, second_turn:].sum())
        assert turn_length > 0
        for k in range(turn_length):
            np.testing.assert_allclose(turn_two[k][j].numpy(),
                                       logits[prompt_len - 1 + second_turn + k].numpy(), atol=2e-4)


@pytest.mark.parametrize("family, engine", [("qwen2_5_vl", "layers"), ("qwen2_5_vl", "one_token"),
                                            ("qwen2_vl", "auto"), ("qwen3_vl", "auto"), ("paddleocr_vl", "auto")])
def test_episode_logprobs_and_the_carried_cache_equal_one_pass_over_the_episode(family_models, rec_samples,
                                                                               monkeypatch, family, engine):
    """Turn 2 is sampled on top of the cache turn 1 left (the tool message prefilled on it, left-padded rows, each
    row's positions its own): the logits it samples from, and the log-prob pass over the episode rows, equal the
    model's own forward over each row's whole sequence with all its images. (PaddleOCR-VL's template has no tool
    role: its tool results come as user turns.)"""
    tiny = family_models(family)
    result, prompt, turn_two = episodes_and_turn_two(monkeypatch, lambda: run_episodes(tiny, rec_samples, engine))
    assert_episodes_equal_one_pass(tiny[0], prompt, result.rollout, turn_two, [0, 2, 3])


def test_dynamic_sampling_picks_and_joins_whole_episodes(tiny, rec_samples):
    """Groups picked out of a multi-turn rollout and joined in another order (dynamic sampling) keep each episode's
    tokens, masks and images: the same log-probs row for row."""
    from paddle_r1.algorithms.dynamic_sampling import concat_rollouts, select_groups

    model, processor = tiny
    rollout = run_episodes(tiny, rec_samples)[0].rollout
    joined = concat_rollouts([select_groups(rollout, [1], [1, 1]), select_groups(rollout, [0], [1, 1])],
                             processor.tokenizer.pad_token_id)
    assert joined.episode_images_per_row == [2, 1, 2, 1] and joined.completion_ids.shape == rollout.completion_ids.shape
    with paddle.no_grad():
        logp, joined_logp = completion_logprobs(model, rollout, 4096).numpy(), completion_logprobs(model, joined, 4096)
    order = [2, 3, 0, 1]
    own = rollout.completion_mask.numpy()[order] == 1
    np.testing.assert_array_equal(joined.completion_mask.numpy(), rollout.completion_mask.numpy()[order])
    np.testing.assert_allclose(joined_logp.numpy()[own], logp[order][own], atol=1e-5)


def test_tool_tokens_get_no_gradient_from_the_loss(tiny, tiny_model_dir, rec_samples):
    """The loss's mask is the rollout's completion_mask: the model's own tokens. The gradient of the loss with
    respect to the episode's log-probs is exactly 0 at the tools' tokens and not at the model's; with every episode
    token in the mask instead (the mask dropped), the tools' tokens would get gradient."""
    model, _ = tiny
    result, _ = run_episodes(tiny, rec_samples)
    rollout = result.rollout
    settings = LossSettings.of(GRPOConfig(model_name_or_path=tiny_model_dir, reward_funcs=["iou"], beta=0.0))
    advantages = paddle.to_tensor([1.0, -1.0, 0.5, -0.5])
    tools = ((rollout.episode_mask - rollout.completion_mask) == 1).numpy()
    assert tools.sum() > 50

    def gradient_at(mask):
        logp = completion_logprobs(model, rollout, 4096)
        loss, _ = grpo_loss(logp, logp.detach() - 0.05, None, advantages, mask, settings)
        return paddle.grad(loss, logp)[0].numpy()

    gradient = gradient_at(rollout.completion_mask)
    assert (gradient[tools] == 0).all()
    assert (gradient[rollout.completion_mask.numpy() == 1] != 0).mean() > 0.9
    assert (gradient_at(rollout.episode_mask)[tools] != 0).all()


# ---- GRPO runs: a model that calls crop (an SFT warm start on scripted first turns) ----------------------------

FIRST_TURN = CALL.format("crop", '{"bbox_2d": [0, 0, 60, 60]}')


@pytest.fixture(scope="module")
def tool_calling_model(tiny_model_dir, rec_samples, tmp_path_factory):
    """The tiny model after SFT on first turns that call crop (then answer): at a low temperature most of its
    episodes call the tool, some with calls it garbles."""
    from paddle_r1.trainer.sft import SFTTrainer

    config = SFTConfig(model_name_or_path=tiny_model_dir, output_dir=str(tmp_path_factory.mktemp("sft")),
                       max_steps=60, learning_rate=1e-2, per_device_train_batch_size=4, seed=1,
                       question_template="{Question}", answer_template=FIRST_TURN + "{Answer}", use_visualdl=False,
                       disable_tqdm=True)
    return SFTTrainer(config, samples=rec_samples).train()["checkpoint"]


def _grpo_trainer(model_dir, out, samples, **kw) -> GRPOTrainer:
    config = dict(model_name_or_path=model_dir, output_dir=str(out), question_template="{Question}",
                  reward_funcs=["reward_helpers:short_reward", "tool_format"], tools=["crop"], max_turns=3,
                  num_generations=3, per_device_train_batch_size=6, max_completion_length=100, temperature=0.3,
                  learning_rate=1e-3, max_steps=2, save_steps=100, use_visualdl=False, disable_tqdm=True, seed=7,
                  beta=0.0)
    return GRPOTrainer(GRPOConfig(**{**config, **kw}), samples=samples)


def _grpo(model_dir, out, samples, **kw):
    trainer = _grpo_trainer(model_dir, out, samples, **kw)
    history = trainer.train()["history"]
    return history, {k: v.numpy().copy() for k, v in trainer.policy.state_dict().items()}


def test_a_multi_turn_grpo_run_calls_tools_trains_and_logs_every_turn(tool_calling_model, rec_samples, tmp_path):
    before = {k: v.numpy().copy() for k, v in GRPOTrainer(GRPOConfig(
        model_name_or_path=tool_calling_model, reward_funcs=["iou"], output_dir=str(tmp_path / "unused")),
        samples=rec_samples).policy.state_dict().items()}
    history, after = _grpo(tool_calling_model, tmp_path, rec_samples)
    assert sum(m["tools/calls"] for m in history) > 0 and all(m["turns"] > 1 for m in history)
    assert all("tools/errors" in m and "rewards/tool_format/mean" in m for m in history)
    assert any(not np.array_equal(before[k], after[k]) for k in before)

    rows = [json.loads(line) for line in open(tmp_path / "completions.jsonl")]
    episodes = [row for row in rows if len(row["turns"]) > 1]
    assert episodes
    for row in episodes:
        turns = row["turns"]
        assert row["completion"] == turns[-1]["text"] and turns[-1]["role"] == "assistant"
        assert [t["role"] for t in turns[:2]] == ["assistant", "tool"] and turns[1]["name"] == "crop"
        for turn in turns:
            for path in turn.get("images", []):
                assert path.startswith("tool_images/step-") and os.path.isfile(tmp_path / path)
    assert any(turn.get("images") for row in episodes for turn in row["turns"])


def test_a_multi_turn_run_resumed_mid_way_through_num_iterations_equals_the_uninterrupted_run(
        tool_calling_model, rec_samples, tmp_path):
    extra = dict(max_steps=4, num_iterations=2)
    straight_history, straight_weights = _grpo(tool_calling_model, tmp_path / "straight", rec_samples, **extra)
    split = tmp_path / "split"
    first, _ = _grpo(tool_calling_model, split, rec_samples, save_steps=3, **extra)  # step 3: mid-way
    shutil.rmtree(split / "checkpoint-4")
    rest, resumed_weights = _grpo(tool_calling_model, split, rec_samples, resume_from_checkpoint="latest", **extra)
    assert len(rest) == 1 and first[2]["tools/calls"] > 0  # the restored buffer holds step 3's episodes
    losses = [m["loss"] for m in first[:3] + rest]
    np.testing.assert_allclose(losses, [m["loss"] for m in straight_history], rtol=1e-6, atol=1e-7)
    for key, value in straight_weights.items():
        np.testing.assert_allclose(resumed_weights[key], value, rtol=1e-6, atol=1e-7, err_msg=key)
    resumed_rows = [json.loads(line) for line in open(split / "completions.jsonl")]
    straight_rows = [json.loads(line) for line in open(tmp_path / "straight" / "completions.jsonl")]
    assert [row["turns"] for row in resumed_rows] == [row["turns"] for row in straight_rows]


def test_episodes_of_groups_over_micro_steps_resume_mid_generation_batch(tool_calling_model, rec_samples, tmp_path):
    """Groups of 3 episodes, 2 per micro-step, a generation batch of 3 micro-steps (one per step): each micro-batch
    but the first and last holds parts of two groups, whose advantages are the whole groups'; the run stopped after
    step 1 resumes from the episodes it saved as the uninterrupted run."""
    extra = dict(per_device_train_batch_size=2, steps_per_generation=3, max_steps=3)
    straight = _grpo_trainer(tool_calling_model, tmp_path / "straight", rec_samples, **extra)
    straight_history = straight.train()["history"]
    assert straight_history[0]["tools/calls"] > 0  # logged by the step that made the episodes
    rows = {}
    for exp in straight.buffer:
        for key, g, reward, advantage in zip(*exp.completion_keys(), exp.rewards, exp.advantages.numpy()):
            rows.setdefault(key, {})[g] = (reward, advantage)
    assert [len(exp.texts) for exp in straight.buffer] == [2, 2, 2] and len(rows) == 2
    for group in rows.values():
        rewards, advantages = np.array([group[g] for g in range(3)]).T
        np.testing.assert_allclose(advantages, (rewards - rewards.mean()) / (rewards.std(ddof=1) + 1e-4),
                                   rtol=1e-4, atol=1e-5)
    split = tmp_path / "split"
    first, _ = _grpo(tool_calling_model, split, rec_samples, save_steps=1, **extra)
    for step in (2, 3):
        shutil.rmtree(split / f"checkpoint-{step}")
    rest, resumed_weights = _grpo(tool_calling_model, split, rec_samples, resume_from_checkpoint="latest", **extra)
    np.testing.assert_allclose([m["loss"] for m in first[:1] + rest], [m["loss"] for m in straight_history],
                               rtol=1e-6, atol=1e-7)
    for key, value in straight.policy.state_dict().items():
        np.testing.assert_allclose(resumed_weights[key], value.numpy(), rtol=1e-6, atol=1e-7, err_msg=key)


def test_episodes_without_calls_are_the_single_turn_rollout(tiny, rec_samples):
    """Turn 1 samples with the first max_new_tokens of each row's random numbers: a rollout whose rows make no call
    gives the single-turn rollout's completions (the tiny model at random calls no tool)."""
    from paddle_r1.generation.rollout import sample_completions

    model, processor = tiny
    prompt, contexts = _contexts(tiny, rec_samples[:3])
    params = SamplingParams(max_new_tokens=12, temperature=1.0)
    eos, pad = eos_token_ids(processor.tokenizer), processor.tokenizer.pad_token_id
    uniforms = paddle.to_tensor(np.random.default_rng(5).random((6, 3 * 12)).astype("float32"))
    single = sample_completions(model, prompt, 2, params, eos, pad, uniforms=uniforms[:, :12])
    result = episodes_module.sample_episodes(model, processor, prompt, contexts, 2, params, eos, pad,
                                             Toolbox(["crop"]), 3, uniforms=uniforms)
    assert all(len(turns) == 1 for turns in result.turns)
    width = single.completion_ids.shape[1]
    np.testing.assert_array_equal(result.rollout.completion_ids.numpy()[:, :width], single.completion_ids.numpy())
    np.testing.assert_array_equal(result.rollout.completion_mask.numpy()[:, :width], single.completion_mask.numpy())
    assert result.rollout.truncated.numpy().tolist() == single.truncated.numpy().tolist()


def test_held_out_evaluation_of_a_tool_run_answers_in_episodes(tool_calling_model, rec_jsonl):
    """A run with tools evaluates its held-out set in episodes with the same tools, as its rollout runs: the
    ``tool_format`` eval reward (None for an answer without calls) scores the greedy episodes that call crop; the same
    held-out set evaluated single-turn has no calls to score."""
    from paddle_r1.evaluation.heldout import HeldoutEval
    from paddle_r1.generation.generator import Generator
    from paddle_r1.models.loading import load_model, load_processor

    generator = Generator(load_model(tool_calling_model), load_processor(tool_calling_model), "abs_resized")
    keys = dict(model_name_or_path=tool_calling_model, eval_steps=1, eval_data_path=rec_jsonl,
                eval_reward="tool_format", question_template="{Question}", max_completion_length=100)
    with_tools = HeldoutEval(GRPOConfig(**keys, tools=["crop"], max_turns=3))
    scores = with_tools.scores(generator, with_tools.samples)
    assert np.isfinite(scores).sum() >= len(scores) // 2, scores
    single_turn = HeldoutEval(GRPOConfig(**keys))
    assert np.isnan(single_turn.scores(generator, single_turn.samples)).all()
