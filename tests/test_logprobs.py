import numpy as np
import pytest
import paddle

from paddle_r1.algorithms.logprobs import chunked_token_logprobs, completion_logprobs, span
from paddle_r1.generation.generator import build_prompt_batch
from paddle_r1.generation.rollout import Rollout, SamplingParams, sample_completions


@pytest.mark.parametrize("chunk_size", [4, 64])  # recomputed chunks; one chunk (no recompute)
def test_chunked_equals_full_log_softmax_with_gradients(chunk_size):
    """Values and gradients against the same log-softmax in float64; the last row's logits spread over hundreds:
    targets with log-probs far below -64, where Paddle's ``log_softmax`` and ``cross_entropy`` clamp."""
    paddle.seed(0)
    head = paddle.nn.Linear(16, 50, bias_attr=False)
    hidden = paddle.randn([3, 7, 16]) * paddle.to_tensor([1.0, 1.0, 300.0]).reshape([3, 1, 1])
    hidden.stop_gradient = False
    targets = paddle.randint(0, 50, [3, 7])
    weights = np.arange(21, dtype="float32").reshape([3, 7])
    chunked = chunked_token_logprobs(head, hidden, targets, chunk_size=chunk_size, temperature=0.7)
    (chunked * paddle.to_tensor(weights)).sum().backward()

    h, w = hidden.numpy().astype("float64"), head.weight.numpy().astype("float64")  # weight: [in, out]
    logits = h @ w / 0.7
    log_probs = logits - logits.max(-1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
    onehot = np.eye(50)[targets.numpy()]
    d_logits = weights[..., None] * (onehot - np.exp(log_probs)) / 0.7
    expected = (log_probs * onehot).sum(-1)
    assert expected.min() < -100
    np.testing.assert_allclose(chunked.numpy(), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(hidden.grad.numpy(), d_logits @ w.T, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(head.weight.grad.numpy(), np.einsum("bti,btj->ij", h, d_logits), rtol=1e-4, atol=1e-3)


def test_entropy_by_hand():
    """Logits that are the hidden states themselves, temperature 0.5: [0, ln 3] / 0.5 -> p = (1/4, 3/4),
    H = -(1/4 ln 1/4 + 3/4 ln 3/4) = 0.5623; equal logits -> ln 2; one logit 100 above the other -> 0."""
    hidden = paddle.to_tensor([[0.0, 0.5 * np.log(3.0)], [1.0, 1.0], [0.0, 50.0]])
    logp, entropy = chunked_token_logprobs(lambda h: h, hidden, paddle.to_tensor([1, 0, 1]), chunk_size=2,
                                           temperature=0.5, with_entropy=True)
    np.testing.assert_allclose(entropy.numpy(), [-(0.25 * np.log(0.25) + 0.75 * np.log(0.75)), np.log(2.0), 0.0],
                               rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(logp.numpy(), [np.log(0.75), np.log(0.5), 0.0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("chunk_size", [4, 64])  # recomputed chunks; one chunk (no recompute)
def test_entropy_from_the_log_prob_chunks(chunk_size):
    """Each position's entropy of softmax(logits / T) against numpy's -sum p log p in float64 (rows flat, spread
    and peaked); asking for it leaves the log-probs and their gradients exactly as they were, and it carries no
    gradient itself."""
    paddle.seed(1)
    head = paddle.nn.Linear(16, 50, bias_attr=False)
    hidden = paddle.randn([3, 7, 16]) * paddle.to_tensor([0.05, 1.0, 30.0]).reshape([3, 1, 1])
    hidden.stop_gradient = False
    targets = paddle.randint(0, 50, [3, 7])
    weights = paddle.to_tensor(np.arange(21, dtype="float32").reshape([3, 7]))

    def run(with_entropy):
        head.clear_gradients()
        hidden.clear_gradient()
        out = chunked_token_logprobs(head, hidden, targets, chunk_size=chunk_size, temperature=0.7,
                                     with_entropy=with_entropy)
        ((out[0] if with_entropy else out) * weights).sum().backward()
        return out, hidden.grad.numpy().copy(), head.weight.grad.numpy().copy()

    (logp, entropy), hidden_grad, weight_grad = run(True)
    plain, plain_hidden_grad, plain_weight_grad = run(False)
    assert entropy.stop_gradient and entropy.shape == targets.shape
    np.testing.assert_array_equal(logp.numpy(), plain.numpy())
    np.testing.assert_array_equal(hidden_grad, plain_hidden_grad)
    np.testing.assert_array_equal(weight_grad, plain_weight_grad)

    logits = hidden.numpy().astype("float64") @ head.weight.numpy().astype("float64") / 0.7
    log_p = logits - logits.max(-1, keepdims=True)
    log_p -= np.log(np.exp(log_p).sum(-1, keepdims=True))
    expected = -(np.exp(log_p) * log_p).sum(-1)
    assert expected[0].min() > 0.99 * np.log(50) and expected[2].max() < 1.0  # nearly flat rows; peaked rows
    np.testing.assert_allclose(entropy.numpy(), expected, rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("chunk_size", [4, 64])  # recomputed chunks; one chunk (no recompute)
def test_the_entropys_gradient_equals_autograd_of_its_definition(chunk_size):
    """``entropy_gradient`` (the entropy bonus, ``entropy_coef``): the gradient of a loss mixing log-probs and
    entropies, through the one-kernel log-softmax, against Paddle's autograd through log_softmax and
    -sum exp(lp) lp written out, at temperature 0.7; rows flat, spread and peaked."""
    paddle.seed(2)
    head = paddle.nn.Linear(16, 50, bias_attr=False)
    hidden = paddle.randn([3, 7, 16]) * paddle.to_tensor([0.05, 1.0, 3.0]).reshape([3, 1, 1])
    hidden.stop_gradient = False
    targets = paddle.randint(0, 50, [3, 7])
    rng = np.random.default_rng(0)
    w, v = (paddle.to_tensor(rng.normal(size=(3, 7)).astype("float32")) for _ in range(2))
    logp, entropy = chunked_token_logprobs(head, hidden, targets, chunk_size=chunk_size, temperature=0.7,
                                           with_entropy=True, entropy_gradient=True)
    assert not entropy.stop_gradient
    ((logp * w).sum() + (entropy * v).sum()).backward()
    got = hidden.grad.numpy().copy()
    hidden.clear_gradient()
    log_p = paddle.nn.functional.log_softmax(head(hidden) / 0.7, axis=-1)
    picked = paddle.take_along_axis(log_p, targets.unsqueeze(-1), axis=-1).squeeze(-1)
    ((picked * w).sum() - ((paddle.exp(log_p) * log_p).sum(-1) * v).sum()).backward()
    np.testing.assert_allclose(got, hidden.grad.numpy(), rtol=1e-4, atol=1e-6)


@paddle.no_grad()
def test_completion_logprobs_match_the_models_own_forward(tiny, rec_samples):
    model, processor = tiny
    prompt, _ = build_prompt_batch(rec_samples[:2], processor, "{Question}")
    eos = [processor.tokenizer.eos_token_id]
    paddle.seed(3)
    rollout = sample_completions(model, prompt, 2, SamplingParams(6, temperature=1.0), eos,
                                 processor.tokenizer.pad_token_id)
    got = completion_logprobs(model, rollout, chunk_size=5, temperature=1.0).numpy()
    expected = _per_row_logprobs(model, rollout).numpy()
    mask = rollout.completion_mask.numpy().astype(bool)
    np.testing.assert_allclose(got[mask], expected[mask], rtol=1e-4, atol=1e-5)


def _per_row_logprobs(model, rollout):
    """Each completion after its own copy of its prompt, through the model's own forward (the reference)."""
    prompt, g = rollout.prompt, rollout.num_generations
    rows = []
    for row in range(rollout.completion_ids.shape[0]):
        p = row // g
        ids = paddle.concat([prompt.input_ids[p:p + 1], rollout.completion_ids[row:row + 1]], axis=1)
        mask = paddle.concat([prompt.attention_mask[p:p + 1],
                              paddle.ones([1, rollout.completion_ids.shape[1]], dtype="int64")], axis=1)
        grid = prompt.image_grid_thw[p:p + 1]
        patches = int(prompt.image_grid_thw[:p].prod(axis=1).sum()) if p else 0
        pixels = prompt.pixel_values[patches:patches + int(grid.prod())]
        model.model.rope_deltas = None
        logits = model(input_ids=ids, attention_mask=mask, pixel_values=pixels, image_grid_thw=grid,
                       use_cache=False).logits
        logp = paddle.nn.functional.log_softmax(logits[0, prompt.input_ids.shape[1] - 1:-1], axis=-1)
        rows.append(paddle.take_along_axis(logp, rollout.completion_ids[row].unsqueeze(-1), axis=-1).squeeze(-1))
    return paddle.stack(rows)


def _gradients(model, logprobs_fn, weights):
    (logprobs_fn() * weights).sum().backward()
    grads = {name: p.grad.numpy().copy() for name, p in model.named_parameters() if p.grad is not None}
    model.clear_gradients()
    return grads


@pytest.mark.parametrize("recompute", [False, True])
def test_completion_logprobs_gradients_equal_each_row_run_whole(tiny_model_dir, rec_samples, recompute):
    """The prompt shared by its G completions (its K/V repeated) gives every parameter the gradient of running
    each completion after its own copy of the prompt; so does the whole-row path taken under gradient
    checkpointing. Rows of different lengths (left padding) and an image per prompt."""
    from paddle_r1.models.loading import load_model, load_processor

    model, processor = load_model(tiny_model_dir, gradient_checkpointing=recompute), load_processor(tiny_model_dir)
    prompt, _ = build_prompt_batch(rec_samples[:2], processor, "{Question}")
    paddle.seed(4)
    rollout = sample_completions(model, prompt, 3, SamplingParams(5, temperature=1.0),
                                 [processor.tokenizer.eos_token_id], processor.tokenizer.pad_token_id)
    weights = paddle.to_tensor(np.random.default_rng(0).normal(size=rollout.completion_ids.shape).astype("float32"))
    expected = _gradients(model, lambda: _per_row_logprobs(model, rollout), weights)
    got = _gradients(model, lambda: completion_logprobs(model, rollout, chunk_size=4, temperature=1.0), weights)
    assert got.keys() == expected.keys() and any("visual" in name for name in got)
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-3, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("recompute", [False, True])
def test_long_completions_attend_in_blocks_with_each_row_runs_gradients(tiny_model_dir, rec_samples, recompute,
                                                                        monkeypatch):
    """Completions of 2 x QUERY_BLOCK tokens and more take the blocked attention (``BlockedAttention``, whose backward
    computes the probabilities again) over the shared prompt's repeated K/V, and under gradient checkpointing over
    whole rows recomputed in the backward: every parameter's gradient is the one of each row run whole through the
    model's own forward with the whole square's attention, differentiated by autograd (short rows never reach the
    blocks: the test above)."""
    from paddle_r1.models import text_attention
    from paddle_r1.models.loading import load_model, load_processor
    from paddle_r1.models.query_blocks import QUERY_BLOCK, in_blocks

    model, processor = load_model(tiny_model_dir, gradient_checkpointing=recompute), load_processor(tiny_model_dir)
    prompt, _ = build_prompt_batch(rec_samples[:1], processor, "{Question}")
    rng = np.random.default_rng(1)
    shape = [2, 2 * QUERY_BLOCK + 3]  # 2 completions, no EOS; plain text tokens (the tiny vocabulary's specials < 20)
    assert in_blocks(shape[1])
    rollout = Rollout(prompt, 2, paddle.to_tensor(rng.integers(20, 500, shape)), paddle.ones(shape, "int32"),
                      paddle.ones([2], "bool"))
    weights = paddle.to_tensor(rng.normal(size=shape).astype("float32"))
    with monkeypatch.context() as whole_square:
        whole_square.setattr(text_attention, "in_blocks", lambda queries: False)
        expected = _gradients(model, lambda: _per_row_logprobs(model, rollout), weights)
    got = _gradients(model, lambda: completion_logprobs(model, rollout, chunk_size=256, temperature=1.0), weights)
    assert got.keys() == expected.keys()
    for name in expected:  # sums over a thousand tokens: float32 rounding of 1e-5 where they nearly cancel
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-3, atol=2e-5, err_msg=name)


def test_span_is_the_slice_with_its_gradient():
    """``span`` (a split, whose gradient is cheap on CPU) takes exactly what the slice takes, empty and whole spans
    included (a 1-token completion drops its only state), and passes the same gradient back."""
    x = paddle.arange(2 * 5 * 3, dtype="float32").reshape([2, 5, 3])
    for start, stop in [(0, 4), (4, 5), (1, 3), (0, 5), (2, 2), (0, 0), (5, 5)]:
        taken, sliced = x.detach(), x.detach()
        taken.stop_gradient = sliced.stop_gradient = False
        np.testing.assert_array_equal(span(taken, start, stop).numpy(), sliced[:, start:stop].numpy())
        if stop > start:
            (span(taken, start, stop) * 2).sum().backward()
            (sliced[:, start:stop] * 2).sum().backward()
            np.testing.assert_array_equal(taken.grad.numpy(), sliced.grad.numpy())
