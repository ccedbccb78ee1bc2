"""Every registered reward on 2,000 random completions never raises and scores each None or a finite number in
[0, 1], with valid solutions; the judge rewards ask a real 127.0.0.1 server that answers every malformed shape.

The completions (seeded): random unicode from every plane (lone surrogates included), huge and non-finite numbers,
brackets and tags nested hundreds deep and often unclosed, JSON-ish values (GUI actions, boxes, dimensions) whole
or cut off, soups of the tokens the readers look for, and every 100th one repeated to 50,000 characters; half of
them inside ``<think>..</think><answer>..</answer>``. math-verify's rewards get a short batch deadline: the
comparisons past it are not sent (counted), which is the bound an adversarial batch gets in training too.
"""
import json
import math
import random

import pytest

from judge_server import JudgeServer
from paddle_r1.rewards import load_builtin_rewards
from paddle_r1.rewards.manager import bind_reward
from reward_helpers import reward_columns

REWARDS = load_builtin_rewards()

COMPLETIONS = 2000
LONG_EVERY, LONG_CHARS = 100, 50_000
TOKENS = ["<answer>", "</answer>", "<think>", "</think>", "[", "]", "{", "}", "(", ")", "\\frac{", "\\sqrt{",
          "\\boxed{", "$", "^{", "√{", "π", "°", "cm", "答案", ",", ":", '"', "'", "\\", "\n", " ", "\t", "e", "-",
          ".", "/", "NaN", "inf", "None", "null", "true", "yes", "no", "B", "(C)", "click", "action_type", "bbox_2d",
          "label", "0:", "1e309"]
CLOSING = {"[": "]", "{": "}", "(": ")", "<answer>": "</answer>", "\\frac{": "}{2}", "{0: [": "]}", '{"a": [': "]}",
           "\\sqrt{": "}", "<think>": "</think>"}
JSON_KEYS = ["action_type", "action_parameter", "bbox_2d", "label", "0", "1", "length", "width", "height", "click",
             "task_interpretation", "x"]


def random_text(rng: random.Random, length: int) -> str:
    planes = [(32, 126), (0x80, 0x2FFF), (0x4E00, 0x9FFF), (0x1F300, 0x1FAFF), (0, 0x10FFFF)]
    return "".join(chr(rng.randint(*rng.choice(planes))) for _ in range(length))


def huge_number(rng: random.Random) -> str:
    return rng.choice([str(rng.randint(1, 9)) * rng.randint(20, 400), f"1e{rng.randint(300, 99999)}",
                       f"-{rng.random()}e-{rng.randint(300, 9999)}", "NaN", "inf", "-inf", "1/0", "0/0",
                       f"{rng.randint(2, 9)}**{rng.randint(10, 99)}**{rng.randint(10, 99)}", "1" + "0" * 5000])


def nested(rng: random.Random) -> str:
    depth = rng.randint(1, 300)
    opening = rng.choice(list(CLOSING))
    closed = depth if rng.random() < 0.5 else rng.randint(0, depth)
    return opening * depth + str(rng.randint(0, 999)) + CLOSING[opening] * closed


def jsonish(rng: random.Random, depth: int = 0):
    kind = rng.randrange(6 if depth < 4 else 4)
    if kind == 0:
        return rng.choice([None, True, False, rng.randint(-10 ** 30, 10 ** 30),
                           rng.random() * 10 ** rng.randint(-30, 30)])
    if kind == 1:
        return random_text(rng, rng.randint(0, 12))
    if kind == 2:
        return [rng.randint(-5, 2000) for _ in range(rng.choice([0, 2, 4, 5]))]
    if kind == 3:
        return rng.choice(["click", "swipe", "type", "cat", "0", ""])
    if kind == 4:
        return [jsonish(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice(JSON_KEYS): jsonish(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def completion(rng: random.Random) -> str:
    kind = rng.randrange(6)
    if kind == 0:
        body = random_text(rng, rng.randint(0, 200))
    elif kind == 1:
        body = huge_number(rng)
    elif kind == 2:
        body = nested(rng)
    elif kind == 3:
        text = json.dumps(jsonish(rng), ensure_ascii=rng.random() < 0.5)
        body = text[:rng.randint(0, len(text))] if rng.random() < 0.3 else text
    elif kind == 4:
        body = "".join(rng.choice(TOKENS) for _ in range(rng.randint(1, 60)))
    else:  # near the solutions: "3", "B", "a red car", a box
        body = rng.choice(["3", "B", "yes", "a red car", "1/2", "12 8 15", "[10, 20, 110, 220]", "{0: [[10, 20]]}"])
    if rng.random() < 0.5:
        body = f"<think>{random_text(rng, rng.randint(0, 40))}</think><answer>{body}</answer>"
    return body


def fuzz_completions(seed: int = 27) -> list[str]:
    rng = random.Random(seed)
    texts = [completion(rng) for _ in range(COMPLETIONS)]
    for i in range(0, COMPLETIONS, LONG_EVERY):
        texts[i] = (texts[i] * (LONG_CHARS // max(len(texts[i]), 1) + 1))[:LONG_CHARS]
    return texts


FUZZ = fuzz_completions()


@pytest.fixture(scope="module")
def malformed_judge():
    server = JudgeServer()
    server.mode = "malformed"  # every reply is one of MALFORMED_REPLIES, in turn
    yield server
    server.close()


def settings_for(name: str, judge: JudgeServer) -> dict:
    if name in ("llm_judge", "caption"):
        return judge.kwargs(max_retries=0, max_concurrency=4)
    if name in ("math", "accuracy"):
        return {"timeout_seconds": 1.0, "batch_timeout_seconds": 2.0}
    return {}


@pytest.mark.parametrize("name", sorted(REWARDS))
def test_reward_never_raises_and_stays_in_range_on_random_completions(name, malformed_judge):
    reward = bind_reward(name, settings_for(name, malformed_judge))
    counts = {}
    if hasattr(reward, "report"):
        reward.report = lambda key, n: counts.__setitem__(key, counts.get(key, 0) + n)
    scores = reward(FUZZ, **reward_columns(name, COMPLETIONS))
    assert len(scores) == COMPLETIONS
    bad = [(i, s) for i, s in enumerate(scores) if not (s is None or (math.isfinite(s) and 0.0 <= s <= 1.0))]
    assert not bad, f"{name}: {bad[:5]}"
    if name in ("llm_judge", "caption"):  # every request was answered with a malformed reply: no verdict at all
        assert counts["failures"] == counts["requests"] > 100  # identical answers are asked once
        assert counts["fallbacks"] >= counts["requests"]
