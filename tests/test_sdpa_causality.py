"""Under ``attn_implementation: sdpa`` every family computes eager attention's numbers: logits, log-probs and
gradients, for one prompt, several unpadded prompts and a padded batch, after a KV cache and under gradient
checkpointing (``models/causal_mask.py``).

On CPU sdpa runs Paddle's math kernel, which aligns ``is_causal`` top-left as the GPU's memory-efficient kernel
does: without the bottom-right mask the unpadded cases below (the queries after a prompt's cache) differ from
eager by 0.2-0.45 nats in log-probs.
"""
import numpy as np
import paddle
import pytest

from paddle_r1.generation.decoder import LayerDecoder
from paddle_r1.generation.generator import build_prompt_batch
from paddle_r1.generation.rollout import SamplingParams, prefill, sample_completions
from paddle_r1.models.causal_mask import sdpa_causality
from paddle_r1.models.forward import RepeatedPrompt, recomputes_layers, repeat_rows, text_decoder, text_positions
from paddle_r1.models.loading import load_model, load_processor
from paddle_r1.models.families import FAMILIES
from paddle_r1.testing.tiny import make_tiny_model
from paddle_r1.algorithms.logprobs import completion_logprobs

GENERATIONS, TOKENS = 2, 5
EQUAL = dict(atol=1e-5, rtol=0)
GRADIENTS = dict(atol=1e-6, rtol=1e-4)  # float32 sums over different orders in the two kernels


@pytest.fixture(scope="module", params=tuple(FAMILIES))
def family(request, tmp_path_factory):
    """(folder, processor, {"eager": model, "sdpa": model}) of one family's tiny checkpoint."""
    folder = make_tiny_model(str(tmp_path_factory.mktemp("sdpa") / request.param), request.param)
    models = {name: load_model(folder, attn_implementation=name) for name in ("eager", "sdpa")}
    return folder, load_processor(folder), models


def _prompts(samples, processor, kind: str):
    """``one``: a prompt with its image, alone; ``several``: two text-only prompts of one length (no padding: the
    log-prob pass shares each prompt's cache in every family); ``padded``: two prompts with images, left-padded."""
    if kind == "one":
        batch = samples[:1]
    elif kind == "several":
        batch = [dict(samples[0], images=[], problem=f"Locate the {colour} circle in the image.")
                 for colour in ("red", "blue")]  # one token count in every family's tokenizer
    else:
        batch = [samples[0], dict(samples[1], problem=samples[1]["problem"] + " and say why, in a few words")]
    prompt, _ = build_prompt_batch(batch, processor, "{Question}")
    assert bool((prompt.attention_mask == 0).any()) == (kind == "padded")
    return prompt


def _rollout(model, prompt):
    return sample_completions(model, prompt, GENERATIONS, SamplingParams(TOKENS, temperature=0.0), [-1], 0)


def _logits_after_the_prompt(model, rollout):
    """The prompt's last logits (its own forward), then every completion position's from the model's forward over the
    prompt's KV cache with an all-ones mask (what paddleformers dropped under sdpa)."""
    prompt, completion = rollout.prompt, rollout.completion_ids
    with paddle.no_grad():
        cache, first, next_position = prefill(model, prompt)
        mask = paddle.concat([repeat_rows(prompt.attention_mask, GENERATIONS),
                              paddle.ones_like(completion, dtype=prompt.attention_mask.dtype)], axis=1)
        out = model(inputs_embeds=text_decoder(model).embed_tokens(completion), attention_mask=mask,
                    position_ids=text_positions(repeat_rows(next_position, GENERATIONS), completion.shape[1]),
                    past_key_values=RepeatedPrompt(cache, GENERATIONS), use_cache=True)
    return first.numpy(), out.logits.numpy()


def _logprobs_and_gradients(model, rollout):
    model.clear_gradients()
    logprobs = completion_logprobs(model, rollout, chunk_size=64)
    (logprobs * rollout.completion_mask.astype(logprobs.dtype)).sum().backward()
    return logprobs.numpy(), {name: p.grad.numpy() for name, p in model.named_parameters() if p.grad is not None}


def _assert_gradients_equal(got: dict, want: dict):
    assert got.keys() == want.keys()
    for name, grad in want.items():
        np.testing.assert_allclose(got[name], grad, err_msg=name, **GRADIENTS)


@pytest.mark.parametrize("kind", ["one", "several", "padded"])
def test_sdpa_gives_eager_logits_logprobs_and_gradients(family, rec_samples, kind):
    _, processor, models = family
    prompt = _prompts(rec_samples, processor, kind)
    rollout = _rollout(models["eager"], prompt)
    got, want = (_logits_after_the_prompt(models[name], rollout) for name in ("sdpa", "eager"))
    for got_logits, want_logits in zip(got, want):
        np.testing.assert_allclose(got_logits, want_logits, **EQUAL)
    (got_logprobs, got_grads), (want_logprobs, want_grads) = (_logprobs_and_gradients(models[name], rollout)
                                                              for name in ("sdpa", "eager"))
    np.testing.assert_allclose(got_logprobs, want_logprobs, **EQUAL)
    _assert_gradients_equal(got_grads, want_grads)


def test_the_rollouts_layer_decode_steps_give_eager_logits(family, rec_samples):
    """The rollout's ``LayerDecoder`` (the model's own layers, one token over the prompt's cache and its mask) on the
    same tokens: next-token logits of every step; and the rollouts, decoded greedily, are the same tokens."""
    _, processor, models = family
    prompt = _prompts(rec_samples, processor, "one")
    tokens = paddle.to_tensor(np.random.default_rng(0).integers(0, 100, [GENERATIONS, TOKENS]))
    steps = {}
    with paddle.no_grad():
        for name, model in models.items():
            cache, _, next_position = prefill(model, prompt)
            decoder = LayerDecoder(model, RepeatedPrompt(cache, GENERATIONS), repeat_rows(prompt.attention_mask,
                                   GENERATIONS), repeat_rows(next_position, GENERATIONS), TOKENS)
            steps[name] = [decoder.step(tokens[:, i]).numpy() for i in range(TOKENS)]
    np.testing.assert_allclose(np.stack(steps["sdpa"]), np.stack(steps["eager"]), **EQUAL)
    assert (_rollout(models["sdpa"], prompt).completion_ids == _rollout(models["eager"], prompt).completion_ids).all()


def test_gradient_checkpointing_under_sdpa_gives_eagers_logprobs_and_gradients(family, rec_samples):
    folder, processor, models = family
    recomputed = load_model(folder, attn_implementation="sdpa", gradient_checkpointing=True)
    assert recomputes_layers(text_decoder(recomputed).config)
    recomputed.train()
    rollout = _rollout(models["eager"], _prompts(rec_samples, processor, "one"))
    (got_logprobs, got_grads), (want_logprobs, want_grads) = (_logprobs_and_gradients(model, rollout)
                                                              for model in (recomputed, models["eager"]))
    np.testing.assert_allclose(got_logprobs, want_logprobs, **EQUAL)
    _assert_gradients_equal(got_grads, want_grads)


@pytest.mark.parametrize("queries, keys, mask, causal", [
    (6, 6, None, True),       # a prompt's own forward: is_causal alone, so flash attention may run on a GPU
    (1, 9, None, False),      # one decode step sees every key
    (3, 7, "built", False),   # queries after a cache: bottom-right
    (3, 7, "given", False),   # paddleformers' mask (padding, causality) goes as it is
])
def test_sdpa_causality_hands_sdpa_a_mask_only_where_is_causal_is_wrong(queries, keys, mask, causal):
    given = paddle.zeros([2, 1, queries, keys], dtype="float16") if mask == "given" else None
    got, is_causal = sdpa_causality(given, queries, keys, "float16")
    assert is_causal is causal
    if mask is None:
        assert got is None
    elif mask == "given":
        assert got is given
    else:
        assert got.dtype == paddle.float16 and got.shape == [1, 1, queries, keys]
        seen = np.isfinite(got.astype("float32").numpy()[0, 0])
        np.testing.assert_array_equal(seen, np.tril(np.ones([queries, keys], bool), keys - queries))
