"""OCR rewards: ocr_ned against a plain dynamic-programming Levenshtein (Latin and CJK text), the normalisation
settings on full-width, spaced and cased text, ocr_exact, and teds against table-recognition-metric's own TEDS on
HTML (PubTabNet's implementation), across HTML and OTSL, with its size bound."""
import random

import pytest

from paddle_r1.config.jobs import ConfigError
from paddle_r1.rewards import BadSolution, load_builtin_rewards
from paddle_r1.rewards.manager import bind_reward

REWARDS = load_builtin_rewards()
ned, exact = REWARDS["ocr_ned"], REWARDS["ocr_exact"]
CJK = "北京市海淀区中关村大街识别文字表格公式图表发票金额日期"


def levenshtein(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        previous, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (ca != cb))
    return row[-1]


def test_ned_is_one_minus_levenshtein_over_the_longer_text():
    rng = random.Random(32)
    raw = dict(fold_fullwidth=False, ignore_space=False)
    for _ in range(200):
        alphabet = rng.choice(["abcde ", CJK, CJK[:5] + "ab1"])
        gold = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        answer = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        expected = 1.0 - levenshtein(answer, gold) / max(len(answer), len(gold), 1)
        assert ned([answer], solution=[gold], **raw)[0] == pytest.approx(expected, abs=1e-12), (answer, gold)
    assert ned(["kitten"], solution=["sitting"]) == [pytest.approx(1 - 3 / 7)]
    assert ned(["北京市海定区"], solution=["北京市海淀区"]) == [pytest.approx(1 - 1 / 6)]
    assert ned([""], solution=[""]) == [1.0] and ned([""], solution=["文字"]) == [0.0]


def test_normalisation_settings_on_cjk_full_width_spaced_and_cased_text():
    gold = "发票金额：ABC-123，合计 45 元"
    answer = "发票金额：ＡＢＣ－１２３，合计　４５　元"  # full-width letters, digits, hyphen and ideographic spaces
    assert exact([answer], solution=[gold]) == [1.0]
    assert exact([answer], solution=[gold], fold_fullwidth=False) == [0.0]
    assert exact(["识别 文字\n表格"], solution=["识别文字表格"]) == [1.0]
    assert exact(["识别 文字"], solution=["识别文字"], ignore_space=False) == [0.0]
    assert exact(["Invoice TOTAL"], solution=["invoice total"]) == [0.0]
    assert exact(["Invoice TOTAL"], solution=["invoice total"], ignore_case=True) == [1.0]
    assert ned(["<think>先看图</think><answer>识别文字</answer>"], solution=["识别文字"]) == [1.0]


def test_exact_never_credits_a_partial_or_padded_wrong_answer():
    for answer in ["北京", "北京市海淀区中关村", "北京市 海淀", "海淀区北京市", "北京市海淀区。"]:
        assert exact([answer], solution=["北京市海淀区"]) == [0.0], answer
        assert 0.0 <= ned([answer], solution=["北京市海淀区"])[0] < 1.0, answer
    assert ned(["x" * 50_000], solution=["北京市海淀区"])[0] == 0.0


def test_bad_solutions_and_settings_are_named():
    with pytest.raises(BadSolution, match="is not text to recognise"):
        ned(["a"], solution=[["a"]])
    with pytest.raises(ConfigError, match="ocr_ned.*ignore_space='yes'"):
        bind_reward("ocr_ned", {"ignore_space": "yes"})
    with pytest.raises(ConfigError, match="teds.*max_cells=0"):
        bind_reward("teds", {"max_cells": 0})
    with pytest.raises(BadSolution, match="holds no HTML or OTSL table"):
        bind_reward("teds", {})(["<fcel>a<nl>"], solution=["plain text"])


def html(rows) -> str:
    """A table in PubTabNet's HTML: rows of (text, colspan) cells."""
    body = "".join("<tr>" + "".join(f'<td colspan="{span}">{text}</td>' if span > 1 else f"<td>{text}</td>"
                                    for text, span in row) + "</tr>" for row in rows)
    return f"<html><body><table>{body}</table></body></html>"


def otsl(rows) -> str:
    """The same table in OTSL, as PaddleOCR-VL writes it."""
    return "".join("".join(f"<fcel>{text}" + "<lcel>" * (span - 1) for text, span in row) + "<nl>" for row in rows)


def random_table(rng: random.Random):
    return [[("".join(rng.choice(CJK + "0123ab") for _ in range(rng.randint(0, 4))), rng.choice([1, 1, 1, 2]))
             for _ in range(rng.randint(1, 4))] for _ in range(rng.randint(1, 4))]


def test_teds_equals_pubtabnets_teds_in_html_and_reads_otsl_alike():
    from table_recognition_metric import TEDS

    rng = random.Random(7)
    teds, structure = bind_reward("teds", {}), bind_reward("teds", {"structure_only": True})
    for _ in range(60):
        gold, answer = random_table(rng), random_table(rng)
        for structure_only, reward in ((False, teds), (True, structure)):
            expected = TEDS(structure_only=structure_only)(html(answer), html(gold))
            assert reward([html(answer)], solution=[html(gold)])[0] == pytest.approx(expected), (answer, gold)
            assert reward([otsl(answer)], solution=[html(gold)])[0] == pytest.approx(expected), (answer, gold)
            assert reward([html(answer)], solution=[otsl(gold)])[0] == pytest.approx(expected), (answer, gold)
    gold = [[("金额", 1), ("日期", 1)], [("45", 1), ("", 1)]]
    assert teds([otsl(gold)], solution=[html(gold)]) == [1.0]
    missing_cell = [[("金额", 1), ("日期", 1)], [("45", 1)]]
    assert teds([otsl(missing_cell)], solution=[otsl(gold)]) == [pytest.approx(1 - 1 / 7)]  # 7 nodes, 1 deleted
    other_text = [[("金额", 1), ("日", 1)], [("46", 1), ("", 1)]]
    assert structure([otsl(other_text)], solution=[otsl(gold)]) == [1.0]
    assert teds([otsl(other_text)], solution=[otsl(gold)]) == [pytest.approx(1 - (1 / 2 + 1 / 2) / 7)]
    assert teds(["no table here", ""], solution=[otsl(gold)] * 2) == [0.0, 0.0]


def test_teds_spans_from_otsl_merges():
    """<lcel> continues the cell to the left, <ucel> the one above, <xcel> both: the spans HTML spells out."""
    teds = bind_reward("teds", {"structure_only": True})
    merged = "<fcel>a<lcel><fcel>b<nl><ucel><xcel><fcel>c<nl>"
    spans = '<table><tr><td colspan="2" rowspan="2">a</td><td>b</td></tr><tr><td>c</td></tr></table>'
    assert teds([merged], solution=[spans]) == [1.0]
    assert teds(["<fcel>a<fcel>x<fcel>b<nl><fcel>y<fcel>z<fcel>c<nl>"], solution=[spans])[0] < 1.0


def test_teds_bounds_its_cost_by_the_number_of_cells():
    reward = bind_reward("teds", {"max_cells": 6})
    counts = {}
    reward.report = lambda key, n: counts.update({key: counts.get(key, 0) + n})
    small, large = otsl([[("a", 1)] * 3] * 2), otsl([[("a", 1)] * 3] * 3)
    assert reward([large, small], solution=[small, large]) == [0.0, None]
    assert counts == {"too_large": 1, "solution_too_large": 1}
