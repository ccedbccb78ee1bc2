"""What an eval task scores with: the training reward that decides "correct", and how its prediction is
shown in the results (the parsed box in original pixels, the number, the answer text). A protocol
(``paddle_r1.evaluation.protocols``) may score a task by another rule: ``Task.under`` gives the task under it."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial
from typing import Callable, Optional

import numpy as np

from ..rewards.manager import RewardManager
from ..rewards.families.boxes import predicted_box_in_pixels
from ..rewards.parsing import answer_text, parse_number
from .protocols import get_protocol


@dataclass
class Task:
    name: str
    data_format: Optional[str]  # the loader's format for the benchmark files (None: detected from the fields)
    correct_reward: str  # registry name; a score of 1.0 means correct
    parse: Callable  # (completion, coord_system, image_sizes, input_sizes) -> shown prediction or None
    settings: dict = field(default_factory=dict)  # the correct reward's settings (and the parse's)
    mean_reward: Optional[str] = None  # a reward whose mean over the samples is reported beside the accuracy
    template: Optional[str] = None  # the prompt for a model not trained here (else the training default)
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

    def score(self, completions: list[str], columns: dict) -> list[bool]:
        if self._manager is None:  # bound once per task, not per batch
            self._manager = RewardManager([self.correct_reward], settings={self.correct_reward: self.settings})
        values = self._manager.score(completions, columns).per_function[:, 0]
        return [bool(v >= 1.0) for v in values]  # NaN (no solution) is not correct

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


TASKS = {
    # REC: correct when IoU > 0.5 after mapping the box from the model's coordinates
    "rec": Task("rec", "rec", "iou_accuracy", _box),
    "counting": Task("counting", "r1v_eval", "counting", _number),
    "geoqa": Task("geoqa", "r1v_eval", "math", _text),
    # OCR (any format the loader reads, e.g. VL-SFT jsonl): exact match, and the mean 1 - NED; PaddleOCR-VL is asked
    # its task prompt ("OCR:", "Table Recognition:") as it stands
    "ocr": Task("ocr", None, "ocr_exact", _text, mean_reward="ocr_ned", template="{Question}"),
    "table": Task("table", None, "teds", _text, mean_reward="teds", template="{Question}"),
}
# the tasks each eval script offers with --task
SCRIPT_TASKS = {"r1v": ("counting", "geoqa"), "ocr": ("ocr", "table")}


def task_for_dataset(dataset: str, default: Optional[str] = None, kind: str = "r1v") -> Task:
    """R1-V datasets: counting (SuperCLEVR) or GeoQA; OCR datasets: text or tables; from the dataset's name unless
    ``default`` says."""
    if default:
        return TASKS[default]
    name = dataset.lower()
    if kind == "ocr":
        return TASKS["table" if "table" in name else "ocr"]
    if "count" in name or "clevr" in name:
        return TASKS["counting"]
    if "geo" in name or "math" in name:
        return TASKS["geoqa"]
    raise ValueError(f"cannot tell the task of dataset {dataset!r}; pass --task counting|geoqa")
