"""METEOR (hand-checked against its formula, with and without WordNet) and the caption mix."""
import random

import pytest
from test_rewards_judge import MODEL, Counted, JudgeServer, free_port, metrics  # noqa: F401

from paddle_r1.rewards import load_builtin_rewards
from paddle_r1.rewards.families import caption

REWARDS = load_builtin_rewards()

meteor = REWARDS["meteor"]


def caption_reward(**settings):
    return Counted(REWARDS["caption"](**settings))


class Lemma:
    def __init__(self, name):
        self._name = name

    def name(self):
        return self._name


class FakeWordNet:
    """car ~ auto, the only synonyms in this world (nltk looks synonyms up by Porter stem: both are their own)."""

    def synsets(self, word):
        group = {"car", "auto"}
        return [type("Synset", (), {"lemmas": lambda self: [Lemma(w) for w in group]})()] if word in group else []


@pytest.fixture
def no_wordnet(monkeypatch):
    monkeypatch.setattr(caption, "wordnet_or_stand_in", caption.NoWordNet)


@pytest.fixture
def server():
    server = JudgeServer()
    yield server
    server.close()


def fmean_penalized(matches, hyp_len, ref_len, chunks):
    """METEOR by hand: Fmean = P R / (0.9 P + 0.1 R), times 1 - 0.5 (chunks / matches)^3."""
    p, r = matches / hyp_len, matches / ref_len
    return p * r / (0.9 * p + 0.1 * r) * (1 - 0.5 * (chunks / matches) ** 3)


@pytest.mark.parametrize("hypothesis, reference, expected", [
    ("the cat sat on the mat", "the cat sat on the mat", fmean_penalized(6, 6, 6, 1)),  # 0.99769, not 1
    ("The CAT sat.", "the cat, SAT !", fmean_penalized(3, 3, 3, 1)),  # case and punctuation ignored
    ("the cat", "the cat sat", fmean_penalized(2, 2, 3, 1)),
    ("mat the", "the mat", fmean_penalized(2, 2, 2, 2)),  # two chunks: 0.5
    ("running dogs", "run dog", fmean_penalized(2, 2, 2, 1)),  # Porter stems match: 0.9375
    ("a blue bus", "red car here", 0.0),
])
def test_meteor_by_hand(no_wordnet, hypothesis, reference, expected):
    assert meteor([f"<think>x</think><answer>{hypothesis}</answer>"], solution=[reference]) == pytest.approx([expected])


def test_meteor_hand_values():
    assert fmean_penalized(6, 6, 6, 1) == pytest.approx(1 - 0.5 / 216)
    assert fmean_penalized(2, 2, 2, 1) == pytest.approx(0.9375)


def test_meteor_matches_nltk_and_takes_the_best_reference(no_wordnet):
    from nltk.translate.meteor_score import meteor_score  # nltk takes seconds to import: not at collection

    hyp, refs = "a small dog runs on grass", ["the dog is running on the grass", "a cat sleeps"]
    expected = meteor_score([r.split() for r in refs], hyp.split(), wordnet=caption.NoWordNet())
    assert meteor([hyp], solution=[refs]) == pytest.approx([expected])
    assert meteor([hyp], solution=[refs[::-1]]) == meteor([hyp], solution=[refs[:1]])
    assert 0.0 < expected < 1.0


def test_meteor_uses_wordnet_synonyms_when_installed(monkeypatch):
    monkeypatch.setattr(caption, "wordnet_or_stand_in", FakeWordNet)
    assert meteor(["auto"], solution=["car"]) == pytest.approx([fmean_penalized(1, 1, 1, 1)])  # 0.5
    monkeypatch.setattr(caption, "wordnet_or_stand_in", caption.NoWordNet)
    assert meteor(["auto"], solution=["car"]) == [0.0]


def test_wordnet_or_stand_in(monkeypatch):
    class Missing:
        def synsets(self, word):
            raise LookupError("Resource 'wordnet' not found")

    for reader, expected in ((Missing(), caption.NoWordNet), (FakeWordNet(), FakeWordNet)):
        caption.wordnet_or_stand_in.cache_clear()
        monkeypatch.setattr(caption, "nltk_wordnet", reader)
        assert isinstance(caption.wordnet_or_stand_in(), expected)
    caption.wordnet_or_stand_in.cache_clear()


def test_meteor_never_raises_on_garbage():
    rng = random.Random(0)
    noise = "".join(chr(rng.randrange(1, 0xD7FF)) for _ in range(10_000))
    texts = [noise, "word " * 2_000, "<answer>" * 1_000, "", "\x00\uffff", "<answer></answer>"]
    scores = meteor(texts, solution=["a dog on the grass"] * len(texts))
    assert all(isinstance(s, float) and 0.0 <= s <= 1.0 for s in scores)
    assert meteor(["x", "3 dogs"], solution=[None, 3]) == [None, pytest.approx(fmean_penalized(1, 2, 1, 1))]


def test_caption_mix(no_wordnet, server):
    texts = ["<answer>a red car parked on the street</answer>", "<answer>a blue bus</answer>"]
    solutions = ["a red car"] * 2
    m = meteor(texts, solution=solutions)
    mixed = caption_reward(**server.kwargs())
    scores = mixed(texts, solution=solutions, problem=["Describe the region."] * 2)
    assert scores == pytest.approx([0.25 * m[0] + 0.75 * 1.0, 0.25 * m[1] + 0.0])
    weighted = caption_reward(meteor_weight=0.5, judge_weight=0.5, **server.kwargs())
    assert weighted(texts, solution=solutions) == pytest.approx([0.5 * m[0] + 0.5, 0.5 * m[1]])
    assert mixed.pop() == metrics(2, 0, 0) and weighted.pop() == metrics(2, 0, 0)
    assert "description" in server.bodies[0]["messages"][0]["content"]  # the caption grading instruction


def test_caption_counts_its_own_judge_failures(no_wordnet, server):
    server.mode = "500"
    judge = Counted(REWARDS["llm_judge"](**server.kwargs(max_retries=1)))
    mixed = caption_reward(**server.kwargs(max_retries=1))
    scores = mixed(["a red car", "blue bus"], solution=["A red car."] * 2)
    # the exact copy scores 0.25 * METEOR + 0.75 with no request; the other falls back to exact match (0)
    assert scores == pytest.approx([0.25 * fmean_penalized(3, 3, 3, 1) + 0.75, 0.0])
    assert mixed.pop() == metrics(2, 2, 1)
    assert judge.pop() == {}  # a separate llm_judge reward counts nothing of the caption's


def test_caption_unreachable_and_meteor_only(no_wordnet):
    dead = {"base_url": f"http://127.0.0.1:{free_port()}/v1", "model": MODEL, "backoff": 0.01, "max_concurrency": 1}
    mixed = caption_reward(**dead)
    assert mixed(["the dog", "x" * 10_000], solution=["a dog", "a dog"]) == pytest.approx(
        [0.25 * fmean_penalized(1, 2, 2, 1), 0.0])
    assert mixed.pop() == metrics(3, 3, 2)
    # judge_weight 0: METEOR only, nothing sent, nothing counted
    meteor_only = caption_reward(judge_weight=0, meteor_weight=1, **dead)
    assert meteor_only(["the dog"], solution=["a dog"]) == pytest.approx([fmean_penalized(1, 2, 2, 1)])
    assert mixed(["the dog"], solution=[None]) == [None]
    assert mixed.pop() == {} and meteor_only.pop() == {}
