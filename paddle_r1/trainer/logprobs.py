"""Per-token log-probs of completion tokens, computed without a full [N, T, vocab] log-softmax.

The decoder runs once over prompt + completion; the LM head and log-softmax then run on chunks of
at most ``chunk_size`` completion positions. With gradients on, each chunk is recomputed in the
backward pass, so only one chunk's logits exist at a time in either direction.
"""
from __future__ import annotations

import paddle
from paddle.distributed.fleet.utils import recompute

from ..models.forward import embed_inputs, repeat_rows, rope_positions, text_positions
from ..generation.rollout import Rollout


def _token_logprobs(lm_head, hidden: paddle.Tensor, targets: paddle.Tensor, temperature: float) -> paddle.Tensor:
    logits = lm_head(hidden).astype("float32")
    if temperature > 0:
        logits = logits / temperature
    target_logits = paddle.take_along_axis(logits, targets.unsqueeze(-1), axis=-1).squeeze(-1)
    return target_logits - paddle.logsumexp(logits, axis=-1)


def chunked_token_logprobs(lm_head, hidden: paddle.Tensor, targets: paddle.Tensor, chunk_size: int,
                           temperature: float = 1.0) -> paddle.Tensor:
    """log softmax(lm_head(hidden) / temperature)[targets], shape of ``targets``, ``chunk_size`` rows at a time."""
    shape = targets.shape
    flat_hidden = hidden.reshape([-1, hidden.shape[-1]])
    flat_targets = targets.reshape([-1])
    use_recompute = not flat_hidden.stop_gradient
    pieces = []
    for start in range(0, flat_targets.shape[0], chunk_size):
        h = flat_hidden[start:start + chunk_size]
        t = flat_targets[start:start + chunk_size]
        if use_recompute:
            pieces.append(recompute(_token_logprobs, lm_head, h, t, temperature, use_reentrant=False))
        else:
            pieces.append(_token_logprobs(lm_head, h, t, temperature))
    return paddle.concat(pieces).reshape(shape)


def completion_logprobs(model, rollout: Rollout, chunk_size: int, temperature: float = 1.0) -> paddle.Tensor:
    """[B*G, T] log-probs of ``rollout.completion_ids`` under ``model`` (grad flows if enabled)."""
    prompt, g = rollout.prompt, rollout.num_generations
    prompt_embeds = embed_inputs(model, prompt.input_ids, prompt.pixel_values, prompt.image_grid_thw)
    positions, next_position = rope_positions(model, prompt.input_ids, prompt.attention_mask, prompt.image_grid_thw)
    completion_len = rollout.completion_ids.shape[1]
    completion_embeds = model.model.get_input_embeddings()(rollout.completion_ids)
    embeds = paddle.concat([repeat_rows(prompt_embeds, g), completion_embeds.astype(prompt_embeds.dtype)], axis=1)
    positions = paddle.concat([repeat_rows(positions, g, axis=1),
                               text_positions(repeat_rows(next_position, g), completion_len)], axis=2)
    prompt_mask = repeat_rows(prompt.attention_mask, g)
    attention_mask = paddle.concat([prompt_mask, paddle.ones_like(rollout.completion_ids, dtype=prompt_mask.dtype)], axis=1)
    hidden = model.model(inputs_embeds=embeds, attention_mask=attention_mask, position_ids=positions,
                         use_cache=False, return_dict=True).last_hidden_state
    prompt_len = prompt.input_ids.shape[1]
    # the state at position i predicts token i + 1
    hidden = hidden[:, prompt_len - 1: prompt_len - 1 + completion_len]
    return chunked_token_logprobs(model.lm_head, hidden, rollout.completion_ids, chunk_size, temperature)
