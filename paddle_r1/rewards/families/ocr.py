"""OCR rewards: text recognised from an image against the sample's solution text, and recognised tables.

The answer is the completion's last ``<answer>...</answer>`` content, or the whole completion when it has none
(PaddleOCR-VL answers with the text alone). Both sides are normalised the same way first (``normalize``):

- ``fold_fullwidth`` (default true): full-width ASCII forms (U+FF01..U+FF5E) and the ideographic space (U+3000) as
  their ASCII counterparts: "ＡＢＣ１２３" reads as "ABC123";
- ``ignore_space`` (default true, as PaddleOCR's recognition metric ``RecMetric(ignore_space=True)``): every
  whitespace character removed;
- ``ignore_case`` (default false): case-folded.

``ocr_ned`` is 1 - NED, the similarity PaddleOCR reports as ``norm_edit_dis`` and OmniDocBench as 1 - edit distance;
``ocr_exact`` is exact-match accuracy; ``teds`` is the table structure reward (TEDS, PubTabNet's Tree Edit Distance
based Similarity). Edit distances come from rapidfuzz (bit-parallel Levenshtein: time ~ len(a) * len(b) / 64;
``python benchmarks/rewards.py --ocr_sizes`` times long texts), tree edit distances
from apted through table-recognition-metric's TEDS tree and costs. A solution that is not text (or not a table, for
``teds``) is bad data: ``BadSolution``.
"""
from __future__ import annotations

import re
from typing import Optional

from ..registry import BadSolution, CountedReward, register
from ..parsing import answer_text

FULLWIDTH = {code: code - 0xFEE0 for code in range(0xFF01, 0xFF5F)} | {0x3000: 0x20}
WHITESPACE_RE = re.compile(r"\s+")


def normalize(text: str, fold_fullwidth: bool = True, ignore_space: bool = True, ignore_case: bool = False) -> str:
    if fold_fullwidth:
        text = text.translate(FULLWIDTH)
    if ignore_space:
        text = WHITESPACE_RE.sub("", text)
    return text.casefold() if ignore_case else text


def _check_flags(**flags) -> None:
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise ValueError(f"reward setting {name}={value!r}: expected true or false")


def _texts(completions, solution, settings: dict):
    """(normalised answer, normalised solution) per completion; (None, None) where the sample has no solution."""
    _check_flags(**settings)
    solutions = solution if solution is not None else [None] * len(completions)
    for completion, gold in zip(completions, solutions):
        if gold is None:
            yield None, None
            continue
        if not isinstance(gold, str):
            raise BadSolution(f"solution {gold!r} is not text to recognise")
        answer = answer_text(completion) if isinstance(completion, str) else ""
        yield normalize(answer, **settings), normalize(gold, **settings)


def text_similarity(answer: str, gold: str) -> float:
    """1 - Levenshtein(answer, gold) / max(len(answer), len(gold)); 1.0 for two empty texts."""
    from rapidfuzz.distance import Levenshtein

    return 1.0 - Levenshtein.normalized_distance(answer, gold)


@register("ocr_ned")
def ocr_ned(completions, solution=None, fold_fullwidth=True, ignore_space=True, ignore_case=False,
            **_) -> list[Optional[float]]:
    """1 - NED = 1 - Lev(a, s) / max(|a|, |s|) over the normalised answer a and solution s (Lev: the fewest single-
    character insertions, deletions and substitutions turning a into s); 1.0 when both are empty, 0.0 for an empty
    answer to a non-empty solution. Partial credit: one wrong character in ten scores 0.9."""
    settings = dict(fold_fullwidth=fold_fullwidth, ignore_space=ignore_space, ignore_case=ignore_case)
    return [None if gold is None else text_similarity(answer, gold)
            for answer, gold in _texts(completions, solution, settings)]


@register("ocr_exact")
def ocr_exact(completions, solution=None, fold_fullwidth=True, ignore_space=True, ignore_case=False,
              **_) -> list[Optional[float]]:
    """1.0 when the normalised answer equals the normalised solution, else 0.0 (exact-match accuracy)."""
    settings = dict(fold_fullwidth=fold_fullwidth, ignore_space=ignore_space, ignore_case=ignore_case)
    return [None if gold is None else float(answer == gold) for answer, gold in _texts(completions, solution, settings)]


# ---- tables --------------------------------------------------------------------------------------------------

# OTSL (PaddleOCR-VL's table output): <fcel> starts a cell with text, <ecel> an empty one, <lcel> / <ucel> / <xcel>
# continue the cell to the left / above / both (spans), <nl> ends a row
OTSL_RE = re.compile(r"<(fcel|ecel|lcel|ucel|xcel|nl)>")
# HTML: rows, cells (td or th) with their attributes, cell ends; other tags inside a cell are dropped from its text
HTML_RE = re.compile(r"<(/?)(tr|td|th)\b([^<>]*)>", re.IGNORECASE)
SPAN_RE = re.compile(r"""\b(colspan|rowspan)\s*=\s*["']?\s*(\d{1,4})""", re.IGNORECASE)
TAG_RE = re.compile(r"<[^<>]*>")


class Cell:
    __slots__ = ("colspan", "rowspan", "text")

    def __init__(self, text: str, colspan: int = 1, rowspan: int = 1):
        self.text, self.colspan, self.rowspan = text, colspan, rowspan


def read_table(text: str) -> Optional[list[list[Cell]]]:
    """The rows of the table in ``text``, HTML (``<tr>``, ``<td>`` / ``<th>`` with colspan / rowspan) or OTSL; None
    when it holds no cell. One pass over the text each (linear time)."""
    if HTML_RE.search(text):
        return _html_rows(text)
    if OTSL_RE.search(text):
        return _otsl_rows(text)
    return None


def _html_rows(text: str) -> Optional[list[list[Cell]]]:
    rows: list[list[Cell]] = []
    open_cell = None  # (start of its text, colspan, rowspan)
    for match in HTML_RE.finditer(text):
        closing, tag = match.group(1), match.group(2).lower()
        if open_cell is not None:  # a cell ends at its </td>, or where the next cell or row starts
            start, colspan, rowspan = open_cell
            rows[-1].append(Cell(TAG_RE.sub("", text[start:match.start()]).strip(), colspan, rowspan))
            open_cell = None
        if tag == "tr" and not closing:
            rows.append([])
        elif tag in ("td", "th") and not closing:
            if not rows:
                rows.append([])
            spans = {k.lower(): max(1, int(v)) for k, v in SPAN_RE.findall(match.group(3))}
            open_cell = (match.end(), spans.get("colspan", 1), spans.get("rowspan", 1))
    if open_cell is not None:
        start, colspan, rowspan = open_cell
        rows[-1].append(Cell(TAG_RE.sub("", text[start:]).strip(), colspan, rowspan))
    rows = [row for row in rows if row]
    return rows or None


def _otsl_rows(text: str) -> Optional[list[list[Cell]]]:
    """OTSL tokens into a grid, then each <fcel> / <ecel> a cell spanning the <lcel> run to its right and the
    <ucel> run below it (<xcel> counts for both); a continuation with no cell to continue is dropped."""
    grid: list[list[tuple[str, str]]] = [[]]
    matches = list(OTSL_RE.finditer(text))
    for i, match in enumerate(matches):
        token = match.group(1)
        if token == "nl":
            grid.append([])
            continue
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        grid[-1].append((token, text[match.end():end].strip() if token == "fcel" else ""))
    rows = []
    for r, row in enumerate(grid):
        cells = []
        for c, (token, content) in enumerate(row):
            if token not in ("fcel", "ecel"):
                continue
            colspan = 1
            while c + colspan < len(row) and row[c + colspan][0] in ("lcel", "xcel"):
                colspan += 1
            rowspan = 1
            while (r + rowspan < len(grid) and c < len(grid[r + rowspan])
                   and grid[r + rowspan][c][0] in ("ucel", "xcel")):
                rowspan += 1
            cells.append(Cell(content, colspan, rowspan))
        if cells:
            rows.append(cells)
    return rows or None


def _cell_count(rows: list[list[Cell]]) -> int:
    return sum(len(row) for row in rows)


def teds_score(answer_rows: list[list[Cell]], gold_rows: list[list[Cell]], structure_only: bool) -> float:
    """TEDS = 1 - TED(T_a, T_s) / max(|T_a|, |T_s|) over the trees table -> rows -> cells (|T|: nodes). TED is the
    cheapest edit script (apted): inserting or deleting a node costs 1, turning a node into another costs 1 when their
    kind, colspan or rowspan differ, else (two cells) the normalised Levenshtein distance of their texts (0 with
    ``structure_only``: TEDS-S)."""
    from apted import APTED
    from table_recognition_metric.utils import CustomConfig, TableTree

    def tree(rows):
        return TableTree("table", None, None, None, *(
            TableTree("tr", None, None, None, *(
                TableTree("td", cell.colspan, cell.rowspan, "" if structure_only else cell.text)
                for cell in row))
            for row in rows))

    answer_tree, gold_tree = tree(answer_rows), tree(gold_rows)
    distance = APTED(answer_tree, gold_tree, CustomConfig()).compute_edit_distance()
    return 1.0 - distance / max(answer_tree.size(), gold_tree.size())


@register("teds")
class TEDSReward(CountedReward):
    """Table recognition: TEDS (``teds_score``) between the table in the answer and the solution's, each HTML
    (``<tr>``, ``<td>`` / ``<th>``, colspan / rowspan; the text of a cell without its inner tags) or OTSL
    (PaddleOCR-VL's ``<fcel>`` / ``<ecel>`` / ``<lcel>`` / ``<ucel>`` / ``<xcel>`` / ``<nl>``), and one format
    may be scored against the other. An answer with no cell scores 0.0.

    Settings: ``structure_only`` (default false: TEDS-S, cells compared by their spans only); ``max_cells`` (default
    200): the tree edit distance grows faster than the square of the tables' size (``python benchmarks/rewards.py
    --ocr_sizes`` times 100-, 200- and 400-cell tables), so an answer with more cells scores
    0.0 (counted as ``too_large``) and a solution with more is scored None (counted as ``solution_too_large``; raise
    ``max_cells`` to score those samples)."""

    def __init__(self, structure_only=False, max_cells=200):
        _check_flags(structure_only=structure_only)
        if isinstance(max_cells, bool) or not isinstance(max_cells, int) or max_cells < 1:
            raise ValueError(f"reward setting max_cells={max_cells!r}: expected a positive whole number")
        self.structure_only, self.max_cells = structure_only, max_cells

    def __call__(self, completions, solution=None, **_) -> list[Optional[float]]:
        solutions = solution if solution is not None else [None] * len(completions)
        return [self.score(completion, gold) for completion, gold in zip(completions, solutions)]

    def score(self, completion, gold) -> Optional[float]:
        if gold is None:
            return None
        gold_rows = read_table(gold) if isinstance(gold, str) else None
        if gold_rows is None:
            raise BadSolution(f"solution {gold!r} holds no HTML or OTSL table")
        if _cell_count(gold_rows) > self.max_cells:
            self.count("solution_too_large")
            return None
        rows = read_table(answer_text(completion)) if isinstance(completion, str) else None
        if rows is None:
            return 0.0
        if _cell_count(rows) > self.max_cells:
            self.count("too_large")
            return 0.0
        return teds_score(rows, gold_rows, self.structure_only)
