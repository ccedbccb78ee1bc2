import multiprocessing
import random
import string
import threading
import time
from concurrent.futures import ProcessPoolExecutor

import pytest

from paddle_r1.rewards import load_builtin_rewards
from paddle_r1.rewards.families.answers import parse_choice
from paddle_r1.rewards.manager import RewardManager

REWARDS = load_builtin_rewards()

counting = REWARDS["counting"]
mcq = REWARDS["mcq"]
yes_no = REWARDS["yes_no"]
math_reward = REWARDS["math"]()
accuracy = REWARDS["accuracy"]()

random.seed(0)
GARBAGE = [
    "", "   ", "NaN", "nan inf", "1e400", "-1e400", "\x00\uffff" * 50, "<answer>", "</answer>",
    "<answer><answer>4</answer></answer>",  # nested tags: malformed, not an answer
    "<answer>" * 200, "[[[[" * 500, "\\frac{" * 3000, "$" * 5000,
    "".join(random.choice(string.ascii_letters + string.punctuation + " \n") for _ in range(10_000)),
]


def counted(reward):
    """``reward`` with a reporter that adds its counts into the returned dict, as the RewardManager does."""
    counts = {}
    reward.report = lambda key, n: counts.__setitem__(key, counts.get(key, 0) + n)
    return reward, counts


def _rows(solution, n):
    return [solution] * n


# ---- counting ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("answer, solution, expected", [
    ("<think>.</think><answer>3</answer>", 3, 1.0),
    ("<answer>3</answer>", "<answer> 3 </answer>", 1.0),  # VLM-R1 stores solutions inside answer tags
    ("<answer>There are three cubes.</answer>", "3", 1.0),  # number words zero..twenty
    ("<answer>3.0</answer>", "three", 1.0),
    ("<answer>4</answer>", 3, 0.0),
    ("<answer>3.5</answer>", 3, 0.0),  # not a whole number
    ("<answer>1e400 or 3</answer>", 3, 1.0),  # an overflowing number is skipped
    ("no number here", 3, 0.0),
    ("<answer>3</answer>", [2, 3], 1.0),  # a list of acceptable answers
])
def test_counting(answer, solution, expected):
    assert counting([answer], solution=[solution]) == [expected]


def test_counting_solutions():
    assert counting(["<answer>3</answer>"], solution=[None]) == [None]  # not applicable
    with pytest.raises(ValueError, match="not a counting answer"):
        counting(["<answer>3</answer>"], solution=["many"])  # bad data is loud


# ---- multiple choice --------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, letter", [
    ("B", "B"), ("(B)", "B"), ("b.", "B"), ("[C]", "C"),  # rule 1: the letter alone
    ("(B) dog", "B"), ("B. dog", "B"), ("B) dog", "B"), ("B: dog", "B"),  # rule 2: a leading option marker
    ("Answer: B.", "B"), ("the answer is b", "B"), ("The answer is (b).", "B"), ("option (C)", "C"),  # rule 3
    ("ANSWER IS D", "D"), ("答案是C", "C"),
    ("Option A is wrong; the answer is C", "C"),  # rule 3: the last phrase
    ("I pick (C) here", "C"),  # rule 4: one bracketed capital
    ("A dog is in the picture", None),  # the article is not a choice
    ("the answer is a dog", None),
    ("(A) or (B)", "A"),  # rule 2 (leading marker) comes first
    ("I like (A) and (B)", None),  # rule 4 needs a single letter
    ("", None), ("none of them", None),
])
def test_parse_choice(text, letter):
    assert parse_choice(text) == letter


@pytest.mark.parametrize("answer, solution, expected", [
    ("<answer>B</answer>", "B", 1.0),
    ("<answer>(B) dog</answer>", "(B)", 1.0),
    ("<answer>the answer is b</answer>", "B. dog", 1.0),
    ("<answer>A dog.</answer>", "A", 0.0),  # reads no letter, so no credit for the article
    ("<answer>C</answer>", "B. dog", 0.0),
])
def test_mcq(answer, solution, expected):
    assert mcq([answer], solution=[solution]) == [expected]


# ---- yes / no ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("answer, solution, expected", [
    ("<answer>Yes</answer>", "yes", 1.0),
    ("<answer>No.</answer>", "<answer> no </answer>", 1.0),
    ("<answer>I know</answer>", "no", 0.0),  # VLM-R1 matched the substring "no" in "know"
    ("<answer>I know it is not</answer>", "no", 0.0),
    ("<answer>Yes, but no</answer>", "no", 0.0),  # the first yes / no word decides
    ("<answer>YES</answer>", True, 1.0),  # boolean solutions
    ("<answer>no</answer>", False, 1.0),
    ("<answer>Nope</answer>", "no", 0.0),
])
def test_yes_no(answer, solution, expected):
    assert yes_no([answer], solution=[solution]) == [expected]


# ---- math -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("answer, solution, expected", [
    ("<answer>4</answer>", "4", 1.0),  # touching the tags: math-verify's parse of the whole text finds nothing
    ("<think>2+2</think><answer>4</answer>", "<answer> 4 </answer>", 1.0),
    ("<answer>0.5</answer>", "1/2", 1.0),
    ("<answer>\\frac{1}{2}</answer>", "0.5", 1.0),
    ("The result is $\\boxed{7}$", "7", 1.0),  # no tags: the whole text
    ("<answer>2\\pi</answer>", "2\\pi", 1.0),  # bare LaTeX is read inside $...$
    ("<answer>2</answer>", "2\\pi", 0.0),  # (math-verify reads the plain text "2\pi" as 2)
    # gold first: math-verify's verify(gold, target) is not symmetric. With the gold interval written as an
    # inequality, the prediction [1, 2] is accepted; VLM-R1's verify(pred, gold) says no.
    ("<answer>$[1,2]$</answer>", "$1 \\le x \\le 2$", 1.0),
    # ... and with the gold an interval, the prediction x < 2 is refused; VLM-R1's order accepts it.
    ("<answer>$x<2$</answer>", "$(-\\infty,2)$", 0.0),
    ("<answer>Blue.</answer>", "blue", 1.0),  # nothing parses: normalized exact match
    ("<answer>lube</answer>", "blue", 0.0),  # (letters are not multiplied as symbols: b*l*u*e == l*u*b*e)
    ("<answer>5</answer>", "4", 0.0),
])
def test_math(answer, solution, expected):
    assert math_reward([answer], solution=[solution]) == [expected]


def test_math_gold_order_matters_in_math_verify():
    # the asymmetry the reward relies on, on math-verify itself: VLM-R1's order verify(pred, gold) refuses [1, 2]
    from paddle_r1.rewards.families.answers import MathVerifier

    verifier = MathVerifier()
    assert verifier.check("$1 \\le x \\le 2$", "$[1,2]$", 5.0) == "equal"  # check(gold, pred)
    assert verifier.check("$[1,2]$", "$1 \\le x \\le 2$", 5.0) == "different"
    verifier.stop()


def test_math_garbage_scores_zero():
    assert math_reward(GARBAGE, solution=_rows("4", len(GARBAGE))) == [0.0] * len(GARBAGE)
    assert math_reward(["<answer>4</answer>"], solution=[None]) == [None]


def test_math_in_a_thread():
    # math-verify's default timeouts call signal.alarm, which raises outside the main thread
    out = {}
    thread = threading.Thread(target=lambda: out.setdefault("scores", math_reward(
        ["<answer>4</answer>", "<answer>5</answer>"], solution=["4", "4"])))
    thread.start()
    thread.join(60)
    assert out["scores"] == [1.0, 0.0]


def _math_in_worker():
    return REWARDS["math"]()(["<answer>1/2</answer>", "<answer>5</answer>"], solution=["0.5", "4"])


def test_math_in_a_process_pool_worker():
    math_reward(["<answer>4</answer>"], solution=["4"])  # the parent's worker is running when the pool forks
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("fork")) as pool:
        assert pool.submit(_math_in_worker).result(timeout=60) == [1.0, 0.0]
    assert math_reward(["<answer>4</answer>"], solution=["4"]) == [1.0]  # the parent's worker is untouched


def test_math_timeout_scores_zero_in_bounded_time():
    quick, counts = counted(REWARDS["math"](timeout_seconds=0.3))
    slow = "<answer>$9^{9^{9^{9}}}$</answer>"  # sympy works on 9^(9^387420489) for ever
    start = time.monotonic()
    assert quick([slow], solution=["1"]) == [0.0]
    assert time.monotonic() - start < 30  # the deadline (plus at most one worker start), not for ever
    assert counts == {"timeouts": 1}
    assert quick(["<answer>4</answer>"], solution=["4"]) == [1.0]  # a fresh worker takes over
    out = {}
    thread = threading.Thread(target=lambda: out.setdefault("scores", quick([slow], solution=["2"])))
    thread.start()
    thread.join(60)
    assert out["scores"] == [0.0]
    with pytest.raises(ValueError, match="timeout_seconds"):
        REWARDS["math"](timeout_seconds=0)


def test_a_batch_of_slow_answers_shares_one_deadline():
    """Each comparison used to wait its own timeout, so a batch of k slow answers cost k timeouts and k
    worker restarts; now one call's comparisons share ``batch_timeout_seconds``, the rest are not sent, and every
    comparison left without a verdict is counted."""
    reward, counts = counted(REWARDS["math"](timeout_seconds=1.0, batch_timeout_seconds=2.0))
    slow = [f"<answer>$9^{{9^{{9^{{{9 + i}}}}}}}$</answer>" for i in range(10)]  # each would take its full 1 s
    start = time.monotonic()
    assert reward(["<answer>4</answer>"] + slow, solution=["4"] + ["1"] * 10) == [1.0] + [0.0] * 10
    assert time.monotonic() - start < 2.0 + 8.0  # the batch's deadline, plus at most one worker start
    assert counts == {"timeouts": 10}
    assert reward(["<answer>4</answer>"], solution=["4"]) == [1.0]  # the next call has its own deadline
    accurate, counts = counted(REWARDS["accuracy"](timeout_seconds=1.0, batch_timeout_seconds=2.0))
    start = time.monotonic()
    assert accurate(slow, solution=["1"] * 10) == [0.0] * 10
    assert time.monotonic() - start < 2.0 + 8.0 and counts == {"timeouts": 10}
    with pytest.raises(ValueError, match="batch_timeout_seconds"):
        REWARDS["math"](batch_timeout_seconds=-1)


# ---- accuracy ---------------------------------------------------------------------------------------------

def test_accuracy_routes_by_reward_method():
    completions = ["<answer>I know</answer>", "<answer>(B) dog</answer>", "<answer>0.5</answer>",
                   "<answer>three</answer>", "<answer>[0, 0, 10, 10]</answer>"]
    columns = dict(
        solution=["no", "B", "1/2", 3, [0, 0, 10, 20]],
        reward_method=["yes_no", "MCQ", "math", "count", "iou"],  # case and aliases
        image_sizes=[[(100, 100)]] * 5, input_sizes=[[(100, 100)]] * 5, coord_system=["abs_original"] * 5,
    )
    # yes_no: "I know" holds no "no"; mcq B; math 1/2 = 0.5; counting 3; IoU 100 / 200
    assert accuracy(completions, **columns) == pytest.approx([0.0, 1.0, 1.0, 1.0, 0.5])


def test_accuracy_default_path():
    completions = ["<answer>0.5</answer>", "<answer>3 apples</answer>", "<answer>(B) dog</answer>",
                   "<answer>a cat</answer>", "<answer>7</answer>", "<answer>C</answer>"]
    solutions = ["1/2", "3", "B", "a black cat", "8", "B"]
    # math-verify; math-verify (reads 3); choice letter; difflib: "a cat" vs "a black cat" share " cat" and "a",
    # 2 * 5 / (5 + 11) = 0.625; numbers differ; letters differ
    scores = accuracy(completions, solution=solutions, reward_method=[None] * 6)
    assert scores == pytest.approx([1.0, 1.0, 1.0, 0.625, 0.0, 0.0])
    assert accuracy(completions[:1], solution=solutions[:1]) == [1.0]  # no reward_method column at all


def test_accuracy_unknown_method_is_counted_not_raised(caplog):
    manager = RewardManager(["accuracy"])
    with caplog.at_level("WARNING"):
        scores = manager.score(["<answer>4</answer>"] * 3, dict(solution=["4"] * 3,
                                                                reward_method=["nope", "nope", None]))
    assert scores.per_function[:, 0].tolist() == [0.0, 0.0, 1.0]
    assert scores.counters == {"rewards/accuracy/unknown_method": 2}  # no timeouts
    assert manager.pop_counters() == {}  # popped
    assert "'nope' is not a registered reward" in caplog.text


def test_accuracy_resolves_at_call_time_and_passes_what_the_target_takes(monkeypatch):
    seen = {}

    def late(completions, solution, weight):  # registered after accuracy was built; no **columns
        seen.update(n=len(completions), weight=weight)
        return [w * (c == s) for c, s, w in zip(completions, solution, weight)]

    monkeypatch.setitem(REWARDS, "late", late)
    scores = accuracy(["x", "q", "<answer>yes</answer>"], solution=["x", "y", "yes"],
                      reward_method=["late", "late", "yes_no"], problem=["p"] * 3, weight=[0.5] * 3,
                      unused_column=[1] * 3)
    assert scores == [0.5, 0.0, 1.0] and seen == {"n": 2, "weight": [0.5, 0.5]}  # one call for both "late" rows
    assert accuracy.resolve("llm") == "llm_judge" and accuracy.resolve(" Yes/No ") == "yes_no"
    assert accuracy.resolve("default") is None and accuracy.resolve("accuracy") is None


def test_accuracy_garbage_scores_zero():
    n = len(GARBAGE)
    assert accuracy(GARBAGE, solution=_rows("4", n), reward_method=_rows(None, n)) == [0.0] * n
    for method, solution in [("mcq", "B"), ("yes_no", "yes"), ("counting", "4"), ("math", "4")]:
        assert accuracy(GARBAGE, solution=_rows(solution, n), reward_method=_rows(method, n)) == [0.0] * n


# ---- GeoQA answers: the shapes of R1-V's geoqa_test_prompts ground truths ------------------

@pytest.mark.parametrize("answer, solution, expected", [
    ("2\\sqrt{3}", "2√{3}", 1.0), ("2", "2√{3}", 0.0),  # math-verify alone read 2√{3} as 2
    ("2√{3}", "2\\sqrt{3}", 1.0), ("\\sqrt{3}", "√{3}", 1.0), ("3", "√{3}", 0.0),
    ("\\frac{4}{3}\\pi", "\\frac{4}{3}π", 1.0), ("\\frac{4}{3}", "\\frac{4}{3}π", 0.0),
    ("\\pi", "π", 1.0), ("3", "π", 0.0),
    ("2\\sqrt{3}", "2√{3}cm", 1.0), ("$2\\sqrt{3}$ cm", "2√{3}cm", 1.0), ("2", "2√{3}cm", 0.0),
    ("140", "140°", 1.0), ("140°", "140", 1.0), ("140^{\\circ}", "140°", 1.0), ("40", "140°", 0.0),
    ("4\\pi", "4πcm^{2}", 1.0), ("4", "4πcm^{2}", 0.0), ("6", "6cm²", 1.0), ("12", "12米", 1.0),
    ("\\sqrt{3}+1", "(√{3}+1)小时", 1.0), ("\\frac{\\sqrt{3}}{2}", "\\frac{√{3}}{2}", 1.0),
    ("\\frac{1}{2}", "\\frac{√{3}}{2}", 0.0), ("5", "5海里", 1.0), ("10", "5海里", 0.0),
])
def test_math_reads_geoqa_answers(answer, solution, expected):
    completion = f"<think>.</think><answer>{answer}</answer>"
    assert math_reward([completion], solution=[solution]) == [expected]
    assert accuracy([completion], solution=[solution]) == [expected]


def test_geoqa_eval_scores_through_the_normalized_math_reward():
    from paddle_r1.evaluation.tasks import TASKS

    texts = ["<answer>2\\sqrt{3}</answer>", "<answer>2</answer>", "<answer>140</answer>"]
    assert TASKS["geoqa"].score(texts, {"solution": ["2√{3}", "2√{3}", "140°"]}) == [True, False, True]


# ---- accuracy after math-verify said no --------------------------------

@pytest.mark.parametrize("answer, solution", [
    ("1", "1/2"), ("1.0", "1/2"), ("\\boxed{1}", "1/2"), ("x^2+1", "2\\sqrt{3}"),
    ("1", "\\frac{1}{2}"), ("3", "\\sqrt{3}"), ("2", "2\\pi"),  # the first number no longer decides
    ("\\frac{1}{2}+1", "\\frac{1}{2}"), ("\\frac{1}{2}+1" + " " * 320, "\\frac{1}{2}"),  # padded past 300 chars
    ("\\frac{1}{2}+1" + "\n" * 320, "\\frac{1}{2}"), ("3 or 4", "3"), ("34", "3"),
])
def test_wrong_answers_get_no_credit(answer, solution):
    completion = f"<answer>{answer}</answer>"
    assert math_reward([completion], solution=[solution]) == [0.0]
    assert accuracy([completion], solution=[solution]) == [0.0]


@pytest.mark.parametrize("answer, solution", [
    ("1+x^2", "x^2+1"), ("0.5", "1/2"), ("\\frac{1}{2}" + " " * 320, "\\frac{1}{2}"), ("3", "3.0"), ("3.", "3"),
])
def test_equal_answers_get_credit(answer, solution):
    completion = f"<answer>{answer}</answer>"
    assert math_reward([completion], solution=[solution]) == [1.0]
    assert accuracy([completion], solution=[solution]) == [1.0]


@pytest.mark.parametrize("answer, solution, expected", [
    ("3", "3", 1.0), ("3.0", "3", 1.0), ("3 apples", "3", 1.0),  # math-verify reads "3 apples" as 3
    ("C", "B", 0.0), ("(B) dog", "B", 1.0),  # math-verify reads neither: the choice letter decides
])
def test_accuracy_default_verdicts(answer, solution, expected):
    assert accuracy([f"<answer>{answer}</answer>"], solution=[solution]) == [expected]


def test_accuracy_fallback_needs_the_whole_answer():
    from paddle_r1.rewards.families.answers import fallback_accuracy

    assert fallback_accuracy("3", "3") == 1.0 and fallback_accuracy("4", "4.0.") == 1.0
    assert fallback_accuracy("3 apples", "3") == 0.0 and fallback_accuracy("1e400", "4") == 0.0
    # "1/2" is not a whole number: text similarity 2 * 1 / (1 + 3) as in VLM-R1 (the first number gave 1.0)
    assert fallback_accuracy("1", "1/2") == 0.5
    assert 0.0 < fallback_accuracy("300 ms", "300 m/s") < 1.0  # not a whole number: text similarity


def test_accuracy_on_rec_boxes_is_paddlemix_iou_accuracy():
    """PaddleMIX r1_mllm's REC default reward_funcs [accuracy, format]: accuracy is 1 if IoU > 0.5 (grpo_rec.py)."""
    truth = [100, 100, 200, 200]
    completions = ["<think>x</think><answer>[101, 101, 200, 200]</answer>",  # IoU 0.98
                   "<answer>200</answer>", "<answer>[100, 100, 140, 200]</answer>",  # a number; IoU 0.4
                   "<answer>{\"bbox_2d\": [150, 100, 250, 200]}</answer>"]  # IoU 1/3
    columns = dict(solution=[truth] * 4, image_sizes=[[(640, 480)]] * 4, input_sizes=[[(640, 480)]] * 4,
                   coord_system=["abs_original"] * 4)
    assert accuracy(completions, **columns) == [1.0, 0.0, 0.0, 0.0]
    # a config's own [accuracy, format] reaches it through the manager as well
    scores = RewardManager(["accuracy", "format"]).score(completions[:1], {k: v[:1] for k, v in columns.items()})
    assert scores.per_function[0].tolist() == [1.0, 1.0]


def test_accuracy_map_keeps_vlm_r1s_meaning():
    """VLM-R1's accu_reward_method "map" is COCO stats[0], AP@[.5:.95] (grpo_jsonl.py since b8a6462); od_ap50 is
    AP50. One box at IoU 0.6: AP50 = 1, AP@[.5:.95] = 0.3 (thresholds 0.5, 0.55 and 0.6 of ten)."""
    truth = '[{"bbox_2d": [0, 0, 100, 100], "label": "cat"}]'
    answer = '<answer>[{"bbox_2d": [0, 0, 100, 60], "label": "cat"}]</answer>'
    columns = dict(solution=[truth] * 2, reward_method=["map", "od_ap50"], image_sizes=[[(640, 480)]] * 2,
                   input_sizes=[[(640, 480)]] * 2, coord_system=["abs_original"] * 2)
    assert accuracy([answer] * 2, **columns) == pytest.approx([0.3, 1.0], abs=1e-6)
