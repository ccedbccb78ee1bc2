"""Per-token log-probs of the completions under a model (the policy, the reference, the old policy), and the policy's
entropies, without a full [N, T, vocab] log-softmax.

The decoder runs once over prompt + completion (a prompt's keys and values shared by its G completions:
``models.forward.RepeatedPrompt``); the LM head and log-softmax then run on chunks of at most ``chunk_size``
completion positions. With gradients on and more than one chunk, each chunk is recomputed in the backward pass, so
only one chunk's logits exist at a time in either direction. The recompute is Paddle's reentrant one: the
non-reentrant one (``use_reentrant=False``) keeps every chunk's recomputed logits until the whole backward ends, so
its peak grows with the total tokens (``benchmarks/logprob_memory.py`` measures the peak per chunk size). The
entropy at each completion position (the ``entropy`` metric) is read from the same chunk's softmax.
"""
from __future__ import annotations

import dataclasses

import paddle
from paddle.autograd import PyLayer
from paddle.distributed.fleet.utils import recompute

from ..generation.conversation import ConversationBatch
from ..generation.rollout import Rollout
from ..models.forward import (RepeatedPrompt, recomputes_layers, repeat_rows, text_decoder, text_positions)
from ..models.sums import row_sums


class _TargetLogSoftmax(PyLayer):
    """log softmax(logits)[target] for each row of [N, V] float32 logits; gradient g * (onehot(target) - softmax).
    One softmax kernel serves both directions; the log-sum-exp is read back from the softmax at each row's largest
    logit (a probability >= 1/V there, so it never underflows: no clamp as in ``cross_entropy``, which stops at
    -64), both read at the argmax; targets are picked by flat index (``take_along_axis`` cost as much as the softmax
    here on CPU).

    ``entropy`` "none": the log-probs alone. "metric": also each row's entropy H = -sum_v p_v log p_v = log-sum-exp
    - sum_v p_v z_v, from the same softmax (p * z summed per row by ``row_sums``: one [N, V] temporary), as a second
    output without gradient (``mark_non_differentiable``; ``backward`` ignores the zeros it receives for it).
    "gradient": the same entropy with its gradient dH/dz_v = -p_v (z_v - sum_u p_u z_u) (``entropy_coef``'s bonus),
    for which the logits are kept until the backward. Rounding can leave a peaked row's entropy a hair below 0; it
    is clipped there. The float32 dot product over the vocabulary is within ~2e-3 of float64 at vocab 151,936 with
    logits up to ~30 (exact to ~1e-5 at small vocabularies)."""

    @staticmethod
    def forward(ctx, logits, targets, entropy="none"):
        probs = paddle.nn.functional.softmax(logits, axis=-1)
        offsets = paddle.arange(logits.shape[0], dtype=targets.dtype) * logits.shape[1]
        top = offsets + logits.argmax(axis=-1)
        flat_logits = logits.reshape([-1])
        log_normalizer = paddle.gather(flat_logits, top) - paddle.log(paddle.gather(probs.reshape([-1]), top))
        picked = offsets + targets
        logp = paddle.gather(flat_logits, picked) - log_normalizer
        if entropy == "none":
            ctx.save_for_backward(probs, picked)
            return logp
        expected_logit = row_sums(probs * logits)
        row_entropy = (log_normalizer - expected_logit).clip(min=0.0)
        if entropy == "gradient":
            ctx.save_for_backward(probs, picked, logits, expected_logit)
        else:
            ctx.save_for_backward(probs, picked)
            ctx.mark_non_differentiable(row_entropy)
        return logp, row_entropy

    @staticmethod
    def backward(ctx, grad, *entropy_grad):
        probs, picked, *for_entropy = ctx.saved_tensor()
        flat = probs * -grad.unsqueeze(-1)
        if for_entropy and entropy_grad[0] is not None:
            logits, expected_logit = for_entropy
            flat = flat - probs * (logits - expected_logit.unsqueeze(-1)) * entropy_grad[0].unsqueeze(-1)
        flat = flat.reshape([-1])
        paddle.scatter_(flat, picked, paddle.gather(flat, picked) + grad)
        return flat.reshape(probs.shape), None


def span(x: paddle.Tensor, start: int, stop: int, axis: int = 1) -> paddle.Tensor:
    """x's positions start to stop along ``axis``, as a ``split`` (its gradient one concatenation): a slice's
    gradient on CPU fills a zero tensor of x's size per call: 7.78 ms against 0.56 forward and backward at
    [16, 104, 256] (``benchmarks/experiments/written_gradients.py``)."""
    length = x.shape[axis]
    if stop == start:
        return paddle.slice(x, [axis], [start], [stop])  # empty: a split takes no empty section
    if stop - start == length:
        return x
    sections = [size for size in (start, stop - start, length - stop) if size > 0]
    return paddle.split(x, sections, axis=axis)[1 if start > 0 else 0]


def _token_logprobs(lm_head, hidden: paddle.Tensor, targets: paddle.Tensor, temperature: float,
                    entropy: str = "none"):
    logits = lm_head(hidden).astype("float32")
    if temperature > 0 and temperature != 1:
        logits = logits / temperature
    return _TargetLogSoftmax.apply(logits, targets, entropy)


def chunked_token_logprobs(lm_head, hidden: paddle.Tensor, targets: paddle.Tensor, chunk_size: int,
                           temperature: float = 1.0, with_entropy: bool = False, entropy_gradient: bool = False):
    """log softmax(lm_head(hidden) / temperature)[targets], shape of ``targets``, ``chunk_size`` rows at a time.
    When one chunk holds every row there is no memory to bound: no slicing and no recompute.

    ``with_entropy``: (log-probs, entropies), the entropy of softmax(lm_head(hidden) / temperature) at every
    position, from the same pass over each chunk (recomputed chunks compute it again in the backward, one dot
    product per row); the entropies carry no gradient unless ``entropy_gradient`` (the entropy bonus)."""
    entropy = ("gradient" if entropy_gradient else "metric") if with_entropy else "none"
    shape = targets.shape
    flat_hidden = hidden.reshape([-1, hidden.shape[-1]])
    flat_targets = targets.reshape([-1])
    if flat_targets.shape[0] <= chunk_size:
        pieces = [_token_logprobs(lm_head, flat_hidden, flat_targets, temperature, entropy)]
    else:
        use_recompute = not flat_hidden.stop_gradient
        pieces = []
        rows = flat_targets.shape[0]
        sizes = [min(chunk_size, rows - start) for start in range(0, rows, chunk_size)]
        for h, t in zip(paddle.split(flat_hidden, sizes), paddle.split(flat_targets, sizes)):
            if use_recompute:
                pieces.append(recompute(_token_logprobs, lm_head, h, t, temperature, entropy, use_reentrant=True))
            else:
                pieces.append(_token_logprobs(lm_head, h, t, temperature, entropy))
    if not with_entropy:
        return _joined(pieces, shape)
    entropies = _joined([p[1] for p in pieces], shape)
    return _joined([p[0] for p in pieces], shape), entropies if entropy_gradient else entropies.detach()


def _joined(pieces: list, shape) -> paddle.Tensor:
    return (pieces[0] if len(pieces) == 1 else paddle.concat(pieces)).reshape(shape)


def completion_logprobs(model, rollout: Rollout, chunk_size: int, temperature: float = 1.0,
                        with_entropy: bool = False, entropy_gradient: bool = False):
    """[B*G, T] log-probs of ``rollout.completion_ids`` under ``model`` (grad flows if enabled); with
    ``with_entropy`` (log-probs, [B*G, T] entropies of the policy at each completion position, without gradient
    unless ``entropy_gradient``).

    The prompt goes through the decoder once per prompt and its K/V are repeated for its G completions
    (``RepeatedPrompt``). Each row runs whole instead under gradient checkpointing (a recomputed layer's K/V are
    made without gradient, so a shared prompt would get none from the completions) and for Qwen3-VL (its DeepStack
    features enter through the full model's forward)."""
    if rollout.multi_turn:
        hidden = _episode_rows_hidden(model, rollout)
    else:
        inputs = _completion_inputs(model, rollout)
        shared = inputs[0].deepstack is None and not recomputes_layers(text_decoder(model).config)
        hidden = (_shared_prompt_hidden if shared else _full_rows_hidden)(model, rollout, inputs)
    return chunked_token_logprobs(model.lm_head, hidden, rollout.completion_ids, chunk_size, temperature,
                                  with_entropy, entropy_gradient)


def _completion_inputs(model, rollout: Rollout):
    """The prompts' embeddings (images and clips once per prompt; ``InputEmbeddings``) and M-RoPE positions, the
    completions'
    embeddings and positions (continuing each prompt's), and the 2D mask over prompt + completion of every row."""
    prompt, g = rollout.prompt, rollout.num_generations
    prompt_embeds = prompt.embeddings(model)
    positions, next_position = prompt.positions(model)
    completion_embeds = text_decoder(model).embed_tokens(rollout.completion_ids).astype(prompt_embeds.embeds.dtype)
    completion_positions = text_positions(repeat_rows(next_position, g), rollout.completion_ids.shape[1])
    prompt_mask = repeat_rows(prompt.attention_mask, g)
    mask = paddle.concat([prompt_mask, paddle.ones_like(rollout.completion_ids, dtype=prompt_mask.dtype)], axis=1)
    return prompt_embeds, positions, completion_embeds, completion_positions, mask


def _shared_prompt_hidden(model, rollout: Rollout, inputs) -> paddle.Tensor:
    g, text = rollout.num_generations, text_decoder(model)
    prompt_embeds, positions, completion_embeds, completion_positions, mask = inputs
    prompt_out = text(inputs_embeds=prompt_embeds.embeds, attention_mask=rollout.prompt.attention_mask,
                      position_ids=positions, use_cache=True, return_dict=True)
    hidden = text(inputs_embeds=completion_embeds, attention_mask=mask, position_ids=completion_positions,
                  past_key_values=RepeatedPrompt(prompt_out.past_key_values, g), use_cache=True,
                  return_dict=True).last_hidden_state
    # the prompt's last state predicts the first completion token, completion state i the token i + 1
    last = prompt_out.last_hidden_state
    return paddle.concat([repeat_rows(span(last, last.shape[1] - 1, last.shape[1]), g),
                          span(hidden, 0, hidden.shape[1] - 1)], axis=1)


def _full_rows_hidden(model, rollout: Rollout, inputs) -> paddle.Tensor:
    g = rollout.num_generations
    prompt_embeds, positions, completion_embeds, completion_positions, mask = inputs
    embeds = prompt_embeds.repeat(g).append(completion_embeds)
    positions = paddle.concat([repeat_rows(positions, g, axis=1), completion_positions], axis=2)
    return _hidden_after_prompt(model, rollout, embeds, positions, mask)


def _episode_rows_hidden(model, rollout: Rollout) -> paddle.Tensor:
    """Each row of a multi-turn rollout whole: its prompt, then its episode (the model's turns and the tools'
    messages, right-padded), with the prompt's images and clips then the tools' (``Rollout.episode_media``), M-RoPE
    positions from the model's rope index over the whole row.

    The model's own tokens are text whatever they are, as the rollout fed them: a sampled image or vision-start
    token must not take an image's features or positions, so the embedding and the rope index see token 0 there
    and the model's tokens get their plain embeddings."""
    g = rollout.num_generations
    prompt_mask = repeat_rows(rollout.prompt.attention_mask, g)
    input_ids = paddle.concat([repeat_rows(rollout.prompt.input_ids, g), rollout.completion_ids], axis=1)
    own = paddle.concat([paddle.zeros_like(prompt_mask), rollout.completion_mask.astype(prompt_mask.dtype)],
                        axis=1).astype("bool")
    not_model_ids = paddle.where(own, paddle.zeros_like(input_ids), input_ids)
    mask = paddle.concat([prompt_mask, rollout.episode_mask.astype(prompt_mask.dtype)], axis=1)
    media = dataclasses.replace(rollout.episode_media, input_ids=not_model_ids, attention_mask=mask)
    embeds = media.embeddings(model)
    own_embeds = text_decoder(model).embed_tokens(input_ids).astype(embeds.embeds.dtype)
    embeds.embeds = paddle.where(own.unsqueeze(-1), own_embeds, embeds.embeds)
    positions, _ = media.positions(model)
    return _hidden_after_prompt(model, rollout, embeds, positions, mask)


def _hidden_after_prompt(model, rollout: Rollout, embeds, positions: paddle.Tensor, mask: paddle.Tensor
                         ) -> paddle.Tensor:
    """The decoder's states of whole rows (prompt + completion) at the places that predict the completion."""
    hidden = _decoder_states(model, embeds, positions, mask)
    prompt_len, completion_len = rollout.prompt.input_ids.shape[1], rollout.completion_ids.shape[1]
    # the state at position i predicts token i + 1
    return span(hidden, prompt_len - 1, prompt_len - 1 + completion_len)


def _decoder_states(model, embeds, positions: paddle.Tensor, mask: paddle.Tensor) -> paddle.Tensor:
    """The decoder's last hidden states [B, L, D] over whole rows (no cache)."""
    return model.model(**embeds.model_inputs(), attention_mask=mask, position_ids=positions, use_cache=False,
                       return_dict=True).last_hidden_state


def conversation_logprobs(model, batch, chunk_size: int, temperature: float = 1.0) -> paddle.Tensor:
    """[B, L - 1] log-probs of each token after the first of whole conversations (``conversation.ConversationBatch``:
    images and clips anywhere in a row, left padded), the state at position i predicting token i + 1; the caller masks
    which count. Each row runs whole: a conversation's images may follow the tokens trained on."""
    conversations = batch.prompt_batch
    embeds = conversations.embeddings(model)
    positions, _ = conversations.positions(model)
    hidden = _decoder_states(model, embeds, positions, batch.attention_mask)
    return chunked_token_logprobs(model.lm_head, span(hidden, 0, hidden.shape[1] - 1), batch.input_ids[:, 1:],
                                  chunk_size, temperature)


class PolicyLogprobs(paddle.nn.Layer):
    """The training forward as one layer, so a sharding wrapper around it sees every training forward."""

    def __init__(self, policy: paddle.nn.Layer):
        super().__init__()
        self.policy = policy

    def forward(self, rollout, chunk_size: int, temperature: float, with_entropy: bool = False,
                entropy_gradient: bool = False):
        """A ``Rollout``'s completion log-probs, or a ``ConversationBatch``'s (SFT on episodes) next-token ones."""
        if isinstance(rollout, ConversationBatch):
            return conversation_logprobs(self.policy, rollout, chunk_size, temperature)
        return completion_logprobs(self.policy, rollout, chunk_size, temperature, with_entropy, entropy_gradient)
