"""The rollout's repetition penalty and min-p (config keys ``repetition_penalty``, ``min_p``) against transformers
5.3: its logits processors on the same logits and seen tokens, and its greedy ``generate`` with a penalty on the parity
Qwen2.5-VL checkpoint. tests/fixtures/sampling_reference.npz comes from tests/fixtures/make_sampling_reference.py, run
in its own environment."""
import json
import os

import numpy as np
import paddle
import pytest

from paddle_r1.generation import rollout as rollout_module
from paddle_r1.generation.penalties import SeenTokens
from paddle_r1.generation.rollout import SamplingParams, pick_next_token, sample_completions, sampling_logits
from paddle_r1.models.loading import load_model
from test_parity import FIXTURES, _batch
from test_tool_rollouts import episodes_and_turn_two, run_episodes

REFERENCE = dict(np.load(os.path.join(os.path.dirname(__file__), "fixtures", "sampling_reference.npz")))
CASES = json.loads(str(REFERENCE["cases"]))


@pytest.mark.parametrize("index", range(len(CASES)), ids=lambda i: "-".join(f"{k}={v}" for k, v in CASES[i].items()))
def test_processed_logits_are_transformers(index):
    """The logits a token is drawn from (penalty, temperature, top-k, top-p, min-p in transformers' order) are
    transformers' processors' output: the same tokens removed, the same values on the others."""
    logits = paddle.to_tensor(REFERENCE[f"case{index}_logits"])
    ids = paddle.to_tensor(REFERENCE[f"case{index}_seen"])
    seen = SeenTokens.of(ids, paddle.ones(ids.shape, dtype="int32"), logits.shape[-1])
    got = sampling_logits(logits, SamplingParams(1, **CASES[index]), seen).numpy()
    want = REFERENCE[f"case{index}_processed"]
    kept = np.isfinite(want)
    np.testing.assert_array_equal(np.isfinite(got), kept)
    np.testing.assert_allclose(got[kept], want[kept], rtol=1e-6, atol=1e-6)
    tempered = REFERENCE[f"case{index}_logits"] / CASES[index].get("temperature", 1.0)
    assert not kept.all() or not np.allclose(got, tempered)  # the settings did more than the temperature


def test_seen_tokens_leave_out_the_padding_and_take_a_rows_later_tokens():
    ids = paddle.to_tensor([[0, 0, 5, 6], [7, 5, 5, 9]])
    mask = paddle.to_tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    seen = SeenTokens.of(ids, mask, 12)
    assert [np.flatnonzero(row).tolist() for row in seen.seen.numpy()] == [[5, 6], [5, 7, 9]]
    seen.add(paddle.to_tensor([[3], [11]]), paddle.to_tensor([[True], [False]]))  # row 1 has ended: its pad is not
    assert [np.flatnonzero(row).tolist() for row in seen.seen.numpy()] == [[3, 5, 6], [5, 7, 9]]
    picked = seen.select(paddle.to_tensor([1], dtype="int64"))
    assert np.flatnonzero(picked.seen.numpy()[0]).tolist() == [5, 7, 9]
    logits = paddle.to_tensor([[2.0] * 12, [-2.0] * 12])
    penalized = seen.penalize(logits, 2.0).numpy()
    assert penalized[0, 5] == 1.0 and penalized[0, 4] == 2.0 and penalized[1, 7] == -4.0 and penalized[1, 8] == -2.0


def test_min_p_sampling_frequencies():
    """min_p 0.35 over probabilities 0.5, 0.3, 0.15, 0.05 keeps the tokens with p >= 0.175, renormalised."""
    paddle.seed(0)
    batch = paddle.to_tensor(np.repeat(np.log([[0.5, 0.3, 0.15, 0.05]]).astype("float32"), 4000, axis=0))
    picks = pick_next_token(batch, SamplingParams(1, temperature=1.0, min_p=0.35)).numpy()
    np.testing.assert_allclose(np.bincount(picks, minlength=4) / 4000, [0.625, 0.375, 0, 0], atol=0.03)


@pytest.fixture(scope="module")
def parity_qwen2_5_vl():
    folder = os.path.join(FIXTURES, "qwen2_5_vl")
    model = load_model(os.path.join(folder, "checkpoint"))
    model.eval()
    return model, _batch(dict(np.load(os.path.join(folder, "inputs.npz")))), np.load(
        os.path.join(folder, "reference.npz"))["tokens"]


@pytest.mark.parametrize("penalty", [1.5, 0.5])
@pytest.mark.parametrize("engine", ["one_token", "layers"])
def test_greedy_rollout_with_a_repetition_penalty_is_transformers_generate(parity_qwen2_5_vl, penalty, engine):
    model, batch, plain = parity_qwen2_5_vl
    want = REFERENCE[f"greedy_tokens_{penalty}"]
    assert want.tolist() != plain.tolist()  # the penalty changes transformers' answer
    params = SamplingParams(len(want), temperature=0.0, repetition_penalty=penalty, engine=engine)
    rollout = sample_completions(model, batch, 2, params, eos_token_ids=[model.config.eos_token_id],
                                 pad_token_id=model.config.pad_token_id)
    assert rollout.completion_ids.numpy().tolist() == [want.tolist()] * 2
    # each token's log-prob is read from the penalised logits it was drawn from
    assert (rollout.sampling_logp.numpy() < 0).all()


def test_episodes_penalise_every_token_a_row_has_seen(tiny, rec_samples, monkeypatch):
    """In a multi-turn rollout the penalty in turn 2 reads, per row, its prompt (no padding), its given first turn,
    its tool's message and turn 2's tokens so far (recomputed here from the episode's tokens), and turn 2's greedy
    tokens are the argmax of its logits penalised over that set."""
    penalty, sets = 3.0, []

    def recorded(logits, params, seen=None):
        sets.append([set(np.flatnonzero(row).tolist()) for row in seen.seen.numpy()])
        return sampling_logits(logits, params, seen)

    monkeypatch.setattr(rollout_module, "sampling_logits", recorded)
    result, prompt, turn_two = episodes_and_turn_two(
        monkeypatch, lambda: run_episodes(tiny, rec_samples, repetition_penalty=penalty))
    rollout, own = result.rollout, result.rollout.completion_mask.numpy()
    changed = 0
    for j, row in enumerate([0, 2, 3]):  # the rows whose given first turn called a tool, in turn 2
        prompt_row = row // rollout.num_generations
        prompt_ids = prompt.input_ids[prompt_row].numpy()[prompt.attention_mask[prompt_row].numpy() == 1]
        ids = rollout.completion_ids[row].numpy()
        second_turn = np.flatnonzero(np.diff(own[row]) == 1)[0] + 1
        first_turn_end = np.flatnonzero(np.diff(own[row]) == -1)[0] + 1
        assert set(ids[first_turn_end:second_turn].tolist()) - set(prompt_ids.tolist()) - set(
            ids[:first_turn_end].tolist())  # the tool's message brings tokens of its own
        for k in range(int(own[row, second_turn:].sum())):
            seen = set(prompt_ids.tolist()) | set(ids[:second_turn + k].tolist())
            assert sets[k][j] == seen, (row, k)
            logits = turn_two[k][j].numpy().astype("float64")
            penalized = logits.copy()
            for v in seen:
                penalized[v] = logits[v] / penalty if logits[v] > 0 else logits[v] * penalty
            assert ids[second_turn + k] == penalized.argmax()
            changed += int(logits.argmax() != ids[second_turn + k])
    assert changed > 0
