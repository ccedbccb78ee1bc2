"""Rollout: G sampled completions for each prompt of a batch, from one batched KV-cached decode.

paddleformers' ``generate`` re-runs the whole prefix at each step for Qwen2.5-VL; this loop runs
each prompt once (images through the vision tower once per prompt), repeats its KV cache for its G
completions into buffers allocated once (``kv_cache.py``), and feeds one token per step through the decode step
of ``decoder.py``, with M-RoPE positions continuing from each prompt's last position.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import paddle

from ..models.forward import RepeatedPrompt, embed_inputs, image_spans, repeat_rows, rope_positions
from .decoder import PACK_AFTER_STEPS, make_decoder
from .penalties import SeenTokens, seen_in_prompts

# a PromptBatch's images and clips: the fields ``media_rows`` picks and ``join_media`` joins
MEDIA = ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw", "second_per_grid_ts")


@dataclass
class PromptBatch:
    """Processor output for B distinct prompts (left padded), with their images' and videos' patches."""

    input_ids: paddle.Tensor
    attention_mask: paddle.Tensor
    pixel_values: Optional[paddle.Tensor] = None
    image_grid_thw: Optional[paddle.Tensor] = None
    pixel_values_videos: Optional[paddle.Tensor] = None
    video_grid_thw: Optional[paddle.Tensor] = None
    second_per_grid_ts: Optional[paddle.Tensor] = None  # [videos] float32: seconds one frame pair spans

    @property
    def size(self) -> int:
        return self.input_ids.shape[0]

    def embeddings(self, model):
        """The prompts' input embeddings, images and videos in (``forward.embed_inputs``)."""
        return embed_inputs(model, self.input_ids, self.pixel_values, self.image_grid_thw, self.pixel_values_videos,
                            self.video_grid_thw)

    def positions(self, model):
        """The prompts' M-RoPE positions and each row's next one (``forward.rope_positions``)."""
        return rope_positions(model, self.input_ids, self.attention_mask, self.image_grid_thw, self.video_grid_thw,
                              self.second_per_grid_ts)

    def media_rows(self, items: list[int], images_per_item: list[int], videos_per_item: list[int]) -> dict:
        """The images and clips of ``items`` (prompts, or a multi-turn rollout's episode rows:
        ``Rollout.episode_media``) in that order, as PromptBatch fields (``MEDIA``; None when they have none), given
        how many images and clips each item has, in the order they are stored."""
        fields = dict.fromkeys(MEDIA)
        if self.image_grid_thw is not None and any(images_per_item[i] for i in items):
            fields["pixel_values"], fields["image_grid_thw"] = _patch_rows(self.pixel_values, self.image_grid_thw,
                                                                           images_per_item, items)
        if self.video_grid_thw is not None and any(videos_per_item[i] for i in items):
            fields["pixel_values_videos"], fields["video_grid_thw"] = _patch_rows(
                self.pixel_values_videos, self.video_grid_thw, videos_per_item, items)
            first = np.cumsum([0] + list(videos_per_item))
            fields["second_per_grid_ts"] = paddle.concat([self.second_per_grid_ts[first[i]:first[i + 1]]
                                                          for i in items if videos_per_item[i]])
        return fields


def _patch_rows(pixel_values: paddle.Tensor, grid: paddle.Tensor, per_item: list[int], items: list[int]
                ) -> tuple[paddle.Tensor, paddle.Tensor]:
    """The ``pixel_values`` rows and grid rows of the images (or clips) of ``items``, given how many each item has."""
    spans = image_spans(grid, per_item)
    first = np.cumsum([0] + list(per_item))
    return (paddle.concat([pixel_values[spans[i][0]:spans[i][1]] for i in items if per_item[i]]),
            paddle.concat([grid[first[i]:first[i + 1]] for i in items if per_item[i]]))


def join_media(batches: list) -> dict:
    """The images and clips of ``batches`` (``PromptBatch``es, or the ``MEDIA`` dicts of some) one after another, as
    PromptBatch fields (None where none has any)."""
    batches = [b if isinstance(b, dict) else {name: getattr(b, name) for name in MEDIA} for b in batches]
    joined = {}
    for kind, names in (("image_grid_thw", MEDIA[:2]), ("video_grid_thw", MEDIA[2:])):
        having = [b for b in batches if b[kind] is not None]
        joined.update({name: paddle.concat([b[name] for b in having]) if having else None for name in names})
    return joined


@dataclass
class SamplingParams:
    max_new_tokens: int
    temperature: float = 1.0  # 0 means greedy
    top_p: float = 1.0
    top_k: int = 0
    # tokens whose probability is below min_p times the likeliest one's are dropped (after top_k and top_p); 0: none
    min_p: float = 0.0
    # the penalty on the logits of the tokens a row has seen (``penalties.py``); 1: none
    repetition_penalty: float = 1.0
    engine: str = "auto"  # the decode step: auto | one_token | layers (``decoder.make_decoder``)
    # each sampled token's log-prob (``Rollout.sampling_logp``, what importance_sampling_correction reads); without
    # it the rollout skips a softmax over the vocabulary per token and its sampling_logp is None
    logprobs: bool = True
    # tokens the CPU decode step runs on its weights as stored before packing them for MKL (``decoder.py``; packing
    # costs a few tokens' worth of what it saves): short replies never pay for it; the trainer, whose completions run
    # long, packs before the first token (0) unless max_completion_length is within PACK_AFTER_STEPS
    pack_after: int = PACK_AFTER_STEPS
    # the one-token step replayed as CUDA graphs on a GPU (``cuda_graphs.py``; config key rollout_cuda_graphs)
    cuda_graphs: bool = False
    # the CPU one-token step's products by its packed weights in bfloat16 (``onednn.py``; rollout_bf16_products)
    bf16_products: bool = False


@dataclass
class Rollout:
    prompt: PromptBatch
    # G here: completions of each prompt in this rollout (a rank's part of a group spread over ranks)
    num_generations: int
    completion_ids: paddle.Tensor  # [B*G, T], pad after EOS; rows are grouped prompt by prompt
    completion_mask: paddle.Tensor  # [B*G, T] int32, 1 up to and including EOS
    truncated: paddle.Tensor  # [B*G] bool, no EOS within max_new_tokens
    # [B*G, T] float32: each sampled token's log-prob under the distribution it was drawn from (``sample_tokens``), 0
    # after EOS; NaN for a token the rollout did not sample (a given first turn); None when not asked for
    # (``SamplingParams.logprobs``) and in a buffer saved before it
    sampling_logp: Optional[paddle.Tensor] = None
    # Multi-turn episodes (``episodes.sample_episodes``), else None. completion_ids then hold every token after the
    # prompt (the model's turns and the tools' messages) and completion_mask the model's own tokens only.
    episode_mask: Optional[paddle.Tensor] = None  # [B*G, T] int32, 1 over every token of the episode, 0 on padding
    episode_pixel_values: Optional[paddle.Tensor] = None  # row by row: its prompt's images, then its tools'
    episode_image_grid_thw: Optional[paddle.Tensor] = None
    episode_images_per_row: Optional[list] = None  # [B*G] images of each row (prompt's and tools')
    episode_pixel_values_videos: Optional[paddle.Tensor] = None  # row by row: its prompt's clips, then its tools'
    episode_video_grid_thw: Optional[paddle.Tensor] = None
    episode_second_per_grid_ts: Optional[paddle.Tensor] = None
    episode_videos_per_row: Optional[list] = None  # [B*G] clips of each row (None: a buffer saved before them)

    @property
    def multi_turn(self) -> bool:
        return self.episode_mask is not None

    @property
    def episode_media(self) -> PromptBatch:
        """A multi-turn rollout's images and clips, row by row, as a PromptBatch without tokens."""
        return PromptBatch(None, None, **{name: getattr(self, f"episode_{name}") for name in MEDIA})

    @property
    def episode_media_counts(self) -> tuple[list, list]:
        """Images and clips of each episode row."""
        return self.episode_images_per_row, self.episode_videos_per_row or [0] * len(self.episode_images_per_row)


def episode_fields(media: dict) -> dict:
    """``MEDIA`` fields as a Rollout's ``episode_`` ones."""
    return {f"episode_{name}": value for name, value in media.items()}


def pad_rows(rows: Sequence[Sequence[int]], pad: int, left: bool = False, dtype: str = "int64") -> paddle.Tensor:
    """Rows of different lengths as one [len(rows), longest] tensor, ``pad`` where a row is short: after it, or before
    it with ``left`` (prompts and conversations are left padded, completions right padded)."""
    width = max(len(row) for row in rows)
    out = np.full((len(rows), width), pad, dtype=dtype)
    for i, row in enumerate(rows):
        place = slice(width - len(row), width) if left else slice(0, len(row))
        out[i, place] = row
    return paddle.to_tensor(out)


def sampling_logits(logits: paddle.Tensor, params: SamplingParams, seen: Optional[SeenTokens] = None
                    ) -> paddle.Tensor:
    """The float32 logits a token is drawn from, in transformers' order (TRL's generation without vLLM): the
    repetition penalty on the tokens in ``seen`` (``penalties.py``), then logits / T restricted by top-k, top-p and
    min-p (-inf outside); at temperature 0 (greedy) the logits after the repetition penalty alone, which are the
    logits as they are without one (what the training forward's log-probs also take then).

    min-p keeps the tokens with p_v >= min_p * max_u p_u, p the softmax after top-k and top-p (transformers'
    ``MinPLogitsWarper``; the ratio is the same over the whole distribution). vLLM applies min-p before top-k and
    top-p: the two orders keep the same tokens unless min_p is combined with top_p < 1, where vLLM's top-p reads the
    probabilities min-p left, renormalised."""
    logits = logits.astype("float32")
    if seen is not None and params.repetition_penalty != 1.0:
        logits = seen.penalize(logits, params.repetition_penalty)
    if params.temperature == 0:
        return logits
    if params.temperature != 1.0:
        logits = logits / params.temperature
    if params.top_k > 0:
        kth = paddle.topk(logits, min(params.top_k, logits.shape[-1]), axis=-1)[0][:, -1:]
        logits = paddle.where(logits < kth, paddle.full_like(logits, float("-inf")), logits)
    if params.top_p < 1.0:
        order = paddle.argsort(logits, axis=-1, descending=True)
        sorted_logits = paddle.take_along_axis(logits, order, axis=-1)
        probs = paddle.nn.functional.softmax(sorted_logits, axis=-1)
        # drop a token when the tokens ranked above it already hold top_p of the mass (the first always stays)
        drop = (paddle.cumsum(probs, axis=-1) - probs) > params.top_p
        sorted_logits = paddle.where(drop, paddle.full_like(sorted_logits, float("-inf")), sorted_logits)
        logits = paddle.put_along_axis(logits, order, sorted_logits, axis=-1)
    if params.min_p > 0:
        probs = paddle.nn.functional.softmax(logits, axis=-1)
        floor = params.min_p * probs.max(axis=-1, keepdim=True)
        logits = paddle.where(probs < floor, paddle.full_like(logits, float("-inf")), logits)
    return logits


def pick_next_token(logits: paddle.Tensor, params: SamplingParams, uniform: Optional[paddle.Tensor] = None
                    ) -> paddle.Tensor:
    """Greedy at temperature 0, else sample from softmax(logits / T) restricted by top-k, top-p and min-p.

    ``uniform`` ([rows] in [0, 1)) makes the draw an inverse-CDF lookup, so a row's tokens depend only
    on the numbers it is given (the trainer derives them from seed, step and the prompt's place in the
    global batch: the same completions on 1 or N ranks, and after a resume).
    """
    return _draw(sampling_logits(logits, params), params, uniform)[0]


def _draw(scores: paddle.Tensor, params: SamplingParams, uniform: Optional[paddle.Tensor]
          ) -> tuple[paddle.Tensor, Optional[paddle.Tensor]]:
    """The drawn tokens [rows], and the softmax of ``scores`` they were drawn from (None when greedy)."""
    if params.temperature == 0:
        return scores.argmax(axis=-1), None
    probs = paddle.nn.functional.softmax(scores, axis=-1)
    if uniform is None:
        return paddle.multinomial(probs, num_samples=1).squeeze(-1), probs
    cdf = paddle.cumsum(probs, axis=-1)  # non-decreasing: the tokens whose cdf is below the draw are a prefix
    draw = uniform.astype(cdf.dtype).unsqueeze(-1) * cdf[:, -1:]
    below = paddle.searchsorted(cdf, draw).squeeze(-1)  # how many cdf values are < the draw
    return paddle.clip(below, max=scores.shape[-1] - 1), probs


def _drawn_logp(scores: paddle.Tensor, probs: Optional[paddle.Tensor], token: paddle.Tensor) -> paddle.Tensor:
    """log softmax(scores)[token] [rows], read from the softmax the token was drawn from (a greedy token's computed
    here). The probability is never 0 there: a draw lands where the cdf rises, ``multinomial`` skips zeros, and a
    greedy token's is at least 1 / vocab. Its log is as exact as scores[token] - logsumexp(scores), whose CPU
    kernel alone cost 7% of a rollout (10x the softmax's)."""
    if probs is None:
        probs = paddle.nn.functional.softmax(scores, axis=-1)
    return paddle.log(paddle.take_along_axis(probs, token.unsqueeze(-1), axis=-1)).squeeze(-1)


def prefill(model, prompt: PromptBatch):
    """The prompts once (one row each; images and clips through the vision tower once): their KV cache, next-token
    logits
    [B, vocab] and each row's next M-RoPE position [B]."""
    embeds = prompt.embeddings(model)
    positions, next_position = prompt.positions(model)
    out = model(**embeds.model_inputs(), attention_mask=prompt.attention_mask, position_ids=positions,
                use_cache=True, logits_to_keep=1)
    return out.past_key_values, out.logits[:, -1], next_position


@paddle.no_grad()
def sample_completions(model, prompt: PromptBatch, num_generations: int, params: SamplingParams,
                       eos_token_ids: Sequence[int], pad_token_id: int,
                       uniforms: Optional[paddle.Tensor] = None, eos_check_every: int = 8) -> Rollout:
    """``uniforms`` [B*G, max_new_tokens]: the random numbers each row samples with (else paddle's RNG).

    The prompt is prefilled once per prompt and its cache rows repeated for its G completions. Whether every row
    has ended is read on the host only every ``eos_check_every`` steps (a read waits for the device); the
    completions are then cut where the last row ended, so they are the same as with a check at every step.
    """
    was_training = model.training
    model.eval()
    try:
        cache, logits, next_position = prefill(model, prompt)
        logits, next_position = repeat_rows(logits, num_generations), repeat_rows(next_position, num_generations)
        prompt_mask = repeat_rows(prompt.attention_mask, num_generations)
        decoder = make_decoder(model, RepeatedPrompt(cache, num_generations), prompt_mask, next_position,
                               params.max_new_tokens, params.engine, params.pack_after, params.cuda_graphs,
                               params.bf16_products)
        eos = paddle.to_tensor(list(eos_token_ids), dtype="int64")
        seen = seen_in_prompts(params.repetition_penalty, prompt.input_ids, num_generations, prompt_mask,
                               logits.shape[-1])
        completion_ids, finished, sampling_logp = sample_tokens(decoder, logits, params, eos, pad_token_id, uniforms,
                                                                eos_check_every, seen)
    finally:
        model.train(was_training)

    completion_mask = completion_mask_from_ids(completion_ids, eos)
    ended = int(completion_mask.sum(axis=1).max())  # the step at which the last row ended
    return Rollout(prompt=prompt, num_generations=num_generations, completion_ids=completion_ids[:, :ended],
                   completion_mask=completion_mask[:, :ended], truncated=~finished,
                   sampling_logp=None if sampling_logp is None else sampling_logp[:, :ended])


def sample_tokens(decoder, logits: paddle.Tensor, params: SamplingParams, eos: paddle.Tensor, pad_token_id: int,
                  uniforms: Optional[paddle.Tensor] = None, eos_check_every: int = 8,
                  seen: Optional[SeenTokens] = None) -> tuple[paddle.Tensor, paddle.Tensor, Optional[paddle.Tensor]]:
    """Tokens [rows, steps] sampled from ``logits`` then through ``decoder`` one step at a time until every row
    has ended (checked every ``eos_check_every`` steps) or ``params.max_new_tokens``; a row pads after its EOS.
    Also which rows ended [rows], and each token's log-prob [rows, steps] under the distribution it was drawn from,
    log softmax(``sampling_logits``)[token] (TRL's sampling_per_token_logps, as vLLM's processed log-probs), 0 on
    padding; None unless ``params.logprobs``. The last column's tokens are not fed to the decoder. ``seen``: what each
    row has seen, for ``params.repetition_penalty`` (None without one); each row's sampled tokens up to its EOS join
    it."""
    finished = paddle.zeros([logits.shape[0]], dtype="bool")
    pad = paddle.full_like(finished, pad_token_id, dtype="int64")
    tokens, logps = [], []
    for step in range(params.max_new_tokens):
        uniform = None if uniforms is None else uniforms[:, step]
        scores = sampling_logits(logits, params, seen)
        token, probs = _draw(scores, params, uniform)
        token = token.astype("int64")
        if seen is not None:
            seen.add(token.unsqueeze(-1), ~finished.unsqueeze(-1))
        if params.logprobs:
            logp = _drawn_logp(scores, probs, token)
            logps.append(paddle.where(finished, paddle.zeros_like(logp), logp))
        token = paddle.where(finished, pad, token)
        tokens.append(token)
        finished = finished | paddle.isin(token, eos)
        last = step == params.max_new_tokens - 1
        if last or ((step + 1) % eos_check_every == 0 and bool(finished.all())):
            break
        logits = decoder.step(token)
    return paddle.stack(tokens, axis=1), finished, paddle.stack(logps, axis=1) if logps else None


def completion_mask_from_ids(completion_ids: paddle.Tensor, eos: paddle.Tensor) -> paddle.Tensor:
    """1 for every token up to and including the first EOS of each row, 0 after it."""
    is_eos = paddle.isin(completion_ids, eos).astype("int64")
    eos_before = paddle.cumsum(is_eos, axis=1) - is_eos  # EOS tokens strictly before each position
    return (eos_before == 0).astype("int32")
