"""Rewards give credit only for an answer that equals the solution: random wrong answers,
padded with whitespace or not, reformatted, or holding the right value as a part, never score 1; and every shape of
R1-V's GeoQA test golds, written as a model writes it (in a sentence, in \\boxed{}, LaTeX or unicode), scores 1."""
import json
import math
import os
import random
import re
from fractions import Fraction

import pytest

from paddle_r1.rewards import load_builtin_rewards

REWARDS = load_builtin_rewards()

rng = random.Random(19)
TRIALS = 40


def pad(text: str) -> str:
    """``text`` with 0..400 whitespace characters before and after (past math-verify's 300-character $-wrap)."""
    side = lambda: "".join(rng.choice(" \n\t") for _ in range(rng.choice([0, 0, 5, 320, 400])))  # noqa: E731
    return side() + text + side()


def numeric_gold():
    """(gold text as datasets write it, its value)."""
    a, b = rng.randint(1, 9), rng.choice([2, 3, 5, 7])
    return rng.choice([
        (f"\\frac{{{a}}}{{{b * a + 1}}}", a / (b * a + 1)),
        (f"{a}\\sqrt{{{b}}}", a * math.sqrt(b)), (f"{a}√{{{b}}}", a * math.sqrt(b)),
        (f"{a}\\pi", a * math.pi), (f"\\frac{{{a}}}{{{b}}}π", a / b * math.pi),
        (f"{a * 10}°", a * 10.0), (f"{a}cm", float(a)), (str(a * b), float(a * b)),
    ])


def wrong_numeric(gold: str, value: float) -> str:
    """An answer that is not ``value``: another number, a part of the gold, the gold plus something."""
    n = rng.randint(0, 30)
    while math.isclose(n, value):
        n += 1
    fraction = Fraction(rng.randint(1, 20), rng.randint(2, 20))
    while math.isclose(float(fraction), value):
        fraction += 1
    first_digit = next(c for c in gold if c.isdigit())
    candidates = [str(n), f"{n}.0", f"\\boxed{{{n}}}", f"\\frac{{{fraction.numerator}}}{{{fraction.denominator}}}",
                  f"{gold}+1", f"1+{gold}", f"{gold}-{gold}"]
    if not math.isclose(float(first_digit), value):
        candidates.append(first_digit)  # the first number of the gold, alone
    return rng.choice(candidates)


def in_a_sentence(answer: str) -> str:
    """``answer`` as a model states it: alone, in an English or Chinese sentence, in \\boxed{} or between $...$."""
    return rng.choice(["{}", "The answer is {}.", "So the length is {}", "答案是{}。", "\\boxed{{{}}}",
                       "Therefore, the answer is ${}$."]).format(answer)


@pytest.mark.parametrize("name", ["math", "accuracy"])
def test_wrong_math_answers_never_score_one(name):
    reward = REWARDS[name]()
    for _ in range(TRIALS):
        gold, value = numeric_gold()
        answer = pad(in_a_sentence(wrong_numeric(gold, value)))
        assert reward([f"<answer>{answer}</answer>"], solution=[gold]) < [1.0], (answer, gold)
        assert reward([f"<answer>{pad(gold)}</answer>"], solution=[gold]) == [1.0], gold  # the gold itself does


# ---- GeoQA: every answer shape of R1-V's 754 test golds (tests/fixtures/make_geoqa_answer_shapes.py) ---------------

with open(os.path.join(os.path.dirname(__file__), "fixtures", "geoqa_answer_shapes.json"), encoding="utf-8") as _f:
    GEOQA_GOLDS = [entry["gold"] for entry in json.load(_f)["shapes"]]
GEOQA_UNIT = re.compile(r"(?:平方米|厘米|米|海里|小时|秒|cm\^\{2\}|cm\^2\^|cm²|m\^\{2\}|cm|mm|m)$")


def value_and_unit(gold: str) -> tuple[str, str]:
    unit = GEOQA_UNIT.search(gold)
    return (gold[:unit.start()], unit.group()) if unit and unit.start() else (gold, "")


def as_latex(value: str) -> str:
    return re.sub(r"√\{([^{}]*)\}", r"\\sqrt{\1}", value).replace("π", "\\pi ").replace("°", "^{\\circ}")


def written_as_a_model(gold: str) -> list[str]:
    """The gold as a model writes it: bare or in a sentence (English, Chinese), unicode (√{3}, π, °) or LaTeX
    (\\sqrt{3}, \\pi, ^{\\circ}, ^\\circ), in \\boxed{} or between $...$, with its unit or without."""
    value, unit = value_and_unit(gold)
    latex = as_latex(value)
    return [gold, f"The answer is {gold}.", f"So the length is {value}.", f"答案是{gold}。", latex,
            f"\\boxed{{{latex}}}",
            f"\\boxed{{{value}}}", f"Therefore, the answer is ${latex}$.", f"So the answer is \\boxed{{{latex}}}.",
            f"The answer is {latex}{unit}."] + [latex.replace("^{\\circ}", "^\\circ"),
                                                f"\\boxed{{{value[:-1]}^\\circ}}",
                                                f"The angle is {value[:-1]} degrees."] * value.endswith("°")


def hacks(gold: str) -> list[str]:
    """Wrong answers written the same ways: the gold plus one, one plus the gold, the gold minus itself, and the
    gold's first number alone when that is not the whole value."""
    value, _ = value_and_unit(gold)
    latex = as_latex(value)
    first = re.search(r"\d+(?:\.\d+)?", value).group() if re.search(r"\d", value) else "2"
    wrong = [f"{value}+1", f"1+{value}", f"{value}-{value}", f"{latex}+1"]
    if value.rstrip("°") != first:
        wrong.append(first)
    return [style.format(w) for w in wrong for style in ("The answer is {}.", "\\boxed{{{}}}", "答案是{}。")]


@pytest.mark.parametrize("name", ["math", "accuracy"])
def test_every_geoqa_answer_shape_written_as_a_model_would_scores_one_and_its_hacks_do_not(name):
    reward = REWARDS[name]()
    rows = [(gold, text) for gold in GEOQA_GOLDS for text in written_as_a_model(gold)]
    scores = reward([f"<think>...</think><answer>{text}</answer>" for _, text in rows], solution=[g for g, _ in rows])
    missed = [(gold, text, score) for (gold, text), score in zip(rows, scores) if score != 1.0]
    assert not missed, f"{len(missed)} of {len(rows)} correct answers not credited: {missed[:8]}"
    rows = [(gold, text) for gold in GEOQA_GOLDS for text in hacks(gold)]
    scores = reward([f"<answer>{text}</answer>" for _, text in rows], solution=[g for g, _ in rows])
    credited = [(gold, text) for (gold, text), score in zip(rows, scores) if score >= 1.0]
    assert not credited, f"wrong answers credited: {credited[:8]}"


def wrong_count(n: int) -> str:
    m = rng.choice([k for k in range(0, 21) if k != n])
    return rng.choice([str(m), f"{m}.0", f"There are {m} cubes, not {n}.", f"{m} or {n}", f"{n}{m}", f"{n}.5"])


def wrong_letter(letter: str) -> str:
    other = rng.choice([c for c in "ABCD" if c != letter])
    return rng.choice([other, f"({other})", f"{other}.", f"Answer: {other}", f"the answer is ({other.lower()})"])


CASES = {  # reward -> (gold maker, wrong answer maker)
    "counting": (lambda: rng.randint(0, 20), wrong_count),
    "counting_strict": (lambda: rng.randint(0, 20), wrong_count),
    "mcq": (lambda: rng.choice("ABCD"), wrong_letter),
    "yes_no": (lambda: rng.choice(["yes", "no"]),
               lambda g: rng.choice(["no", "No.", "I know it is not"] if g == "yes" else ["yes", "Yes!", "Yes, no"])),
    "all_match": (lambda: rng.choice(["a red car", "the left dog", "blue"]),
                  lambda g: rng.choice([g + " and a bus", "not " + g, g.replace(" ", "") + "s"])),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_wrong_answers_never_score_one(name):
    make_gold, make_wrong = CASES[name]
    reward = REWARDS[name]
    for _ in range(TRIALS):
        gold = make_gold()
        answer = pad(make_wrong(gold))
        assert reward([f"<answer>{answer}</answer>"], solution=[gold]) < [1.0], (answer, gold)
