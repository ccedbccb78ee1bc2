"""Rollout: G sampled completions for each prompt of a batch, from one batched KV-cached decode.

paddleformers' ``generate`` re-runs the whole prefix at each step for Qwen2.5-VL; this loop runs
each prompt once (images through the vision tower once per prompt), repeats its KV cache for its G
completions into buffers allocated once, and feeds one token per step with M-RoPE positions continuing from
each prompt's last position.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import paddle

from ..models.forward import RepeatedPrompt, embed_inputs, repeat_rows, rope_positions, text_positions
from .decoder import OneTokenDecoder, supports


@dataclass
class PromptBatch:
    """Processor output for B distinct prompts (left padded)."""

    input_ids: paddle.Tensor
    attention_mask: paddle.Tensor
    pixel_values: Optional[paddle.Tensor] = None
    image_grid_thw: Optional[paddle.Tensor] = None

    @property
    def size(self) -> int:
        return self.input_ids.shape[0]


@dataclass
class SamplingParams:
    max_new_tokens: int
    temperature: float = 1.0  # 0 means greedy
    top_p: float = 1.0
    top_k: int = 0


@dataclass
class Rollout:
    prompt: PromptBatch
    num_generations: int
    completion_ids: paddle.Tensor  # [B*G, T], pad after EOS; rows are grouped prompt by prompt
    completion_mask: paddle.Tensor  # [B*G, T] int32, 1 up to and including EOS
    truncated: paddle.Tensor  # [B*G] bool, no EOS within max_new_tokens


def pick_next_token(logits: paddle.Tensor, params: SamplingParams, uniform: Optional[paddle.Tensor] = None
                    ) -> paddle.Tensor:
    """Greedy at temperature 0, else sample from softmax(logits / T) restricted by top-k and top-p.

    ``uniform`` ([rows] in [0, 1)) makes the draw an inverse-CDF lookup, so a row's tokens depend only
    on the numbers it is given (the trainer derives them from seed, step and the prompt's place in the
    global batch: the same completions on 1 or N ranks, and after a resume).
    """
    logits = logits.astype("float32")
    if params.temperature == 0:
        return logits.argmax(axis=-1)
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
    probs = paddle.nn.functional.softmax(logits, axis=-1)
    if uniform is None:
        return paddle.multinomial(probs, num_samples=1).squeeze(-1)
    cdf = paddle.cumsum(probs, axis=-1)
    below = (cdf < (uniform.astype(cdf.dtype) * cdf[:, -1]).unsqueeze(-1)).astype("int64").sum(axis=-1)
    return paddle.clip(below, max=logits.shape[-1] - 1)


class StaticKVCache:
    """Keys and values of every layer in buffers allocated once, [rows, kv_heads, capacity, head_dim]: a decode
    step writes its token's slot in place, so no tensor grows (or is copied) token by token and every step has
    the same shapes: the form a compiled step (``paddle.jit.to_static``, CUDA graphs) needs. It answers the
    two calls paddleformers' attention makes of a cache (``update``, ``get_seq_length``)."""

    def __init__(self, prompt: RepeatedPrompt, capacity: int):
        """From the prompt's keys and values (already repeated per completion), in the first slots."""
        self.length = prompt.get_seq_length()
        self.keys, self.values = [], []
        for buffers, filled_layers in ((self.keys, prompt.keys), (self.values, prompt.values)):
            for filled in filled_layers:
                shape = filled.shape
                buffer = paddle.zeros([shape[0], shape[1], capacity, shape[3]], dtype=filled.dtype)
                buffer[:, :, :self.length] = filled
                buffers.append(buffer)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.length

    def update(self, key: paddle.Tensor, value: paddle.Tensor, layer_idx: int):
        """Write this step's K/V at the next free slot; return the whole buffers (the mask hides empty slots)."""
        end = self.length + key.shape[2]
        self.keys[layer_idx][:, :, self.length:end] = key
        self.values[layer_idx][:, :, self.length:end] = value
        return self.keys[layer_idx], self.values[layer_idx]

    def advance(self, tokens: int = 1) -> None:
        self.length += tokens


def prefill(model, prompt: PromptBatch):
    """The prompts once (one row each; images through the vision tower once): their KV cache, next-token logits
    [B, vocab] and each row's next M-RoPE position [B]."""
    embeds = embed_inputs(model, prompt.input_ids, prompt.pixel_values, prompt.image_grid_thw)
    positions, next_position = rope_positions(model, prompt.input_ids, prompt.attention_mask, prompt.image_grid_thw)
    out = model(**embeds.model_inputs(), attention_mask=prompt.attention_mask, position_ids=positions,
                use_cache=True, logits_to_keep=1)
    return out.past_key_values, out.logits[:, -1], next_position


class LayerDecoder:
    """Any decoder (Qwen3-VL's included): the model's own layers, one token per row and step, over a
    ``StaticKVCache``; M-RoPE positions continue from each prompt's last."""

    def __init__(self, model, next_position: paddle.Tensor, steps: int):
        self.model, self.next_position = model, next_position

    def cache(self, prompt: RepeatedPrompt, capacity: int) -> StaticKVCache:
        return StaticKVCache(prompt, capacity)

    def step(self, token: paddle.Tensor, index: int, cache: StaticKVCache, additive_mask: paddle.Tensor
             ) -> paddle.Tensor:
        """Next-token logits [rows, vocab] for ``token`` [rows], the ``index``-th completion token; additive_mask
        [rows, 1, 1, capacity] is 0 where a row may attend (this token's slot included), -inf elsewhere."""
        text = self.model.model.language_model
        hidden = text.embed_tokens(token.unsqueeze(-1))
        position_embeddings = text.rotary_emb(hidden, text_positions(self.next_position + index, 1))
        for layer in text.layers:
            hidden = layer(hidden, attention_mask=additive_mask, position_embeddings=position_embeddings,
                           past_key_values=cache, use_cache=True)[0]
        return self.model.lm_head(text.norm(hidden))[:, -1]


def make_decoder(model, next_position: paddle.Tensor, steps: int):
    """The one-token step for ``model``: plain tensor operations where the decoder is one ``decoder.py`` knows
    (Qwen2/2.5-VL), else the model's own layers."""
    return (OneTokenDecoder if supports(model) else LayerDecoder)(model, next_position, steps)


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
        rows, prompt_len = prompt_mask.shape
        decoder = make_decoder(model, next_position, params.max_new_tokens)
        cache = decoder.cache(RepeatedPrompt(cache, num_generations), prompt_len + params.max_new_tokens)
        # additive mask over the whole cache: the prompt's padding and the slots not yet written are -inf
        allowed = paddle.concat([prompt_mask.astype("bool"), paddle.zeros([rows, params.max_new_tokens], "bool")], 1)
        additive_mask = paddle.where(allowed, 0.0, float("-inf")).astype(logits.dtype).reshape([rows, 1, 1, -1])
        eos = paddle.to_tensor(list(eos_token_ids), dtype="int64")
        finished = paddle.zeros([rows], dtype="bool")
        tokens = []
        for step in range(params.max_new_tokens):
            uniform = None if uniforms is None else uniforms[:, step]
            token = pick_next_token(logits, params, uniform).astype("int64")
            token = paddle.where(finished, paddle.full_like(token, pad_token_id), token)
            tokens.append(token)
            finished = finished | paddle.isin(token, eos)
            last = step == params.max_new_tokens - 1
            if last or ((step + 1) % eos_check_every == 0 and bool(finished.all())):
                break
            additive_mask[:, :, :, prompt_len + step] = 0.0
            logits = decoder.step(token, step, cache, additive_mask)
            cache.advance()
    finally:
        model.train(was_training)

    completion_ids = paddle.stack(tokens, axis=1)
    completion_mask = completion_mask_from_ids(completion_ids, eos)
    ended = int(completion_mask.sum(axis=1).max())  # the step at which the last row ended
    return Rollout(prompt=prompt, num_generations=num_generations, completion_ids=completion_ids[:, :ended],
                   completion_mask=completion_mask[:, :ended], truncated=~finished)


def completion_mask_from_ids(completion_ids: paddle.Tensor, eos: paddle.Tensor) -> paddle.Tensor:
    """1 for every token up to and including the first EOS of each row, 0 after it."""
    is_eos = paddle.isin(completion_ids, eos).astype("int64")
    eos_before = paddle.cumsum(is_eos, axis=1) - is_eos  # EOS tokens strictly before each position
    return (eos_before == 0).astype("int32")
