"""Video-R1's accuracy reward (Video-R1, ``src/r1-v/src/open_r1/grpo.py``, ``accuracy_reward``): one rule per
``problem_type`` of its json, each comparing the answer a with the gold g, both read as Video-R1 reads them:

- a: the content of the completion's first ``<answer>...</answer>``, stripped ("" when there is none: no credit);
- g: the sample's solution (the ``video_r1`` format keeps the bare answer; a tagged one is read the same way).

The rules (``video_r1_accuracy``'s docstring) are Video-R1's, with its reward range [0, 1]; where it differs is
said there: a zero regression gold, and a problem type or gold it cannot score (Video-R1 gives 0.0, here bad data:
``BadSolution``, the sample counted and left out). Model text never raises: each rule scores what it cannot read 0.0.
"""
from __future__ import annotations

import functools
import math
from typing import Callable, Optional

from ...data.formats import problem_type_name, video_r1_number
from ..parsing import tagged
from ..registry import BadSolution, register


def first_answer(completion) -> str:
    """Video-R1's ``extract_answer``: the first ``<answer>...</answer>`` content, stripped; "" when there is none."""
    found = tagged(completion, "answer", last=False) if isinstance(completion, str) else None
    return "" if found is None else found.strip()


def choice_score(answer: str, gold: str) -> float:
    """1 if the answer is the gold letter exactly ("B" == "B"; "b", "B." and "(B)" are not), else 0."""
    return float(answer == gold)


def numerical_score(answer: str, gold: str) -> float:
    """1 if both are numbers equal after rounding to 2 decimals, written alike (either both or neither holds a "."
    or a ","): "3" does not answer "3.0"; else 0."""
    if ("." in gold or "," in gold) != ("." in answer or "," in answer):
        return 0.0
    value, target = video_r1_number(answer), video_r1_number(gold)
    return float(value is not None and target is not None and round(value, 2) == round(target, 2))


def ocr_score(answer: str, gold: str) -> float:
    """1 - WER clipped at 0: WER = Lev(words(g), words(a)) / max(1, |words(g)|), words split on whitespace and
    compared exactly (case and punctuation count), Lev the fewest word insertions, deletions and substitutions."""
    from rapidfuzz.distance import Levenshtein

    reference = gold.split()
    return max(0.0, 1.0 - Levenshtein.distance(reference, answer.split()) / max(1, len(reference)))


@functools.lru_cache(maxsize=None)
def _rouge_scorer():
    from rouge_score import rouge_scorer  # imports nltk: on first use, not when the registry loads

    return rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)


def free_form_score(answer: str, gold: str) -> float:
    """(F(ROUGE-1) + F(ROUGE-2) + F(ROUGE-L)) / 3 of the answer against the gold, by Google's ``rouge-score`` with
    its Porter stemmer, as Video-R1 computes it: its tokenizer lower-cases and keeps runs of a-z and 0-9 only, so a
    text without them (Chinese, say) scores 0."""
    scores = _rouge_scorer().score(gold, answer)
    return min(1.0, max(0.0, sum(scores[kind].fmeasure for kind in ("rouge1", "rouge2", "rougeL")) / 3))


def regression_score(answer: str, gold: str) -> float:
    """1 - |a - g| / |g| clipped at 0 (1 - the relative error); a gold of 0: 1 if a = 0, else 0. Video-R1 adds 1e-9
    to both sides of the ratio: no score moves by more than 1e-9 / |g|, but there an exact answer to a zero gold
    scores 0."""
    value, target = video_r1_number(answer), video_r1_number(gold)
    if value is None or target is None or not math.isfinite(value):
        return 0.0
    if target == 0:
        return float(value == 0)
    return max(0.0, 1.0 - abs(value - target) / abs(target))


RULES: dict[str, Callable[[str, str], float]] = {
    "multiple choice": choice_score, "numerical": numerical_score, "OCR": ocr_score, "free-form": free_form_score,
    "regression": regression_score,
}


def gold_answer(solution, problem_type: str) -> str:
    """The gold as Video-R1 compares it; BadSolution when it is empty, or not a number for a numerical or regression
    row."""
    text = solution if isinstance(solution, str) else str(solution)
    gold = first_answer(text) if "<answer>" in text else text.strip()
    if not gold or (problem_type in ("numerical", "regression") and video_r1_number(gold) is None):
        raise BadSolution(f"video_r1_accuracy: {solution!r} is no {problem_type} answer")
    return gold


@register("video_r1_accuracy")
def video_r1_accuracy(completions, solution=None, problem_type=None, **_) -> list[Optional[float]]:
    """Video-R1's accuracy by the sample's ``problem_type`` (a: the first ``<answer>`` content, g: the gold):

    - multiple choice: R = 1 if a == g (the option letter, exactly), else 0;
    - numerical: R = 1 if round(a, 2) == round(g, 2), a and g read by ``float`` without commas and either both or
      neither written with a "." or ",", else 0;
    - OCR: R = max(0, 1 - WER(g, a)), WER = word-level Levenshtein distance / number of words of g;
    - free-form: R = (F1(ROUGE-1) + F1(ROUGE-2) + F1(ROUGE-L)) / 3 (rouge-score, Porter stemmer);
    - regression: R = max(0, 1 - |a - g| / |g|); for g = 0, R = 1 if a = 0 else 0.

    Unreadable answers score 0. A sample without a solution or a problem type scores None (another task's row in a
    mixture); an unknown problem type or a gold its rule cannot read is bad data (``BadSolution``)."""
    count = len(completions)
    solutions = solution if solution is not None else [None] * count
    types = problem_type if problem_type is not None else [None] * count
    scores: list[Optional[float]] = []
    for text, gold, kind in zip(completions, solutions, types):
        if gold is None or kind is None:
            scores.append(None)
            continue
        name = problem_type_name(kind)
        if name is None:
            raise BadSolution(f"video_r1_accuracy: problem_type {kind!r} is none of {', '.join(RULES)}")
        scores.append(RULES[name](first_answer(text), gold_answer(gold, name)))
    return scores
