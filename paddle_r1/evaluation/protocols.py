"""Evaluation protocols: whose rules an eval run follows, chosen with ``--protocol`` on both eval scripts.

- ``paddle_r1`` (default): the checkpoint's own training prompt, answers scored by the training rewards, a seeded
  random subset, results in ``--output_dir``.
- ``published``: as paddle_r1, but counting credits only ``<answer>\\s*(\\d+)\\s*</answer>``, and the greedy decoding
  takes the repetition penalty of the checkpoint's generation_config.json (1.05 in Qwen2-VL's and Qwen2.5-VL's
  Instruct files), as transformers' ``generate(do_sample=False)`` applies it in R1-V's and VLM-R1's published eval
  scripts.
- ``paddlemix``: PaddleMIX r1_mllm's ``eval/test_rec.py`` / ``test_r1-v.py``, the scripts behind its published REC
  table: their prompts (REC baseline: ``Locate {normal_caption}, ...``), their box parsing and IoU, their subset
  (``random.seed(seed)`` once per run, then per dataset ``random.shuffle`` and the first ``sample_num``; R1-V files
  whole and in order), bfloat16, and ``logs/<task>_results_<dataset>_<model>_<method>_<steps>.json`` as they write it.
  Boxes are still mapped from the model's coordinates (PaddleMIX compares raw ones; for Qwen2.5-VL on images under
  ``max_pixels`` the two differ only by the 28-pixel rounding). GeoQA stays scored by math-verify: PaddleMIX's script
  compares an integer with the text ground truth, which never matches.
"""
from __future__ import annotations

import json
import os
import random
import re
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..rewards.families.boxes import to_pixels, truth_box
from ..rewards.families.answers import parse_strict_count

PADDLEMIX_REC_R1 = ("{Question} First output the thinking process in <think> </think> tags and then output the final "
                    "answer in <answer> </answer> tags. Output the final answer in JSON format.")
PADDLEMIX_REC_BASELINE = "Locate {Question}, output its bbox coordinates using JSON format."
PADDLEMIX_R1V = "{Question} First output the thinking process in <think> </think> and final answer (number) in " \
                "<answer> </answer> tags."

_NUMBER = r"([-+]?\d*\.\d+|\d+)"
_BRACKETED_BOX = re.compile(r"\[" + r",\s*".join([_NUMBER] * 4) + r"\]")
_LOOSE_BOX = re.compile(r",\s*".join([r"(-?\d*\.?\d+)"] * 4))
_ANSWER = re.compile(r"\s*<answer>(.*?)</answer>", re.DOTALL)


def paddlemix_box(completion: str, method: str = "r1") -> Optional[list[float]]:
    """The box PaddleMIX's test_rec.py reads (model units): baseline, the first four comma-separated numbers
    anywhere; r1, the first [a, b, c, d] inside the first <answer> tags. None when there is none."""
    if method == "baseline":
        match = _LOOSE_BOX.search(completion)
    else:
        answer = _ANSWER.search(completion)
        match = _BRACKETED_BOX.search(answer.group(1).strip()) if answer else None
    return [float(v) for v in match.groups()] if match else None


def paddlemix_iou(a, b) -> float:
    """PaddleMIX's IoU: the intersection counted in whole pixels with inclusive ends (x2 - 1, then + 1), the union
    from the boxes' plain areas; 0 when the union is empty."""
    iw = min(a[2] - 1, b[2] - 1) - max(a[0], b[0])
    ih = min(a[3] - 1, b[3] - 1) - max(a[1], b[1])
    inter = (iw + 1) * (ih + 1) if iw > 0 and ih > 0 else 0.0
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def paddlemix_rec_correct(completions, solution, image_sizes, input_sizes, coord_system, method="r1", **_):
    """A reward in the registry's shape: 1.0 when PaddleMIX's IoU of its parsed box (mapped to original pixels)
    with the solution is above 0.5, else 0.0; None for a sample with no solution."""
    scores = []
    for text, sol, sizes, in_sizes, system in zip(completions, solution, image_sizes, input_sizes, coord_system):
        truth = truth_box(sol)
        box = paddlemix_box(text, method) if truth is not None else None
        pred = None if box is None else to_pixels(box, system, sizes, in_sizes)
        scores.append(None if truth is None else float(pred is not None and paddlemix_iou(pred, truth) > 0.5))
    return scores


def _paddlemix_rec_shown(completion, *_, method="r1"):
    """``extracted_answer`` as PaddleMIX writes it: the parsed box in model units, [0, 0, 0, 0] when none."""
    return paddlemix_box(completion, method) or [0, 0, 0, 0]


@dataclass(frozen=True)
class Rule:
    """How a task is scored under a protocol where that differs from its training reward."""

    reward: str  # registry name or "module:function"
    parse: Callable  # (completion, coord_system, image_sizes, input_sizes, **settings) -> the shown prediction
    takes_method: bool = False  # the reward and parse take the eval method (r1 | baseline) as ``method``


@dataclass(frozen=True)
class Protocol:
    name: str
    rules: dict = field(default_factory=dict)  # task name -> Rule
    templates: dict = field(default_factory=dict)  # (task name, method) -> question template
    question_column: dict = field(default_factory=dict)  # (task name, method) -> the column asked instead of problem
    dtype: str = "float32"
    sample_num: Optional[int] = None  # default --sample_num
    shuffled_tasks: tuple = ()  # tasks whose subset is Python's random.shuffle then the first sample_num
    whole_tasks: tuple = ()  # tasks evaluated on the whole file in order (--sample_num not applied)
    output_dir: str = "eval_results"
    steps: Optional[int] = None  # default --steps
    write: Optional[Callable] = None  # (summary, output_dir, model_name, steps) -> path; None: runner.write_results
    # decode with the repetition penalty of the checkpoint's generation_config.json (transformers' greedy generate
    # applies it: models/generation_defaults.py) unless --repetition_penalty is given; else 1
    checkpoint_repetition_penalty: bool = False


def paddlemix_results(summary: dict, output_dir: str, model_name: str, steps) -> str:
    """logs/rec_results_<dataset>_<model>_<method>_<steps>.json (r1-v_results_... for counting and GeoQA), accuracy
    in percent, per sample the fields PaddleMIX's scripts write."""
    rec = summary["task"].startswith("rec")
    prefix = "rec_results" if rec else "r1-v_results"
    name = f"{prefix}_{summary['dataset']}_{model_name.lower()}_{summary['method']}_{steps}.json"
    path = os.path.join(output_dir, name)
    results = [{"question": r["question"] if rec else {"image_path": r["image"], "question": r["question"],
                                                        "ground_truth": r["ground_truth"]},
                "ground_truth": r["ground_truth"],
                "model_output": r["answer"], "extracted_answer": r["prediction"],
                **({"correct": int(r["correct"])} if rec else {})} for r in summary["results"]]
    os.makedirs(output_dir, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"accuracy": summary["accuracy"] * 100, "results": results}, f, indent=2, ensure_ascii=False)
    return path


def shuffled_first(count: int, sample_num: Optional[int], rng: random.Random) -> list[int]:
    """PaddleMIX's subset: ``random.shuffle`` of the file's rows with the run's generator, then the first
    ``sample_num`` (all of them, shuffled, when None). Shuffling indices draws exactly what shuffling the rows does."""
    order = list(range(count))
    rng.shuffle(order)
    return order if sample_num is None else order[:sample_num]


def strict_number(completion, *_):
    """The count in a completion by the published rule (``parse_strict_count``), for the results table."""
    return parse_strict_count(completion)


PROTOCOLS = {
    "paddle_r1": Protocol("paddle_r1"),
    "published": Protocol("published", rules={"counting": Rule("counting_strict", strict_number)},
                          checkpoint_repetition_penalty=True),
    "paddlemix": Protocol(
        "paddlemix",
        rules={"rec": Rule("paddle_r1.evaluation.protocols:paddlemix_rec_correct", _paddlemix_rec_shown,
                           takes_method=True),
               "counting": Rule("counting_strict", strict_number)},
        templates={("rec", "r1"): PADDLEMIX_REC_R1, ("rec", "baseline"): PADDLEMIX_REC_BASELINE,
                   **{(task, method): PADDLEMIX_R1V for task in ("counting", "geoqa")
                      for method in ("r1", "baseline")}},
        question_column={("rec", "baseline"): "normal_caption"},
        dtype="bfloat16", sample_num=500, shuffled_tasks=("rec",), whole_tasks=("counting", "geoqa"),
        output_dir="logs", steps=100, write=paddlemix_results),
}


def get_protocol(name: str) -> Protocol:
    if name not in PROTOCOLS:
        raise ValueError(f"unknown protocol {name!r}; expected one of {', '.join(PROTOCOLS)}")
    return PROTOCOLS[name]
