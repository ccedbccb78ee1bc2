"""Rewards give credit only for an answer that equals the solution (issue 19 item 2): random wrong answers,
padded with whitespace or not, reformatted, or holding the right value as a part, never score 1."""
import math
import random
from fractions import Fraction

import pytest

from paddle_r1.rewards import REWARDS

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


@pytest.mark.parametrize("name", ["math", "accuracy"])
def test_wrong_math_answers_never_score_one(name):
    reward = REWARDS[name]()
    for _ in range(TRIALS):
        gold, value = numeric_gold()
        answer = pad(wrong_numeric(gold, value))
        assert reward([f"<answer>{answer}</answer>"], solution=[gold]) < [1.0], (answer, gold)
        assert reward([f"<answer>{pad(gold)}</answer>"], solution=[gold]) == [1.0], gold  # the gold itself does


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
