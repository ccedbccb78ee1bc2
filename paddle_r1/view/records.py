"""A run's completions as prompts, whichever tool wrote them.

A training run's ``completions.jsonl`` (one row per completion: step, problem, images, solution, completion,
reward, advantage, ``reward/<name>``; a video sample's rows add ``videos`` and, for grounding, ``duration``; a
multi-turn run's rows add ``turns``: the model's turns and the tools' results, each tool result's images relative to
the file's folder) and eval results (``eval/test_rec.py``'s json files: one greedy answer per question, its
``correct`` verdict; a ``video`` and ``duration`` where the question is on a clip) both become ``Section``s (a
training step, or one results file) of ``Prompt``s, each holding its completions, so the report draws them the same
way.
"""
from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass, field
from typing import Optional

FACT_KEYS = ("image_sizes", "input_sizes", "coord_system")  # what the rewards saw; rows may carry them


@dataclass
class Completion:
    text: str
    reward: Optional[float]
    advantage: Optional[float]
    scores: dict  # reward name -> score (None: not applicable)
    prediction: object = None  # eval results only: the parsed prediction, boxes already in original pixels
    evaluated: bool = False  # an evaluation's answer: its prediction (None: it read none) is all there is to draw
    turns: list = field(default_factory=list)  # multi-turn rows: {"role": "assistant", "text"} / {"role": "tool",
    # "name", "arguments", "text", "images"}; empty for single-turn rows


@dataclass
class Prompt:
    problem: str
    images: list
    solution: object
    completions: list = field(default_factory=list)
    facts: dict = field(default_factory=dict)  # FACT_KEYS found in the rows
    videos: list = field(default_factory=list)  # clip paths (a video sample's)
    duration: Optional[float] = None  # seconds: a temporal grounding sample's clip length


@dataclass
class Section:
    key: str  # "step 12", or a results file's name
    prompts: list


def training_steps(rows: list[dict]) -> list[int]:
    return sorted({row["step"] for row in rows if isinstance(row.get("step"), int)})


def training_sections(rows: list[dict], steps: list[int]) -> list[Section]:
    """The rows of ``steps``, grouped step by step into prompts (a prompt's G completions are contiguous rows with
    the same problem, images and solution)."""
    sections = []
    for step in steps:
        prompts: list[Prompt] = []
        for row in (r for r in rows if r.get("step") == step):
            key = (row.get("problem"), list(row.get("images") or []), row.get("solution"),
                   list(row.get("videos") or []))
            last = prompts[-1] if prompts else None
            if last is None or (last.problem, last.images, last.solution, last.videos) != key:
                prompts.append(Prompt(problem=row.get("problem") or "", images=key[1], solution=row.get("solution"),
                                      facts={k: row[k] for k in FACT_KEYS if k in row}, videos=key[3],
                                      duration=_number(row.get("duration"))))
            scores = {k.split("/", 1)[1]: v for k, v in row.items() if k.startswith("reward/")}
            prompts[-1].completions.append(Completion(text=row.get("completion") or "", reward=row.get("reward"),
                                                      advantage=row.get("advantage"), scores=scores,
                                                      turns=readable_turns(row.get("turns"))))
        sections.append(Section(key=f"step {step}", prompts=prompts))
    return sections


def _number(value) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def readable_turns(turns) -> list[dict]:
    """A row's ``turns`` as the report draws them: each a dict with a role; a tool turn's name, arguments, text and
    images (paths; a tool clip's strip of frames among them) defaulted when missing or of the wrong type, so a
    malformed row shows what it holds."""
    if not isinstance(turns, list):
        return []
    readable = []
    for turn in turns:
        if not isinstance(turn, dict):
            continue
        text = turn.get("text") if isinstance(turn.get("text"), str) else ""
        if turn.get("role") != "tool":
            readable.append({"role": str(turn.get("role") or "assistant"), "text": text})
            continue
        images = turn.get("images") if isinstance(turn.get("images"), list) else []
        clips = turn.get("videos") if isinstance(turn.get("videos"), list) else []
        strips = [clip.get("strip") for clip in clips if isinstance(clip, dict)]  # a tool clip's frames, side by side
        readable.append({"role": "tool", "name": str(turn.get("name") or "?"), "arguments": turn.get("arguments"),
                         "text": text, "images": [p for p in images + strips if isinstance(p, str)]})
    return readable


def eval_sections(paths: list[str]) -> list[Section]:
    """One section per results file; a question's answer is its only completion, scored ``correct`` 0/1."""
    sections = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            summary = json.load(f)
        prompts = []
        for row in summary.get("results", []):
            correct = None if row.get("correct") is None else float(bool(row["correct"]))
            completion = Completion(text=row.get("answer") or "", reward=correct, advantage=None,
                                    scores={"correct": correct}, prediction=row.get("prediction"), evaluated=True)
            prompts.append(Prompt(problem=row.get("question") or "", images=[row["image"]] if row.get("image") else [],
                                  solution=row.get("ground_truth"), completions=[completion],
                                  videos=[row["video"]] if row.get("video") else [],
                                  duration=_number(row.get("duration"))))
        name = os.path.splitext(os.path.basename(path))[0]
        accuracy = summary.get("accuracy")
        sections.append(Section(key=name if accuracy is None else f"{name} ({accuracy * 100:.1f}%)", prompts=prompts))
    return sections


def eval_result_files(folder: str) -> list[str]:
    """The eval results json files of ``folder`` (those holding a ``results`` list)."""
    found = []
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        try:
            with open(path, encoding="utf-8") as f:
                if isinstance(json.load(f).get("results"), list):
                    found.append(path)
        except (ValueError, AttributeError, OSError):
            continue
    return found
