"""What an eval task scores with: the training reward that decides "correct", and how its prediction is
shown in the results (the parsed box in original pixels, the number, the answer text).

Two protocols: "paddle_r1" (the default) scores with the training reward; "published" scores the way the peers'
published evaluation scripts do where that differs: counting credits only ``<answer>\s*(\d+)\s*</answer>``
(R1-V's and VLM-R1's rule), not "There are 6 cubes." or number words."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Optional

from ..rewards.manager import RewardManager
from ..rewards.families.answers import parse_strict_count
from ..rewards.families.boxes import predicted_box_in_pixels
from ..rewards.parsing import answer_text, parse_number


@dataclass
class Task:
    name: str
    data_format: str  # the loader's format for the benchmark files
    correct_reward: str  # registry name; a score of 1.0 means correct
    parse: Callable  # (completion, coord_system, image_sizes, input_sizes) -> shown prediction or None
    published: Optional[tuple[str, Callable]] = None  # (reward, parse) of the published protocol, where it differs

    def under(self, protocol: str) -> "Task":
        """This task scored under ``protocol``: "paddle_r1" (the training reward) or "published" (the peers' own
        evaluation rule, named "<task>/published" in the results; the same task when the rules agree)."""
        if protocol not in PROTOCOLS:
            raise ValueError(f"unknown protocol {protocol!r}; expected one of {', '.join(PROTOCOLS)}")
        if protocol == "paddle_r1" or self.published is None:
            return self
        reward, parse = self.published
        return replace(self, name=f"{self.name}/published", correct_reward=reward, parse=parse, published=None)

    def score(self, completions: list[str], columns: dict) -> list[bool]:
        values = RewardManager([self.correct_reward]).score(completions, columns).per_function[:, 0]
        return [bool(v >= 1.0) for v in values]  # NaN (no solution) is not correct


def _box(completion, coord_system, image_sizes, input_sizes):
    box = predicted_box_in_pixels(completion, coord_system, image_sizes, input_sizes)
    return None if box is None else [round(v, 2) for v in box]


def _number(completion, *_):
    return parse_number(answer_text(completion))


def _strict_number(completion, *_):
    return parse_strict_count(completion)


def _text(completion, *_):
    return answer_text(completion).strip() or None


PROTOCOLS = ("paddle_r1", "published")
TASKS = {
    # REC: correct when IoU > 0.5 after mapping the box from the model's coordinates
    "rec": Task("rec", "rec", "iou_accuracy", _box),
    "counting": Task("counting", "r1v_eval", "counting", _number, published=("counting_strict", _strict_number)),
    "geoqa": Task("geoqa", "r1v_eval", "math", _text),
}


def task_for_dataset(dataset: str, default: Optional[str] = None) -> Task:
    """R1-V datasets: counting (SuperCLEVR) or GeoQA, from the dataset's name unless ``default`` says."""
    if default:
        return TASKS[default]
    name = dataset.lower()
    if "count" in name or "clevr" in name:
        return TASKS["counting"]
    if "geo" in name or "math" in name:
        return TASKS["geoqa"]
    raise ValueError(f"cannot tell the task of dataset {dataset!r}; pass --task counting|geoqa")
