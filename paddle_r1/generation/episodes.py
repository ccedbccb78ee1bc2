"""Multi-turn rollouts with tools ("thinking with images"): the model calls a tool, sees its result (text, images)
and goes on, until it answers without a call or has had ``max_turns`` turns.

Turn 1 is the single-turn rollout (the prompt prefilled once per prompt, its cache repeated for its G rows, one token
per step). A row whose turn ended (EOS) with tool calls and has turns left continues: its calls run
(``tools.toolbox``), their results are rendered as the chat template's tool messages (``tool_segment_text``, the
messages ``data.episodes`` makes, as SFT on scripted episodes renders them) and processed as any prompt (images and
clips through the processor), and only that new segment is prefilled, on top of the row's KV cache as the turn left
it (``EpisodeCache``): the episode so far is never run through the model again. Rows that answered leave the batch;
the others advance together:

- the segments of the continuing rows are left-padded to the longest; the pads, and the slots a row's turn left
  after its EOS, are masked out of the cache's attention mask;
- each row's M-RoPE positions continue from its own next position (the segment's image and clip tokens get their
  3-D positions as the model's rope index computes them, offset there: a clip's time positions start at its block,
  as a prompt's do);
- the decode step is made again over the carried cache (one copy of it per turn into the new step's buffers).

The episode comes back as one ``Rollout`` row per episode: every token after the prompt (the model's turns, the
tools' messages) in ``completion_ids``, the model's own tokens in ``completion_mask`` (the loss's tokens), all of
them in ``episode_mask``, and each row's images and clips (its prompt's, then its tools') for the log-prob pass,
which runs each row whole (``trainer.logprobs``). ``max_new_tokens`` bounds each turn.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np
import paddle

from ..data.episodes import assistant_message, tool_result_message, tool_role
from ..models.forward import RepeatedPrompt, repeat_rows
from ..tools.builtins import ToolContext
from ..tools.calls import parse_tool_calls
from ..tools.toolbox import Toolbox
from .decoder import make_decoder
from .encoding import encode_prompts
from .penalties import seen_in_prompts
from .rollout import (PromptBatch, Rollout, SamplingParams, completion_mask_from_ids, episode_fields, join_media,
                      pad_rows, prefill, sample_tokens)


@dataclass
class Episodes:
    rollout: Rollout
    texts: list  # [B*G] the final assistant turn's text (special tokens removed): what the rewards score
    # [B*G] [{"role": "assistant", "text"}, {"role": "tool", "name", "arguments", "text", "images", "videos"}, ...];
    # a tool's clip as {"frames": [T, H, W, 3] uint8, "seconds": each frame's time in its clip}
    turns: list
    tool_calls: list  # [B*G] [{"name", "arguments", "error"}] of every call run (error None when it answered)


class EpisodeCache:
    """The keys and values [rows, kv_heads, length, head_dim] of every layer of the episode so far: a cache the
    model's forward appends a new segment to (``update`` stores it), and the prompt ``decoder.make_decoder`` copies
    into its buffers."""

    def __init__(self, keys: list, values: list):
        self.keys, self.values = keys, values

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.keys[layer_idx].shape[2]

    def update(self, key: paddle.Tensor, value: paddle.Tensor, layer_idx: int, *args, **kwargs):
        self.keys[layer_idx] = paddle.concat([self.keys[layer_idx], key], axis=2)
        self.values[layer_idx] = paddle.concat([self.values[layer_idx], value], axis=2)
        return self.keys[layer_idx], self.values[layer_idx]


MARK = "\u2063tool-turn\u2063"  # stands for an assistant turn's text while the template renders what follows it


def tool_segment_text(processor, tool_messages: list[dict], end_of_turn: str) -> str:
    """What the chat template writes after an assistant turn's ``end_of_turn`` token when ``tool_messages`` (the
    results, ``data.episodes.tool_result_message``) follow it, through the opening of the next assistant turn: each
    model keeps its own template's tool format, as SFT on scripted episodes renders it."""
    conversation = [{"role": "user", "content": [{"type": "text", "text": "?"}]}, assistant_message(MARK),
                    *tool_messages]
    text = processor.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
    after = text[text.index(MARK) + len(MARK):]
    if not after.startswith(end_of_turn):
        raise ValueError(f"the chat template does not end an assistant turn with {end_of_turn!r} (it writes "
                         f"{after[:40]!r}); multi-turn rollouts need a template that does")
    return after[len(end_of_turn):]


@dataclass
class _Row:
    """One episode as it grows: its tokens after the prompt, which are the model's, its images and clips (the
    prompt's, then each tool segment's: ``rollout.MEDIA`` dicts), its turns and calls."""

    ids: list
    own: list
    media: list
    images: int
    videos: int
    turns: list
    calls: list
    truncated: bool = False
    # per token: its sampled log-prob (NaN: not sampled); empty unless the sampling params ask for log-probs
    logps: list = field(default_factory=list)


class _Segment:
    """The continuing rows' tool messages, tokenized row by row (with their images and clips) and left-padded into
    one batch."""

    def __init__(self, processor, texts: list[str], images: list[list], clips: list[list], pad_token_id: int):

        self.rows = [encode_prompts([text], [row_images], processor, [row_clips])[0]
                     for text, row_images, row_clips in zip(texts, images, clips)]
        tokens = [row.input_ids[0].tolist() for row in self.rows]
        self.batch = PromptBatch(input_ids=pad_rows(tokens, pad_token_id, left=True),
                                 attention_mask=pad_rows([[1] * len(row) for row in tokens], 0, left=True),
                                 **join_media(self.rows))


def prefill_segment(model, cache: EpisodeCache, cache_mask: paddle.Tensor, segment: PromptBatch,
                    next_position: paddle.Tensor) -> tuple[paddle.Tensor, paddle.Tensor, paddle.Tensor]:
    """``segment`` (left padded, with its images and clips) through the model on top of ``cache`` (its valid slots
    ``cache_mask`` [rows, length]), each row's positions continuing from ``next_position``: the next-token logits
    [rows, vocab], the mask over the cache's slots now, and each row's next position."""
    embeds = segment.embeddings(model)
    positions, segment_next = segment.positions(model)
    positions = positions + next_position.astype(positions.dtype).unsqueeze(-1)
    mask = paddle.concat([cache_mask, segment.attention_mask.astype(cache_mask.dtype)], axis=1)
    out = model(**embeds.model_inputs(), attention_mask=mask, position_ids=positions, past_key_values=cache,
                use_cache=True, logits_to_keep=1)
    return out.logits[:, -1], mask, next_position + segment_next.astype(next_position.dtype)


@paddle.no_grad()
def sample_episodes(model, processor, prompt: PromptBatch, contexts: list[ToolContext], num_generations: int,
                    params: SamplingParams, eos_token_ids: Sequence[int], pad_token_id: int, toolbox: Toolbox,
                    max_turns: int, uniforms: Optional[paddle.Tensor] = None,
                    first_turns: Optional[list[str]] = None) -> Episodes:
    """``num_generations`` episodes for each prompt of ``prompt`` (``contexts``: each prompt's images for its tool
    calls), at most ``max_turns`` assistant turns each. ``uniforms`` [B*G, max_turns * max_new_tokens]: each row's
    random numbers, turn t taking the t-th ``max_new_tokens`` of them. ``first_turns``: each row's first assistant
    turn as given text (the episode continues from it) instead of sampled."""
    was_training = model.training
    model.eval()
    try:
        return _Episodes(model, processor, prompt, contexts, num_generations, params, eos_token_ids, pad_token_id,
                         toolbox, max_turns).run(uniforms, first_turns)
    finally:
        model.train(was_training)


class _Episodes:
    """One multi-turn rollout (``sample_episodes``): the rows still going, their carried cache and decode step."""

    def __init__(self, model, processor, prompt, contexts, num_generations, params, eos_token_ids, pad_token_id,
                 toolbox, max_turns):
        self.model, self.processor, self.prompt, self.contexts = model, processor, prompt, contexts
        self.g, self.params, self.pad_token_id, self.toolbox, self.max_turns = (num_generations, params, pad_token_id,
                                                                               toolbox, max_turns)
        self.tokenizer = processor.tokenizer
        self.eos = paddle.to_tensor(list(eos_token_ids), dtype="int64")
        self.end_of_turn = self.tokenizer.convert_ids_to_tokens(self.tokenizer.eos_token_id)
        self.tool_role = tool_role(processor)
        self.rows = [self._new_row(r // num_generations) for r in range(prompt.size * num_generations)]

    def _new_row(self, prompt_index: int) -> _Row:
        images, videos = [len(c.images) for c in self.contexts], [len(c.clips) for c in self.contexts]
        media = self.prompt.media_rows([prompt_index], images, videos)
        return _Row([], [], [media], images[prompt_index], videos[prompt_index], [], [])

    def run(self, uniforms, first_turns) -> Episodes:
        capacity = self.params.max_new_tokens + 1  # + 1: a continuing turn's last token goes into the cache
        cache, logits, next_position = prefill(self.model, self.prompt)
        logits, next_position = repeat_rows(logits, self.g), repeat_rows(next_position, self.g)
        mask = repeat_rows(self.prompt.attention_mask, self.g)
        decoder = make_decoder(self.model, RepeatedPrompt(cache, self.g), mask, next_position, capacity,
                               self.params.engine, self.params.pack_after, self.params.cuda_graphs)
        active = list(range(len(self.rows)))
        # what each row has seen, for the repetition penalty: its prompt, its turns and its tools' messages
        seen = seen_in_prompts(self.params.repetition_penalty, self.prompt.input_ids, self.g, mask, logits.shape[-1])
        for turn in range(self.max_turns):
            given = turn == 0 and first_turns is not None
            if given:
                tokens, finished = self._given_turn(decoder, first_turns)
                # given, not sampled
                logps = paddle.full(tokens.shape, float("nan"), dtype="float32") if self.params.logprobs else None
            else:
                span = slice(turn * self.params.max_new_tokens, (turn + 1) * self.params.max_new_tokens)
                turn_uniforms = None if uniforms is None else uniforms[paddle.to_tensor(active)][:, span]
                tokens, finished, logps = sample_tokens(decoder, logits, self.params, self.eos, self.pad_token_id,
                                                        turn_uniforms, seen=seen)
            turn_mask = completion_mask_from_ids(tokens, self.eos)
            if given and seen is not None:
                seen.add(tokens, turn_mask)
            lengths = turn_mask.sum(axis=1)
            calls = self._record_turn(active, tokens.numpy(), None if logps is None else logps.numpy(),
                                      lengths.numpy(), finished.numpy())
            going = [j for j, row_calls in enumerate(calls) if row_calls and turn + 1 < self.max_turns]
            if not going:
                break
            decoder.step(tokens[:, -1])  # the turn's last tokens (one row's EOS, the others' padding) into the cache
            keys, values = decoder.cache.filled()
            index = paddle.to_tensor(going, dtype="int64")
            cache = EpisodeCache([paddle.index_select(k, index) for k in keys],
                                 [paddle.index_select(v, index) for v in values])
            mask = paddle.concat([mask, turn_mask.astype(mask.dtype)], axis=1)[index]
            next_position = (next_position + lengths.astype(next_position.dtype))[index]
            active = [active[j] for j in going]
            segment = self._run_tools(active, [calls[j] for j in going])
            if seen is not None:
                seen = seen.select(index).add(segment.input_ids, segment.attention_mask)
            logits, mask, next_position = prefill_segment(self.model, cache, mask, segment, next_position)
            decoder = make_decoder(self.model, cache, mask, next_position, capacity, self.params.engine,
                                   self.params.pack_after, self.params.cuda_graphs)
        return self._episodes()

    def _given_turn(self, decoder, texts: list[str]) -> tuple[paddle.Tensor, paddle.Tensor]:
        """Each row's given first turn and its end of turn, fed through the decode step as if sampled."""
        rows = [ids + [self.tokenizer.eos_token_id]
                for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]
        width = max(len(r) for r in rows)
        if width > self.params.max_new_tokens:
            raise ValueError(f"a given first turn has {width} tokens; max_new_tokens is {self.params.max_new_tokens}")
        tokens = paddle.to_tensor([r + [self.pad_token_id] * (width - len(r)) for r in rows], dtype="int64")
        for step in range(width - 1):
            decoder.step(tokens[:, step])
        return tokens, paddle.ones([len(rows)], dtype="bool")

    def _record_turn(self, active: list[int], tokens: np.ndarray, logps: Optional[np.ndarray], lengths: np.ndarray,
                     finished: np.ndarray) -> list:
        """Each active row's turn into its episode; per row, the tool calls it made (none when the turn did not
        end: a turn cut off by max_new_tokens ends its episode)."""
        texts = self.tokenizer.batch_decode([tokens[j, :n].tolist() for j, n in enumerate(lengths)],
                                            skip_special_tokens=True)
        calls = []
        for j, r in enumerate(active):
            row, n = self.rows[r], int(lengths[j])
            row.ids += tokens[j, :n].tolist()
            row.own += [1] * n
            row.logps += logps[j, :n].tolist() if logps is not None else []
            row.turns.append({"role": "assistant", "text": texts[j]})
            row.truncated = not finished[j]
            calls.append(parse_tool_calls(texts[j]) if finished[j] else [])
        return calls

    def _run_tools(self, active: list[int], calls: list[list]) -> PromptBatch:
        """The continuing rows' calls run, recorded, and their results as the next segment (a ``PromptBatch``);
        the segment's tokens, images and clips join each row's episode."""
        texts, images, clips = [], [], []
        for r, row_calls in zip(active, calls):
            row, messages, row_images, row_clips = self.rows[r], [], [], []
            for call in row_calls:
                result = self.toolbox.run(call, self.contexts[r // self.g])
                row.calls.append({"name": call.name, "arguments": call.arguments, "error": result.error})
                row.turns.append({"role": "tool", "name": call.name, "arguments": call.arguments,
                                  "text": result.text, "images": result.images,
                                  "videos": [_clip_record(clip) for clip in result.videos]})
                messages.append(tool_result_message(result.text, len(result.images), self.tool_role,
                                                    len(result.videos)))
                row_images += result.images
                row_clips += result.videos
            texts.append(tool_segment_text(self.processor, messages, self.end_of_turn))
            images.append(row_images)
            clips.append(row_clips)
        segment = _Segment(self.processor, texts, images, clips, self.pad_token_id)
        for r, encoded, row_images, row_clips in zip(active, segment.rows, images, clips):
            row, ids = self.rows[r], encoded.input_ids[0]
            row.ids += ids.tolist()
            row.own += [0] * ids.shape[0]
            row.logps += [0.0] * ids.shape[0] if self.params.logprobs else []
            row.media.append(encoded)
            row.images += len(row_images)
            row.videos += len(row_clips)
        return segment.batch

    def _episodes(self) -> Episodes:
        rollout = Rollout(
            prompt=self.prompt, num_generations=self.g,
            completion_ids=pad_rows([row.ids for row in self.rows], self.pad_token_id),
            completion_mask=pad_rows([row.own for row in self.rows], 0, dtype="int32"),
            truncated=paddle.to_tensor([row.truncated for row in self.rows]),
            sampling_logp=pad_rows([row.logps for row in self.rows], 0.0, dtype="float32") if self.params.logprobs
            else None,
            episode_mask=pad_rows([[1] * len(row.ids) for row in self.rows], 0, dtype="int32"),
            episode_images_per_row=[row.images for row in self.rows],
            episode_videos_per_row=[row.videos for row in self.rows],
            **episode_fields(join_media([media for row in self.rows for media in row.media])))
        return Episodes(rollout=rollout, texts=[row.turns[-1]["text"] for row in self.rows],
                        turns=[row.turns for row in self.rows], tool_calls=[row.calls for row in self.rows])


def _clip_record(clip) -> dict:
    """A tool's clip as an episode's turn keeps it: its frames and each frame's time in its clip (seconds)."""
    metadata = clip.metadata()
    return {"frames": clip.frames, "seconds": [i / metadata["fps"] for i in metadata["frames_indices"]]}
