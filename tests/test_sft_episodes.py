"""SFT on multi-turn episodes: the conversation's tokens, which of them are targets, the loss over exactly those,
and a short SFT run after which the tiny model opens held-out prompts with a well-formed crop call."""
import importlib.util
import os
import re
import sys

import numpy as np
import pytest

from paddle_r1.config.jobs import SFTConfig
from paddle_r1.data.episodes import episode_messages, tool_result_message, tool_role
from paddle_r1.data.loader import load_samples
from paddle_r1.synthetic import make_synthetic_splits
from paddle_r1.generation.generator import build_messages, load_sample_images
from paddle_r1.generation.rollout import SamplingParams
from paddle_r1.algorithms.logprobs import conversation_logprobs
from paddle_r1.trainer.sft import SFTTrainer, build_episode_batch, sft_loss

CONFIG = SFTConfig(model_name_or_path="unused", question_template="{Question}")
BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")


def _benchmark():
    """benchmarks/tool_learning.py (it imports its neighbour learning.py)."""
    sys.path.insert(0, BENCHMARKS)
    try:
        spec = importlib.util.spec_from_file_location("tool_learning", os.path.join(BENCHMARKS, "tool_learning.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(BENCHMARKS)
    return module


@pytest.fixture(scope="module")
def zoom(tmp_path_factory):
    paths = make_synthetic_splits(str(tmp_path_factory.mktemp("zoom")), "zoom", num_train=8, num_heldout=6, seed=1)
    return load_samples(paths["train"])[0], load_samples(paths["heldout"])[0]


def _with_tool_text(sample, text):
    episode = [dict(turn, text=text) if turn["role"] == "tool" else turn for turn in sample["episode"]]
    return dict(sample, episode=episode)


def test_tool_results_take_the_templates_tool_role_with_images_then_text(tiny):
    _, processor = tiny
    assert tool_result_message("the crop", 2, "tool") == {"role": "tool", "content": [
        {"type": "image"}, {"type": "image"}, {"type": "text", "text": "the crop"}]}
    episode = [{"role": "assistant", "text": "call"}, {"role": "tool", "name": "crop", "arguments": {}, "text": "",
                                                        "images": ["a.png"]}, {"role": "assistant", "text": "done"}]
    prompt = [{"role": "user", "content": [{"type": "text", "text": "q"}]}]
    assert tool_role(processor) == "tool"  # Qwen's templates write a tool message: "<|im_start|>tool ..."
    messages = episode_messages(prompt, episode, tool_role(processor))
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert "<|im_start|>tool\n<|vision_start|>" in processor.apply_chat_template(messages, tokenize=False)


def test_sft_and_the_grpo_rollout_give_a_scripted_episode_the_same_tokens(tiny, zoom):
    """The rollout continuing from the scripted first turn (the crop call) runs the crop tool itself; its episode's
    tokens up to the answer (prompt, call, the tool's message with its image tokens) equal the SFT conversation's,
    and the tool's text and image equal the scripted ones: what SFT teaches is what GRPO then shows the model."""
    from PIL import Image

    from paddle_r1.generation.episodes import sample_episodes
    from paddle_r1.generation.generator import build_prompt_batch, eos_token_ids
    from paddle_r1.tools.builtins import ToolContext
    from paddle_r1.tools.toolbox import Toolbox

    model, processor = tiny
    sample = zoom[0][0]
    images = [load_sample_images(sample)]
    prompt, facts = build_prompt_batch([sample], processor, "{Question}", images=images)
    contexts = [ToolContext(images[0], facts.image_sizes[0], facts.input_sizes[0], "abs_resized")]
    result = sample_episodes(model, processor, prompt, contexts, 1, SamplingParams(max_new_tokens=80, temperature=0),
                             eos_token_ids(processor.tokenizer), processor.tokenizer.pad_token_id, Toolbox(["crop"]),
                             2, first_turns=[sample["episode"][0]["text"]])
    tool_turn, scripted = result.turns[0][1], sample["episode"][1]
    assert tool_turn["text"] == scripted["text"]
    assert np.array_equal(np.asarray(tool_turn["images"][0]), np.asarray(Image.open(scripted["images"][0])))
    rollout = result.rollout
    own, every = rollout.completion_mask.numpy()[0], rollout.episode_mask.numpy()[0]
    answer_starts = int(np.flatnonzero((own == 1) & (np.cumsum(own == 0) > 0))[0])  # the first own token after tools
    episode = prompt.input_ids.numpy()[0].tolist() + rollout.completion_ids.numpy()[0, :answer_starts].tolist()
    assert every[:answer_starts].all()
    batch = build_episode_batch([sample], processor, CONFIG, "abs_resized")
    assert batch.input_ids.numpy()[0, :len(episode)].tolist() == episode


def test_targets_are_exactly_the_assistant_turns(tiny, zoom):
    """The tokens are the chat template's whole conversation (its image tokens expanded, every image given in
    order); the targets decode to each assistant turn and its end-of-turn token, nothing of the tool result."""
    _, processor = tiny
    samples = zoom[0][:2]
    batch = build_episode_batch(samples, processor, CONFIG, "abs_resized")
    ids, attention, mask = batch.input_ids.numpy(), batch.attention_mask.numpy(), batch.loss_mask.numpy()
    tokenizer = processor.tokenizer
    for row, sample in enumerate(samples):
        messages = episode_messages(build_messages(sample, "{Question}"), sample["episode"], "tool")
        text = processor.apply_chat_template(messages, tokenize=False)
        images = load_sample_images(sample) + load_sample_images({"images": sample["episode"][1]["images"]})
        whole = processor(text=[text], images=images, return_tensors="pd")
        mine = ids[row][attention[row] == 1]
        assert mine.tolist() == whole["input_ids"][0].tolist()
        targets = tokenizer.decode(ids[row, 1:][mask[row] == 1].tolist())
        turns = [t["text"] for t in sample["episode"] if t["role"] == "assistant"]
        assert targets == "".join(t + "<|im_end|>" for t in turns)
        assert "<tool_response>" not in targets and "<|image_pad|>" not in targets
    # canvas (448 pixels seen at 112), crop (56 pixels); the same for the second row
    np.testing.assert_array_equal(batch.image_grid_thw.numpy(), [[1, 8, 8], [1, 4, 4]] * 2)


@pytest.mark.parametrize("family", ["qwen3_vl", "paddleocr_vl"])
def test_other_families_templates(family, zoom, tmp_path):
    """Qwen3-VL's processor (32-pixel patches) and PaddleOCR-VL's (ERNIE's template, its end-of-turn token): the
    tokens before the first target are the prompt a rollout feeds the model, and the targets are the assistant
    turns. (Tokenized whole, PaddleOCR-VL's conversation would merge the space its "Assistant: " header ends with
    into the turn's first token; the model never sees that merge when it generates.)"""
    from paddle_r1.generation.generator import build_prompt_batch
    from paddle_r1.models.loading import load_processor
    from paddle_r1.testing.tiny import make_tiny_model

    processor = load_processor(make_tiny_model(str(tmp_path / family), family=family))
    sample = zoom[0][0]
    batch = build_episode_batch([sample], processor, CONFIG, "rel_1000")
    ids, mask = batch.input_ids.numpy()[0], batch.loss_mask.numpy()[0]
    prompt, _ = build_prompt_batch([sample], processor, "{Question}")
    first_target = int(np.argmax(mask)) + 1
    assert ids[:first_target].tolist() == prompt.input_ids.numpy()[0].tolist()
    eos = processor.tokenizer.eos_token
    targets = processor.tokenizer.decode(ids[1:][mask == 1].tolist())
    assert targets == "".join(t["text"] + eos for t in sample["episode"] if t["role"] == "assistant")


def test_the_loss_covers_the_assistant_turns_only(tiny, zoom):
    """A longer tool result adds context tokens, never targets; the loss is the mean NLL over the targets (the
    positions the mask names), so the tool text's own log-probs do not enter it."""
    model, processor = tiny
    sample = zoom[0][0]
    short = build_episode_batch([_with_tool_text(sample, "x")], processor, CONFIG, "abs_resized")
    long = build_episode_batch([_with_tool_text(sample, "x " * 40)], processor, CONFIG, "abs_resized")
    assert long.input_ids.shape[1] > short.input_ids.shape[1] + 30
    assert int(long.loss_mask.sum()) == int(short.loss_mask.sum())
    logp = conversation_logprobs(model, long, 64)
    mask = long.loss_mask.numpy()
    np.testing.assert_allclose(float(sft_loss(logp, long.loss_mask)), -(logp.numpy() * mask).sum() / mask.sum(),
                               rtol=1e-6)
    # the gradient through the log-probs is zero at every tool-result token: they are context, not targets
    leaf = logp.detach()
    leaf.stop_gradient = False
    sft_loss(leaf, long.loss_mask).backward()
    ids = long.input_ids.numpy()[0, 1:]
    tool_text = [i for i, token in enumerate(ids) if processor.tokenizer.decode([int(token)]).strip() == "x"]
    gradient = leaf.grad.numpy()[0]
    assert len(tool_text) >= 40 and not gradient[tool_text].any() and gradient[mask[0] == 1].all()


def test_a_batch_mixes_episodes_and_plain_answers(tiny, zoom, rec_samples):
    _, processor = tiny
    batch = build_episode_batch([zoom[0][0], rec_samples[0]], processor, CONFIG, "abs_resized")
    ids, mask = batch.input_ids.numpy(), batch.loss_mask.numpy()
    plain = processor.tokenizer.decode(ids[1, 1:][mask[1] == 1].tolist())
    assert re.fullmatch(r"<think> </think><answer>\[\d+, \d+, \d+, \d+\]</answer><\|im_end\|>", plain), plain


def test_sft_on_episodes_makes_the_tiny_model_call_the_crop_tool(tiny_model_dir, zoom, tmp_path):
    """60 SFT steps on 8 scripted episodes (about 20 s here; the loss ends near 3% of where it started); then, greedy,
    every held-out prompt's first turn is a crop call that parses: {"name": "crop", "arguments": {"bbox_2d": [4
    integers]}} inside <tool_call> tags."""
    train, heldout = zoom
    trainer = SFTTrainer(SFTConfig(model_name_or_path=tiny_model_dir, output_dir=str(tmp_path), learning_rate=5e-3,
                                   per_device_train_batch_size=4, max_steps=60, question_template="{Question}",
                                   warmup_ratio=0.0, use_visualdl=False, disable_tqdm=True), samples=train)
    before = trainer.generator.generate(heldout, 1, SamplingParams(max_new_tokens=80, temperature=0), "{Question}")
    result = trainer.train()
    assert result["history"][-1]["loss"] < 0.1 * result["history"][0]["loss"]
    after = trainer.generator.generate(heldout, 1, SamplingParams(max_new_tokens=80, temperature=0), "{Question}")

    crop_call_box = _benchmark().crop_call_box  # the crop call, whole and well formed, or None
    assert not any(crop_call_box(t) for t in before.texts)
    assert all(crop_call_box(t) for t in after.texts), after.texts
