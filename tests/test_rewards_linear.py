"""Every reward in the registry is linear-time in the completion's length: 100k-character
adversarial completions (whitespace runs, nested tags, digit runs, brackets) are scored well under a second each.
A guard against quadratic regexes and parsers, not a benchmark: the bound is generous (10 s for the whole set, ~0.5 s
alone on 2 cores; a quadratic reader takes minutes on these inputs), so a loaded machine does not fail it."""
import time

import pytest

from paddle_r1.rewards import load_builtin_rewards
from paddle_r1.rewards.manager import bind_reward
from reward_helpers import reward_columns

REWARDS = load_builtin_rewards()

N = 100_000
ADVERSARIAL = [
    "The answer is" + "\n" * N,  # 64 s in parse_choice's phrase regex
    "answer:" + " " * N + "x", " " * N + "B" + " " * N + "x", "\t \n" * (N // 3),
    "<answer>" + " " * N + "</answer>", "<answer>" * (N // 8), "<answer><think>" * (N // 15),
    "</answer>" * (N // 9), "<think>" * (N // 7) + "</think>",
    "1" * N, "<answer>" + "1" * N, "<answer>" + "1 " * (N // 2) + "</answer>", "1." * (N // 2), "1e" * (N // 2),
    "[" * N, "{" * N, "(" * N, "[1, 2, 3, 4" * (N // 11), "{0: [" * (N // 5), '{"a": [' * (N // 7),
    "[[" + "1, " * (N // 3), "\\frac{" * (N // 6), "$" * N, "√{" * (N // 2), "°" * N, "1cm" * (N // 3),
    "(B) " * (N // 4), "option (" * (N // 8), "答案是" * (N // 3), "yes no " * (N // 7),
]
SETTINGS = {"caption": {"judge_weight": 0.0}}  # no network: the judge is unset (env cleared) or weighted 0


@pytest.fixture(autouse=True)
def no_judge_endpoint(monkeypatch):
    for name in ("OPENAI_API_BASE", "OPENAI_BASE_URL", "JUDGE_MODEL", "OPENAI_MODEL"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("name", sorted(REWARDS))
def test_reward_is_linear_in_completion_length(name):
    reward = bind_reward(name, SETTINGS.get(name, {}))
    n = len(ADVERSARIAL)
    columns = reward_columns(name, n)
    # warm up: a worker process starts, a library loads (five rows: video_r1_accuracy's five problem types)
    reward(["<answer>1</answer>"] * 5, **{k: v[:5] for k, v in columns.items()})
    start = time.perf_counter()
    scores = reward(ADVERSARIAL, **columns)
    seconds = time.perf_counter() - start
    assert len(scores) == n and all(s is None or 0.0 <= s <= 1.0 for s in scores)
    assert seconds < 10.0, f"{name}: {seconds:.2f} s for {n} adversarial completions of ~{N} characters"
