"""What an eval task scores with: the training reward that decides "correct" (a score of at least ``correct_at``),
how its prediction is shown in the results (the parsed box in original pixels, the number, the answer text, the
span) and the task's own metrics beside the accuracy (recall at IoU thresholds and mean IoU for temporal grounding,
the mean score per problem type for video QA). A protocol (``paddle_r1.evaluation.protocols``) may score a task by
another rule: ``Task.under`` gives the task under it."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial
from typing import Callable, Optional

import numpy as np

from ..data.formats import SampleError, detect_format
from ..data.records import Record, read_records
from ..rewards.manager import RewardManager
from ..rewards.families.boxes import predicted_box_in_pixels
from ..rewards.families.temporal import parse_span
from ..rewards.families.video_r1 import RULES as VIDEO_R1_RULES, first_answer
from ..rewards.parsing import answer_text, parse_number
from .protocols import get_protocol

# Video-R1's eval_bench.py QUESTION_TEMPLATE (its training one says "between the <think> </think> tags")
VIDEO_R1_EVAL_QUESTION_TEMPLATE = (
    "{Question}\n"
    "Please think about this question as if you were a human pondering deeply. "
    "Engage in an internal dialogue using expressions such as 'let me think', 'wait', 'Hmm', 'oh, I see', 'let's "
    "break it down', etc, or other natural language thought expressions "
    "It's encouraged to include self-reflection or verification in the reasoning process. "
    "Provide your detailed reasoning between the <think> and </think> tags, and then give your final answer between "
    "the <answer> and </answer> tags."
)
GROUNDING_RECALL_AT = (0.3, 0.5, 0.7)  # Charades-STA's R1@IoU thresholds


@dataclass
class Task:
    name: str
    data_format: Optional[str]  # the loader's format for the benchmark files (None: detected from the fields)
    correct_reward: str  # registry name; a score of 1.0 means correct
    parse: Callable  # (completion, coord_system, image_sizes, input_sizes) -> shown prediction or None
    settings: dict = field(default_factory=dict)  # the correct reward's settings (and the parse's)
    mean_reward: Optional[str] = None  # a reward whose mean over the samples is reported beside the accuracy
    template: Optional[str] = None  # the prompt for a model not trained here (else the training default)
    correct_at: float = 1.0  # a sample is correct when the correct reward scores at least this
    metrics: Optional[Callable] = None  # (samples, scores) -> {name: value}: the task's own metrics
    columns: tuple = ()  # sample columns each result row shows
    _manager: Optional[RewardManager] = field(default=None, init=False, repr=False, compare=False)

    @property
    def base(self) -> str:
        """The task's own name ("counting" for "counting/published"): what protocols key their settings by."""
        return self.name.split("/")[0]

    def under(self, protocol: str, method: str = "r1") -> "Task":
        """This task scored under ``protocol`` (see ``protocols.PROTOCOLS``), named "<task>/<protocol>" in the results
        when the protocol has its own rule for it; the same task when it scores by the training reward."""
        rule = get_protocol(protocol).rules.get(self.name)
        if rule is None:
            return self
        settings = {"method": method} if rule.takes_method else {}
        return replace(self, name=f"{self.name}/{protocol}", correct_reward=rule.reward,
                       parse=partial(rule.parse, **settings), settings=settings)

    def scores(self, completions: list[str], columns: dict) -> np.ndarray:
        """The correct reward's score of each completion (NaN where it does not apply)."""
        if self._manager is None:  # bound once per task, not per batch
            self._manager = RewardManager([self.correct_reward], settings={self.correct_reward: self.settings})
        return self._manager.score(completions, columns).per_function[:, 0]

    def correct(self, scores: np.ndarray) -> list[bool]:
        return [bool(v >= self.correct_at) for v in scores]  # NaN (no solution) is not correct

    def score(self, completions: list[str], columns: dict) -> list[bool]:
        return self.correct(self.scores(completions, columns))

    def mean(self, completions: list[str], columns: dict) -> Optional[float]:
        """The mean of ``mean_reward`` over the samples it scores (None without one, or when it scores none)."""
        if self.mean_reward is None:
            return None
        values = RewardManager([self.mean_reward]).score(completions, columns).per_function[:, 0]
        scored = values[~np.isnan(values)]
        return float(scored.mean()) if len(scored) else None


def _box(completion, coord_system, image_sizes, input_sizes):
    box = predicted_box_in_pixels(completion, coord_system, image_sizes, input_sizes)
    return None if box is None else [round(v, 2) for v in box]


def _number(completion, *_):
    return parse_number(answer_text(completion))


def _text(completion, *_):
    return answer_text(completion).strip() or None


def _span(completion, *_):
    span = parse_span(completion)
    return None if span is None else [round(v, 3) for v in span]


def _first_answer(completion, *_):
    return first_answer(completion) or None


def grounding_metrics(samples: list[dict], scores: np.ndarray) -> dict:
    """Charades-STA's: R1@m, the share of samples whose predicted span has IoU >= m with the true one (m = 0.3, 0.5,
    0.7), and mIoU, the mean IoU; an unreadable span has IoU 0."""
    ious = np.nan_to_num(scores, nan=0.0)
    return {**{f"R@{m}": float((ious >= m).mean()) for m in GROUNDING_RECALL_AT}, "mIoU": float(ious.mean())}


def problem_type_metrics(samples: list[dict], scores: np.ndarray) -> dict:
    """Per Video-R1 problem type (in Video-R1's order), the mean video_r1_accuracy of its samples: the accuracy for
    multiple choice and numerical (scored 0 or 1), the mean 1 - WER for OCR, ROUGE for free-form, 1 - relative
    error for regression."""
    kinds = np.array([s.get("problem_type") for s in samples], dtype=object)
    return {kind: float(np.nan_to_num(scores[kinds == kind], nan=0.0).mean()) for kind in VIDEO_R1_RULES
            if (kinds == kind).any()}


TASKS = {
    # REC: correct when IoU > 0.5 after mapping the box from the model's coordinates
    "rec": Task("rec", "rec", "iou_accuracy", _box),
    "counting": Task("counting", "r1v_eval", "counting", _number),
    "geoqa": Task("geoqa", "r1v_eval", "math", _text),
    # OCR (any format the loader reads, e.g. VL-SFT jsonl): exact match, and the mean 1 - NED; PaddleOCR-VL is asked
    # its task prompt ("OCR:", "Table Recognition:") as it stands
    "ocr": Task("ocr", None, "ocr_exact", _text, mean_reward="ocr_ned", template="{Question}"),
    "table": Task("table", None, "teds", _text, mean_reward="teds", template="{Question}"),
    # Charades-STA layout: correct at IoU >= 0.5 (R1@0.5), with R1@0.3 / 0.5 / 0.7 and mIoU
    "grounding": Task("grounding", "temporal_grounding", "temporal_iou", _span, correct_at=0.5,
                      metrics=grounding_metrics, columns=("duration",)),
    # Video-R1's eval json: correct when video_r1_accuracy is 1, the mean score per problem type
    "video_qa": Task("video_qa", "video_r1", "video_r1_accuracy", _first_answer,
                     template=VIDEO_R1_EVAL_QUESTION_TEMPLATE, metrics=problem_type_metrics,
                     columns=("problem_type",)),
}
# the tasks each eval script offers with --task
SCRIPT_TASKS = {"r1v": ("counting", "geoqa"), "ocr": ("ocr", "table"), "video": ("grounding", "video_qa")}
# the video tasks by the loader's format of their files
VIDEO_TASK_FORMATS = {"temporal_grounding": "grounding", "video_r1": "video_qa"}


def task_for_dataset(dataset: str, default: Optional[str] = None, kind: str = "r1v", path: Optional[str] = None
                     ) -> Task:
    """R1-V datasets: counting (SuperCLEVR) or GeoQA; OCR datasets: text or tables; from the dataset's name unless
    ``default`` says. Video datasets (``path``, their file): temporal grounding or video QA, from the fields of the
    file's first record."""
    if default:
        return TASKS[default]
    if kind == "video":
        first = next((r.value for r in read_records(path) if isinstance(r, Record)), {})
        try:
            fmt = detect_format(first)
        except SampleError:
            fmt = None
        if fmt not in VIDEO_TASK_FORMATS:
            raise ValueError(f"{path}: cannot tell the task from its first record's fields {sorted(first)} (a "
                             "Charades-STA or Video-R1 row); pass --task grounding|video_qa")
        return TASKS[VIDEO_TASK_FORMATS[fmt]]
    name = dataset.lower()
    if kind == "ocr":
        return TASKS["table" if "table" in name else "ocr"]
    if "count" in name or "clevr" in name:
        return TASKS["counting"]
    if "geo" in name or "math" in name:
        return TASKS["geoqa"]
    raise ValueError(f"cannot tell the task of dataset {dataset!r}; pass --task counting|geoqa")
