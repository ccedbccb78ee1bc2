"""Answer-content rewards: counting, math, multiple choice, yes/no, and the accuracy router.

Every reward here reads the prediction from the ``<answer>`` content (the whole text when there are no tags;
nested or unbalanced tags score 0.0) and the solution through ``reference_texts``: a string (its ``<answer>``
content when tagged, as VLM-R1 stores them), a number, or a list of acceptable answers (the best one counts).
A sample without a solution scores None; a solution that is not of the reward's kind (a counting solution with
no integer, an mcq solution with no letter) raises ``BadSolution``: that is bad data, not model text.
"""
from __future__ import annotations

import atexit
import difflib
import inspect
import json
import logging
import math
import os
import queue
import re
import subprocess
import sys
import threading
import time
from typing import Callable, Optional

from ...models.coords import as_box
from ..registry import REWARDS, BadSolution, CountedReward, register
from ..parsing import NUMBER, answer_content, exact_match, normalize_answer, reference_texts

logger = logging.getLogger(__name__)

# ---- reading answers ---------------------------------------------------------------------------------------

NUMBER_WORDS = {word: i for i, word in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split())}
COUNT_RE = re.compile(rf"({NUMBER})|\b({'|'.join(NUMBER_WORDS)})\b", re.IGNORECASE)
YES_NO_RE = re.compile(r"\b(yes|no)\b", re.IGNORECASE)
STRICT_COUNT_RE = re.compile(r"<answer>\s*(\d+)\s*</answer>")  # R1-V's and VLM-R1's counting evaluation

# Choice letters, tried in this order (see parse_choice).
# No two whitespace runs meet with only optional tokens between them (quadratic backtracking on long runs).
CHOICE_ALONE_RE = re.compile(r"\s*[(\[]?([A-Za-z])[)\]]?\s*(?:[.:)]\s*)?")  # fullmatch: "B", "(B)", "b.", "[C]"
CHOICE_LEAD_RE = re.compile(r"\s*(?:[(\[]([A-Za-z])[)\]]|([A-Z])\s*[.:)）、])")  # "(B) dog", "B. dog", "B) dog"
CHOICE_PHRASE_RE = re.compile(  # "Answer: B.", "the answer is b", "option (C)", "答案是B"
    r"(?i:\banswer|\boption|\bchoice|答案|选项)\s*(?i:(?:is|是|为)\s*)?(?:[:：]\s*)?[(\[]?"
    r"(?:([A-Z])(?!\w)|([a-z])(?=\s*(?:[.,;:!?)\]]|$)))")
CHOICE_PAREN_RE = re.compile(r"[(\[]([A-Z])[)\]]")  # "... (B) ..." anywhere


def parse_count(text: str) -> Optional[int]:
    """The first number in ``text``, as digits or an English word zero..twenty ("3", "three", "3.0" -> 3);
    None when there is none or it is not a whole number ("2.5")."""
    for match in COUNT_RE.finditer(text):
        if match.group(2):
            return NUMBER_WORDS[match.group(2).lower()]
        value = float(match.group(1))
        if math.isfinite(value):
            return int(value) if value.is_integer() else None
    return None


def parse_strict_count(completion: str) -> Optional[int]:
    """The integer of the first ``<answer> 3 </answer>`` holding only digits (and spaces) in the completion, as the
    peers' published counting evaluations read it; None when there is none ("<answer>three</answer>" is None)."""
    match = STRICT_COUNT_RE.search(completion)
    if match is None:
        return None
    try:
        return int(match.group(1))
    except ValueError:  # more digits than Python turns into an int (4300): no count
        return None


def parse_yes_no(text: str) -> Optional[str]:
    """"yes" or "no": the first whole word yes / no in ``text``, any case ("I know" holds no "no"); else None."""
    match = YES_NO_RE.search(text)
    return match.group(1).lower() if match else None


def parse_choice(text: str) -> Optional[str]:
    """The chosen option letter, upper case, or None. Rules, first that applies:

    1. the whole text is one letter, maybe in brackets or with a trailing ``.``/``:``/``)``: "B", "(b)", "C.";
    2. the text starts with a bracketed letter or a capital followed by ``.``, ``:`` or ``)``: "(B) dog",
       "B. dog", "B) dog";
    3. a phrase "answer" / "option" / "choice" / 答案 / 选项, maybe "is" / ":", then a letter: "Answer: B",
       "the answer is b", "option (C)"; the last such phrase counts;
    4. bracketed capitals anywhere, when they all name the same letter: "I pick (B)".

    A lower-case "a" is read only alone or before punctuation, and a capital only when no letter follows it, so the
    article in "A dog" or "the answer is a dog" is not a choice; a sentence naming no option that way gives None.
    """
    alone = CHOICE_ALONE_RE.fullmatch(text)
    if alone:
        return alone.group(1).upper()
    lead = CHOICE_LEAD_RE.match(text)
    if lead:
        return (lead.group(1) or lead.group(2)).upper()
    phrases = CHOICE_PHRASE_RE.findall(text)
    if phrases:
        upper, lower = phrases[-1]
        return (upper or lower).upper()
    bracketed = set(CHOICE_PAREN_RE.findall(text))
    return bracketed.pop() if len(bracketed) == 1 else None


def solution_references(solution) -> list[str]:
    """``reference_texts`` with booleans read as yes / no (datasets store yes/no answers as true/false)."""
    items = solution if isinstance(solution, (list, tuple)) else [solution]
    return reference_texts([("yes" if s else "no") if isinstance(s, bool) else s for s in items])


def read_references(references: list[str], read: Callable, kind: str) -> list:
    """Each reference read with ``read``; BadSolution when one cannot be read (bad data, not model text)."""
    values = [read(ref) for ref in references]
    if any(v is None for v in values):
        raise BadSolution(f"solution {references!r} is not a {kind} answer")
    return values


def per_answer(score: Callable[[str, list[str]], float], completions, solution) -> list[Optional[float]]:
    """score(answer, references) per completion; 0.0 when the answer cannot be read, None without a solution."""
    solutions = solution if solution is not None else [None] * len(completions)
    out: list[Optional[float]] = []
    for text, sol in zip(completions, solutions):
        references = solution_references(sol)
        answer = answer_content(text) if isinstance(text, str) else None
        out.append(None if not references else 0.0 if answer is None else score(answer, references))
    return out


# ---- math-verify in a worker process -----------------------------------------------------------------------

class MathVerifier:
    """``check(gold, pred, timeout)``: math-verify's ``verify(parse(gold), parse(pred))``, gold first, run in a
    persistent worker process (``python -m paddle_r1.rewards.math_worker``) with a deadline per comparison. Each
    reward that asks math-verify owns one, started at its first comparison.

    math-verify's own timeouts use ``signal.alarm``, which fails outside the main thread, so they are switched
    off (``parsing_timeout=None``, ``timeout_seconds=None``) and the deadline is kept here instead: a worker that
    has not answered in time is killed and started again on the next call. This works from any thread (calls are
    serialized by a lock), from worker processes (a forked child starts its own worker) and from daemonic
    processes (a subprocess, not a multiprocessing child). Replies: "equal", "different", "unparsed" (either side
    parsed to nothing), "no_verdict" (deadline passed or the worker died). An orphaned worker does not linger: it
    exits at end of input or when its parent changes, and ``signal.alarm`` in its own main thread ends a
    comparison that outlives the deadline by 2 s even when nobody is left to kill it.
    """

    START_SECONDS = 120.0
    CACHE_SIZE = 4096
    CACHE_MAX_CHARS = 2000

    def __init__(self):
        self._reset()
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._reset)  # the parent's worker and lock are not the child's
        atexit.register(self._kill)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._proc: Optional[subprocess.Popen] = None
        self._replies: Optional[queue.Queue] = None
        self._cache: dict[tuple, str] = {}

    def check(self, gold: str, pred: str, timeout: float, deadline: Optional[float] = None) -> str:
        """The verdict on one comparison, waiting at most ``timeout`` seconds, and not past ``deadline`` (a
        ``time.monotonic()`` time shared by the comparisons of one batch): once it has passed, nothing is sent and
        the verdict is "no_verdict". A verdict cut short by ``deadline`` is not remembered (the pair may get its
        full ``timeout`` in another batch)."""
        key = (gold, pred, timeout)
        with self._lock:
            if key in self._cache:
                return self._cache[key]
            wait = timeout if deadline is None else min(timeout, deadline - time.monotonic())
            if wait <= 0:
                return "no_verdict"
            verdict = self._ask(json.dumps([gold, pred, timeout]) + "\n", wait)
            cut_short = verdict == "no_verdict" and wait < timeout
            if len(gold) + len(pred) <= self.CACHE_MAX_CHARS and not cut_short:  # a group often repeats an answer
                if len(self._cache) >= self.CACHE_SIZE:
                    self._cache.clear()
                self._cache[key] = verdict
            return verdict

    def _ask(self, line: str, timeout: float) -> str:
        for _ in range(2):  # a worker that died between calls is replaced once
            self._ensure_started()
            try:
                self._proc.stdin.write(line)
                self._proc.stdin.flush()
            except (OSError, ValueError):
                self._stop()
                continue
            try:
                reply = self._replies.get(timeout=timeout)
            except queue.Empty:
                reply = None
            if reply is None:  # too slow, or the worker died (e.g. out of memory) mid-comparison
                self._stop()
                return "no_verdict"
            return reply
        return "no_verdict"

    def _ensure_started(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        self._stop()
        # the folder paddle_r1 is imported from, first on the worker's path (a checkout that is not installed)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        proc = subprocess.Popen([sys.executable, "-m", "paddle_r1.rewards.math_worker"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, encoding="utf-8", bufsize=1, env=env)
        replies: queue.Queue = queue.Queue()
        threading.Thread(target=_forward_lines, args=(proc.stdout, replies), daemon=True,
                         name="math-verify-reader").start()
        self._proc, self._replies = proc, replies
        try:
            ready = replies.get(timeout=self.START_SECONDS)
        except queue.Empty:
            ready = None
        if ready != "ready":
            self._stop()
            raise RuntimeError(f"the math-verify worker did not start ({sys.executable} -m "
                               "paddle_r1.rewards.math_worker; is math-verify "
                               "installed in this environment? its stderr is above)")

    def _stop(self) -> None:
        proc, self._proc, self._replies = self._proc, None, None
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            for stream in (proc.stdin, proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass

    def stop(self) -> None:
        """Ends the worker (it starts again when needed)."""
        with self._lock:
            self._stop()

    def _kill(self) -> None:
        """At exit: no lock (a daemon thread may hold it mid-call), just end the worker."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()


def _forward_lines(stream, replies: queue.Queue) -> None:
    try:
        for line in stream:
            replies.put(line.strip())
    except (OSError, ValueError):
        pass
    replies.put(None)


def check_seconds(value, keyword: str) -> float:
    seconds = float(value)
    if not 0 < seconds <= 3600:
        raise ValueError(f"reward keyword {keyword}={value!r}: expected seconds in (0, 3600]")
    return seconds


class MathVerified(CountedReward):
    """Base of the rewards that ask math-verify (``math``, ``accuracy``'s default path). Each comparison waits at
    most ``timeout_seconds`` (setting, default 5) and all the comparisons of one call share one deadline,
    ``batch_timeout_seconds`` (setting, default 30) after the call starts: past it the rest are not sent, so a batch
    of answers that each take math-verify its full timeout (nested braces, towers of powers) costs the batch's
    deadline plus at most one worker start, not a timeout per answer. Every comparison left without a verdict, cut
    at a deadline or never sent, is counted as ``timeouts``."""

    def __init__(self, timeout_seconds=5.0, batch_timeout_seconds=30.0):
        self.timeout = check_seconds(timeout_seconds, "timeout_seconds")
        self.batch_timeout = check_seconds(batch_timeout_seconds, "batch_timeout_seconds")
        self._verifier: Optional[MathVerifier] = None  # its worker process, made at the first comparison

    def batch_deadline(self) -> float:
        return time.monotonic() + self.batch_timeout

    def verdict(self, answer: str, reference: str, deadline: float) -> str:
        """``math_verdict`` under this reward's timeout and the batch's ``deadline``; no verdict is counted."""
        if self._verifier is None:
            self._verifier = MathVerifier()
        verdict = math_verdict(self._verifier, answer, reference, self.timeout, deadline)
        if verdict == "no_verdict":
            self.count("timeouts")
        return verdict


# ---- rewards -----------------------------------------------------------------------------------------------

def count_score(answer: str, references: list[str]) -> float:
    counts = read_references(references, parse_count, "counting")
    return float(parse_count(answer) in counts)


def choice_score(answer: str, references: list[str]) -> float:
    letters = read_references(references, parse_choice, "multiple-choice (letter)")
    return float(parse_choice(answer) in letters)


def yes_no_score(answer: str, references: list[str]) -> float:
    words = read_references(references, parse_yes_no, "yes/no")
    return float(parse_yes_no(answer) in words)


@register("counting")
def counting_reward(completions, solution=None, **_) -> list[Optional[float]]:
    """R = 1 if the first number in the answer (digits, or a word zero..twenty) is a whole number equal to the
    solution's (an int, "3", "<answer> 3 </answer>", "three"), else 0."""
    return per_answer(count_score, completions, solution)


@register("counting_strict")
def counting_strict_reward(completions, solution=None, **_) -> list[Optional[float]]:
    """The published counting protocol (R1-V's and VLM-R1's eval scripts): R = 1 if the completion's first
    ``<answer>\\s*(\\d+)\\s*</answer>`` holds the solution's integer, else 0 ("<answer>There are 6 cubes.</answer>",
    number words and "6.0" score 0, which ``counting`` credits)."""
    solutions = solution if solution is not None else [None] * len(completions)
    out: list[Optional[float]] = []
    for text, sol in zip(completions, solutions):
        references = solution_references(sol)
        counts = read_references(references, parse_count, "counting") if references else None
        out.append(None if counts is None else float(isinstance(text, str) and parse_strict_count(text) in counts))
    return out


@register("mcq")
def mcq_reward(completions, solution=None, **_) -> list[Optional[float]]:
    """R = 1 if the chosen letter ("B", "(B) dog", "B. dog", "Answer: B.", "the answer is b") equals the solution's
    ("B", "(B)", "B. dog"), else 0; letters are read by ``parse_choice`` (the article "a" is not a choice)."""
    return per_answer(choice_score, completions, solution)


@register("yes_no")
def yes_no_reward(completions, solution=None, **_) -> list[Optional[float]]:
    """R = 1 if the first whole word yes / no of the answer (any case) equals the solution's (yes / no, or a
    boolean), else 0. Whole words: "I know" is not "no" (VLM-R1 matched substrings)."""
    return per_answer(yes_no_score, completions, solution)


SQRT_RE = re.compile(r"√\s*(?:\{([^{}]*)\}|(\d+(?:\.\d+)?|[A-Za-z]))")  # √{3}, √3, √x
# 140°, 140^{\circ}, 140^\circ (a closing brace only after its own opening one: \boxed{140^\circ} keeps its brace),
# 140\degree, 140度
DEGREE_RE = re.compile(r"\^\s*(?:\{\s*\\circ\s*\}|\\circ)|\\degree\b|°|度")
AFTER_QUANTITY = r"(?:(?<=[\d})\]π])|(?<=\\pi))\s*"  # a unit follows a number, a brace or bracket, or π
POWER = r"(?:\^\{?[23]\}?\^?|[²³])?"  # cm^{2}, cm^2^, cm²
UNIT_RE = re.compile(AFTER_QUANTITY + r"(?:平方厘米|平方米|平方千米|厘米|毫米|千米|米|海里|小时|分钟|秒|cm|mm|dm|km)"
                     + POWER + r"(?![A-Za-z])")
METRE_RE = re.compile(AFTER_QUANTITY + "m" + POWER + "$")  # only at the end: 2m+1 is an expression in m


# A stretch of LaTeX math inside prose: commands, digits, brackets and operators (no words, no relations)
MATH_RUN_RE = re.compile(r"(?:\\[A-Za-z]+|[\d.{}()\[\]^_+\-*/]|\s(?=[\\\d.{}()\[\]^_+\-*/]))+")
CJK_RE = re.compile(r"[\u3000-\u303f\u3400-\u9fff\uff00-\uffef]")
WORD_RE = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}")  # a word that is no \command
DELIMITED_RE = re.compile(r"\$|\\\(|\\\[|\\boxed")


def math_in_prose(text: str) -> str:
    """``$x$`` for the last math stretch ``x`` holding a digit or \\pi of a sentence without math delimiters
    ("So the length is 2\\sqrt{15}" -> "$2\\sqrt{15}$", "答案是140" -> "$140$"): math-verify reads LaTeX only between
    delimiters (the whole sentence wrapped reads as a product of its letters) and no number right after Chinese
    text. Returned as it is: text without prose or with delimiters, an English sentence without a LaTeX command
    (math-verify reads its plain numbers itself), and a stretch that touches a letter ("x^2+1": a variable the
    stretch would cut off) or leaves a bracket open."""
    if DELIMITED_RE.search(text) or not (CJK_RE.search(text) or ("\\" in text and WORD_RE.search(text))):
        return text
    runs = [m for m in MATH_RUN_RE.finditer(text) if re.search(r"\d|\\pi\b", m.group())]
    if not runs:
        return text
    last = runs[-1].group()
    run = last.strip(" +*/^_.")
    start = runs[-1].start() + last.index(run)
    around = text[start - 1:start] + text[start + len(run):start + len(run) + 1]
    if re.search(r"[A-Za-z]", around) or any(run.count(a) != run.count(b) for a, b in ("{}", "()", "[]")):
        return text
    return f"${run}$"


def normalize_math(text: str) -> str:
    """An answer as math-verify reads it, GeoQA's way of writing answers (R1-V's geoqa_test_prompts) turned into
    LaTeX: degree signs dropped (140° -> 140, 140^{\\circ} -> 140), units after a number, brace, bracket or π
    dropped (2√{3}cm -> 2√{3}, 4πcm^{2} -> 4π, 12米 -> 12, 9cm-9cm -> 9-9; a bare m only at the end, before a
    final full stop), √{x} / √x -> \\sqrt{x}, π -> \\pi, and the LaTeX of a sentence delimited (``math_in_prose``).
    Applied to both sides."""
    text = UNIT_RE.sub("", DEGREE_RE.sub("", text)).rstrip().removesuffix(".").removesuffix("。").rstrip()
    text = METRE_RE.sub("", text)
    text = SQRT_RE.sub(lambda m: "\\sqrt{" + (m.group(1) if m.group(1) is not None else m.group(2)) + "}", text)
    return math_in_prose(text.replace("π", "\\pi ").strip())


@register("all_match")
def all_match_reward(completions, solution=None, **_) -> list[Optional[float]]:
    """VLM-R1's all_match: R = 1 if the answer equals the solution as text after normalizing both (lower case, runs
    of whitespace as one space, surrounding spaces, quotes and sentence punctuation removed), else 0."""
    return per_answer(exact_match, completions, solution)


MAX_MATH_CHARS = 2000  # longer (whitespace runs counted as one) is no math answer; parsing 100k chars takes seconds


def math_verdict(verifier: MathVerifier, answer: str, reference: str, timeout: float,
                 deadline: Optional[float] = None) -> str:
    """``verifier.check`` of the gold ``reference`` and the ``answer``, both through ``normalize_math``:
    "equal", "different", "unparsed" (either side parsed to nothing, or longer than MAX_MATH_CHARS: not sent) or
    "no_verdict" (``timeout`` or ``deadline`` passed)."""
    answer, reference = normalize_math(answer), normalize_math(reference)
    if max(len(" ".join(answer.split())), len(" ".join(reference.split()))) > MAX_MATH_CHARS:
        return "unparsed"
    return verifier.check(reference, answer, timeout, deadline)


@register("math")
class MathReward(MathVerified):
    """R = 1 if math-verify accepts the answer: ``verify(parse(solution), parse(answer))``, the gold first (VLM-R1
    passed the prediction in the gold slot), both sides through ``normalize_math`` (GeoQA's 2√{3}, π, units and
    degree signs); the answer is the ``<answer>`` content, parsed on its own (so ``<answer>4</answer>`` reads as 4).
    When either side parses to nothing: 1 if the normalized strings are equal. 0 when no verdict comes in time
    (``timeout_seconds`` per comparison, ``batch_timeout_seconds`` per call: ``MathVerified``; counted as
    ``timeouts``). Safe in threads and worker processes (see ``MathVerifier``)."""

    def __call__(self, completions, solution=None, **_) -> list[Optional[float]]:
        deadline = self.batch_deadline()
        return per_answer(lambda answer, refs: max(self.score(answer, ref, deadline) for ref in refs),
                          completions, solution)

    def score(self, answer: str, reference: str, deadline: float) -> float:
        verdict = self.verdict(answer, reference, deadline)
        if verdict == "unparsed":
            return float(bool(normalize_answer(answer)) and normalize_answer(answer) == normalize_answer(reference))
        return float(verdict == "equal")

# ---- accuracy: route by reward_method ----------------------------------------------------------------------

METHOD_ALIASES = {
    "llm": "llm_judge", "judge": "llm_judge", "yesno": "yes_no", "yes/no": "yes_no", "choice": "mcq",
    "multiple_choice": "mcq", "count": "counting", "default": None, "accuracy": None, "": None,
    # VLM-R1's detection methods (methods are lower-cased). Its "map" is COCO AP@[.5:.95] (stats[0]) since its commit
    # b8a6462 (AP50 before), which is paddle_r1's "map"; od_ap50 is AP50.
    "od_ap": "map", "od_ap50": "map50", "odlength": "odLength",
}
# PaddleMIX r1_mllm's REC "accuracy" (train/grpo_rec.py iou_reward): 1 if IoU(answer box, solution box) > 0.5
BOX_ACCURACY = "iou_accuracy"


def whole_number(text: str) -> Optional[float]:
    """The number the whole text is ("3", " 3.0. ", "-2e3"), finite; None when it is anything more ("3 apples")."""
    text = normalize_answer(text)
    if not re.fullmatch(NUMBER, text):
        return None
    value = float(text)
    return value if math.isfinite(value) else None


def fallback_accuracy(answer: str, reference: str) -> float:
    """VLM-R1's default accuracy when math-verify could not read a side: when the whole solution is a number, 1 if
    the whole answer is that number, else 0 (VLM-R1's float(answer) == float(solution); "3 apples" is not 3 here);
    else, when the solution is a choice letter, 1 / 0 by letter; else the text similarity, difflib's ratio
    2 * matches / (len(a) + len(b)) of the normalized strings (1 only when they are equal)."""
    gold_number = whole_number(reference)
    if gold_number is not None:
        number = whole_number(answer)
        return float(number is not None and math.isclose(number, gold_number, rel_tol=1e-9, abs_tol=1e-9))
    gold_letter = parse_choice(reference)
    if gold_letter is not None:
        return float(parse_choice(answer) == gold_letter)
    return difflib.SequenceMatcher(None, normalize_answer(answer), normalize_answer(reference)).ratio()


def accepted_kwargs(fn: Callable, kwargs: dict) -> dict:
    """The keyword arguments (columns and settings) ``fn`` takes: all when it has ``**kwargs``, else those it
    names."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return {}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return dict(kwargs)
    names = {p.name for p in params}
    return {k: v for k, v in kwargs.items() if k in names}


@register("accuracy")
class AccuracyReward(MathVerified):
    """Routes each completion by its row's ``reward_method`` (VLM-R1's accu_reward_method) to the reward of that
    name in ``REWARDS``; a row without one whose solution is a box goes to ``iou_accuracy`` (PaddleMIX's REC
    ``accuracy``: 1 if IoU > 0.5) (aliases: llm / judge -> llm_judge, yesno -> yes_no, choice -> mcq, count -> counting,
    od_ap -> map, od_ap50 -> map50, odLength -> odLength; "default" / "accuracy" / empty -> the default below;
    VLM-R1's all_match and weighted_sum are rewards of those names). Rows sharing a method go to it in one call
    with their own columns (those it names, or all when it takes ``**kwargs``); a routed reward class is made
    once, with its default settings, and its counters are reported as ``<method>/<key>``.
    Without a method: R = math-verify's verdict (gold first, ``normalize_math`` on both sides), 1 or 0, when it
    reads both sides; else (a side it cannot read, or no verdict in time) ``fallback_accuracy`` (whole-number
    equality, choice letter, difflib text similarity); the best over the solution's references. An unknown
    method scores 0.0, is warned about once and is counted as ``unknown_method``; default-path math-verify
    timeouts as ``timeouts`` (settings ``timeout_seconds``, ``batch_timeout_seconds``: ``MathVerified``)."""

    def __init__(self, timeout_seconds=5.0, batch_timeout_seconds=30.0):
        super().__init__(timeout_seconds, batch_timeout_seconds)
        self._warned: set[str] = set()
        self._routed: dict[str, Callable] = {}

    def __call__(self, completions, **columns) -> list[Optional[float]]:
        methods = columns.get("reward_method") or [None] * len(completions)
        solutions = columns.get("solution") or [None] * len(completions)
        groups: dict = {}
        for i, (method, solution) in enumerate(zip(methods, solutions)):
            groups.setdefault(self.route(method, solution), []).append(i)
        scores: list[Optional[float]] = [0.0] * len(completions)
        for name, rows in groups.items():
            if name is not None and name not in REWARDS:
                continue  # unknown: 0.0, counted in resolve
            texts = [completions[i] for i in rows]
            row_columns = {k: [v[i] for i in rows] for k, v in columns.items()}
            if name is None:
                values = self.default(texts, **row_columns)
            else:
                fn = self.routed(name)
                values = fn(texts, **accepted_kwargs(fn, row_columns))
            for i, value in zip(rows, values):
                scores[i] = value
        return scores

    def routed(self, name: str) -> Callable:
        """The reward a method names: a function as it is, a class made once, counting through this reward."""
        if name not in self._routed:
            entry = REWARDS[name]
            if isinstance(entry, type):
                entry = entry()
                entry.report = lambda key, n: self.count(f"{name}/{key}", n)
            self._routed[name] = entry
        return self._routed[name]

    def route(self, method, solution) -> Optional[str]:
        """The reward for one row: its method's; without one, a box solution [x1, y1, x2, y2] gets PaddleMIX's REC
        accuracy (``iou_accuracy``: IoU > 0.5), anything else the default (None)."""
        name = self.resolve(method)
        return BOX_ACCURACY if name is None and as_box(solution) is not None else name

    def resolve(self, method) -> Optional[str]:
        """The reward name for a row's method (None: the default); an unknown one is counted and warned once."""
        if method is None:
            return None
        key = str(method).strip().lower()
        name = METHOD_ALIASES.get(key, key)
        if name is not None and name not in REWARDS:
            self.count("unknown_method")
            if key not in self._warned:
                self._warned.add(key)
                logger.warning("accuracy: reward_method %r is not a registered reward (known: %s); such rows "
                               "score 0.0, counted in rewards/<name>/unknown_method", method,
                               ", ".join(sorted(REWARDS)))
        return name

    def default(self, completions, solution=None, **_) -> list[Optional[float]]:
        """R = 1 / 0 by math-verify when it reads both sides, else ``fallback_accuracy``; best over the references."""
        deadline = self.batch_deadline()

        def one(answer: str, reference: str) -> float:
            verdict = self.verdict(answer, reference, deadline)
            if verdict in ("equal", "different"):
                return float(verdict == "equal")
            return fallback_accuracy(answer, reference)

        return per_answer(lambda answer, refs: max(one(answer, ref) for ref in refs), completions, solution)
