"""Evaluate one model folder on benchmark files: batched greedy decoding with the training prompt,
answers scored by the training rewards, results written per dataset; a protocol (``protocols.py``) may set the
prompt, the subset, the scoring rule and the results file otherwise."""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Optional

import paddle
from tqdm import tqdm

from ..data.samples import SOURCE_KEY, DataError
from ..data.video import CONFIG_KEYS as VIDEO_KEYS, VideoSampling
from ..models.generation_defaults import generation_defaults
from ..models.loading import default_coord_system, load_model, load_processor, model_family
from ..models.precision import check_dtype_runs_here, precision_for_this_device
from ..generation.generator import Generator, open_sample_media
from ..generation.rollout import SamplingParams
from ..rewards.manager import reward_columns
from ..tools.toolbox import Toolbox
from .inputs import Benchmark, EvalOptions
from .protocols import get_protocol


def trained_config(model_path: str) -> dict:
    """The config a paddle_r1 checkpoint was trained with (its trainer_state.json's), or {}."""
    from ..checkpoints.folders import STATE_FILE

    path = os.path.join(model_path, STATE_FILE)
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f).get("config") or {}


def trained_template(model_path: str) -> Optional[str]:
    """The question template a paddle_r1 checkpoint was trained with, or None."""
    return trained_config(model_path).get("question_template")


def video_sampling_for(model_path: str, given: dict) -> VideoSampling:
    """How the clips are sampled: each of the config's ``video_*`` keys as ``given`` (not None), else as the
    checkpoint's training config says, else GRPOConfig's default; checked as a config's are (a ConfigError names
    the key)."""
    from ..config.jobs import GRPOConfig

    trained = trained_config(model_path)
    values = {key: given[key] if given.get(key) is not None else trained[key]
              for key in VIDEO_KEYS if given.get(key) is not None or key in trained}
    return VideoSampling.from_config(GRPOConfig(model_name_or_path=model_path, **values))


def template_for(options: EvalOptions, task: str, model_path: str, default: Optional[str] = None) -> str:
    """--question_template; else the protocol's own prompt for the task; else, for --method r1, the template the
    checkpoint was trained with, or for a model not trained here the task's ``default`` (else the training
    default); baseline: the question."""
    from ..config.jobs import GRPOConfig

    if options.question_template:
        return options.question_template
    protocol_template = get_protocol(options.protocol).templates.get((task, options.method))
    if protocol_template:
        return protocol_template
    if options.method != "r1":
        return "{Question}"
    return trained_template(model_path) or default or GRPOConfig.__dataclass_fields__["question_template"].default


@dataclass
class GreedyAnswers:
    """The answers to the samples whose images and clips opened (``kept``: their indices, in order); each of the
    others is in ``unreadable`` with its reason (a file whose header read but whose data does not decode)."""
    texts: list  # each kept sample's answer (multi-turn: its episode's final assistant turn)
    image_sizes: list  # per kept sample, its images' sizes before and after the processor's resize (for the rewards)
    input_sizes: list
    turns: Optional[list] = None  # multi-turn: each episode's turns and tool calls (reward columns)
    tool_calls: Optional[list] = None
    kept: list = field(default_factory=list)
    unreadable: list = field(default_factory=list)  # (index, reason)


def answer_greedily(generator: Generator, samples: list[dict], template: str, batch_size: int, max_new_tokens: int,
                    desc: str, toolbox: Optional[Toolbox] = None, max_turns: int = 1,
                    repetition_penalty: float = 1.0) -> GreedyAnswers:
    """Greedy completions, batch by batch; with ``max_turns`` > 1, episodes in which the model may call the tools
    of ``toolbox`` (each turn up to ``max_new_tokens``), as the GRPO rollout runs them. A sample whose image or clip
    does not open is left out with its reason (``GreedyAnswers.unreadable``), as training skips it: the others of
    its batch are answered, and a run of thousands does not stop at it."""
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, logprobs=False,
                            repetition_penalty=repetition_penalty)
    answers = GreedyAnswers([], [], [], [] if max_turns > 1 else None, [] if max_turns > 1 else None)
    for start in tqdm(range(0, len(samples), batch_size), desc=desc, unit="batch"):
        kept, images, clips = [], [], []
        for index in range(start, min(start + batch_size, len(samples))):
            try:
                opened = open_sample_media(samples[index], generator.video, generator.processor)
            except DataError as e:
                answers.unreadable.append((index, str(e)))
                continue
            kept.append(index)
            images.append(opened[0])
            clips.append(opened[1])
        if not kept:
            continue
        generation = generator.generate([samples[i] for i in kept], 1, params, template, images=images, clips=clips,
                                        toolbox=toolbox, max_turns=max_turns)
        answers.kept += kept
        answers.texts += generation.texts
        answers.image_sizes += generation.facts.image_sizes
        answers.input_sizes += generation.facts.input_sizes
        if max_turns > 1:
            answers.turns += generation.turns
            answers.tool_calls += generation.tool_calls
    return answers


def repetition_penalty_for(model_path: str, options: EvalOptions) -> float:
    """The penalty an evaluation decodes with: ``--repetition_penalty`` when given, else the checkpoint's
    generation_config.json value where the protocol reads it (``Protocol.checkpoint_repetition_penalty``), else 1."""
    if options.repetition_penalty is not None:
        return options.repetition_penalty
    if get_protocol(options.protocol).checkpoint_repetition_penalty:
        return float(generation_defaults(model_path).get("repetition_penalty", 1.0))
    return 1.0


class Evaluator:
    def __init__(self, model_path: str, options: EvalOptions):
        self.model_path, self.options = model_path, options
        # what this device runs for the asked dtype, as in training: bfloat16 before sm80 is float32 weights under
        # float16 auto_cast (models/precision.py), not Paddle's slow bfloat16 emulation
        check_dtype_runs_here(options.dtype)
        self.precision = precision_for_this_device(options.dtype)
        model = load_model(model_path, dtype=self.precision.dtype)
        model.eval()
        coord_system = options.coord_system or default_coord_system(model_family(model_path))
        self.generator = Generator(model, load_processor(model_path), coord_system,
                                   video_sampling_for(model_path, options.video))
        self.coord_system = coord_system
        self.repetition_penalty = repetition_penalty_for(model_path, options)
        if self.repetition_penalty != 1.0:
            print(f"{model_path}: greedy decoding with repetition_penalty {self.repetition_penalty}")

    @paddle.no_grad()
    def evaluate(self, benchmark: Benchmark) -> dict:
        """Greedy answers to ``benchmark``'s prompts, scored by its task: the summary and one result per sample."""
        options, task, samples = self.options, benchmark.task, benchmark.samples
        template = template_for(options, task.base, self.model_path, task.template)
        with self.precision.compute():
            answers = answer_greedily(self.generator, benchmark.prompts, template, options.batch_size,
                                      options.max_new_tokens, benchmark.name,
                                      repetition_penalty=self.repetition_penalty)
        for index, reason in answers.unreadable:
            print(f"skipped {samples[index].get(SOURCE_KEY, index)}: {reason}")
        samples = [samples[i] for i in answers.kept]
        completions, image_sizes, input_sizes = answers.texts, answers.image_sizes, answers.input_sizes
        columns = reward_columns(samples, image_sizes, input_sizes, self.coord_system)
        scores = task.scores(completions, columns)
        correct = task.correct(scores)
        results = [{
            "question": s["problem"], "image": s["images"][0] if s["images"] else None,
            **({"video": s["videos"][0]} if s.get("videos") else {}), **{c: s.get(c) for c in task.columns},
            "ground_truth": s["solution"], "answer": text,
            "prediction": task.parse(text, self.coord_system, sizes, in_sizes), "correct": ok,
            **({"score": None if score != score else float(score)} if task.metrics else {}),
        } for s, text, sizes, in_sizes, ok, score in zip(samples, completions, image_sizes, input_sizes, correct,
                                                         scores)]
        accuracy = sum(correct) / len(correct)
        summary = {"dataset": benchmark.name, "model": self.model_path, "method": options.method, "task": task.name,
                   "protocol": options.protocol, "question_template": template,
                   "accuracy": accuracy, "correct": sum(correct), "total": len(correct),
                   "skipped": benchmark.report.skipped + len(answers.unreadable)}
        if task.mean_reward is not None:
            summary[f"mean_{task.mean_reward}"] = task.mean(completions, columns)
        if task.metrics is not None:
            summary["metrics"] = task.metrics(samples, scores)
        return {**summary, "results": results}


def file_name_part(text: str) -> str:
    """``text`` as a part of a file or folder name: every run of characters other than letters, digits, ``.``, ``-``
    and ``_`` (spaces, slashes) one ``_`` ("step 300" -> "step_300")."""
    return re.sub(r"[^\w.-]+", "_", text).strip("_")


def write_results(summary: dict, output_dir: str, model_name: str, steps: Optional[int] = None) -> str:
    os.makedirs(output_dir, exist_ok=True)
    name = f"{summary['dataset']}_{file_name_part(model_name)}_{summary['method']}" + \
        (f"_step{steps}" if steps is not None else "")
    path = os.path.join(output_dir, name + ".json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2, ensure_ascii=False)
    return path


def accuracy_table(rows: dict[str, dict[str, float]], datasets: list[str]) -> str:
    """Markdown table: one row per model / checkpoint, one column per dataset."""
    lines = ["| model | " + " | ".join(datasets) + " |", "|---|" + "---|" * len(datasets)]
    for label, accuracies in rows.items():
        cells = [f"{accuracies[d] * 100:.2f}%" if d in accuracies else "-" for d in datasets]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def metrics_table(rows: dict[tuple, dict[str, float]]) -> str:
    """Markdown table of a task's own metrics (fractions, shown in percent): one row per (model / checkpoint,
    dataset), one column per metric, in the order the rows first name them."""
    names = list(dict.fromkeys(name for metrics in rows.values() for name in metrics))
    lines = ["| model | dataset | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for (label, dataset), metrics in rows.items():
        cells = [f"{metrics[n] * 100:.2f}" if n in metrics else "-" for n in names]
        lines.append(f"| {label} | {dataset} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
