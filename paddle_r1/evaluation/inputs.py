"""What an evaluation command reads, all of it before Paddle loads: the model folders (a run's output folder stands
for its checkpoints) and every dataset's benchmark file, its task and the samples scored. A wrong name, an empty
or unreadable benchmark stop the command in a second instead of after the models before it were evaluated, and a
sweep over a run's checkpoints reads each benchmark once."""
from __future__ import annotations

import os
import random
import re
from dataclasses import dataclass, field
from typing import Optional

from ..checkpoints.folders import list_checkpoints
from ..data.loader import DataReport, load_samples
from ..data.records import read_records
from ..data.samples import SOURCE_KEY
from .protocols import get_protocol, shuffled_first
from .tasks import Task


@dataclass
class EvalOptions:
    data_root: str
    image_root: Optional[str]
    method: str = "r1"  # r1: the training question template; baseline: the problem alone
    question_template: Optional[str] = None
    batch_size: int = 32
    sample_num: Optional[int] = None
    seed: int = 42
    max_new_tokens: int = 256
    # the greedy decoding's repetition penalty; None: the protocol's (``Protocol.checkpoint_repetition_penalty``)
    repetition_penalty: Optional[float] = None
    coord_system: Optional[str] = None
    output_dir: str = "eval_results"
    visualize: int = 0
    dtype: str = "float32"
    protocol: str = "paddle_r1"  # see protocols.PROTOCOLS
    video: dict = field(default_factory=dict)  # the clips' sampling keys given for this run (video_sampling_for)


def checkpoint_label(model_path: str) -> str:
    """"step 300" for .../checkpoint-300, else the folder's name."""
    name = os.path.basename(os.path.normpath(model_path))
    match = re.fullmatch(r"checkpoint-(\d+)", name)
    return f"step {match.group(1)}" if match else name


def expand_model_paths(paths: list[str]) -> list[str]:
    """A training run's output folder stands for its checkpoints, in the order the run wrote them."""
    expanded = []
    for path in paths:
        found = [] if os.path.isfile(os.path.join(path, "config.json")) else list_checkpoints(path)
        expanded.extend(found or [path])
    return expanded


def benchmark_file(data_root: str, dataset: str) -> str:
    """``DATA_ROOT/<dataset>.json``, else ``.jsonl``; FileNotFoundError naming both when neither is there."""
    for extension in (".json", ".jsonl"):
        candidate = os.path.join(data_root, dataset + extension)
        if os.path.isfile(candidate):
            return candidate
    raise FileNotFoundError(f"no {dataset}.json or {dataset}.jsonl in {data_root}")


@dataclass
class Benchmark:
    """One dataset of a run: its task, the samples scored (the protocol's subset, in the order asked), the same
    samples as prompted (``asked``), and the report of the records skipped."""
    name: str
    task: Task
    samples: list[dict]
    prompts: list[dict]
    report: DataReport


def read_benchmarks(tasks: dict[str, Task], options: EvalOptions) -> list[Benchmark]:
    """Each dataset of ``tasks`` (name -> its task, in the order given) read from ``options.data_root``; the same
    subsets for every model of the run. Raises FileNotFoundError / ValueError naming the file or the row."""
    rng = random.Random(options.seed)  # PaddleMIX seeds once per run; its datasets shuffle in turn
    benchmarks = []
    for name, task in tasks.items():
        samples, report = select_samples(benchmark_file(options.data_root, name), task, options, rng)
        column = get_protocol(options.protocol).question_column.get((task.base, options.method))
        benchmarks.append(Benchmark(name, task, samples, asked(samples, column), report))
    return benchmarks


def select_samples(path: str, task: Task, options: EvalOptions, rng: random.Random) -> tuple[list[dict], DataReport]:
    """The samples a run scores, in the order it asks them: the protocol's subset of the file (a seeded random
    subset in file order by default; PaddleMIX's shuffle-then-first for REC; whole files for its R1-V tasks)."""
    protocol = get_protocol(options.protocol)
    sample_num = None if task.base in protocol.whole_tasks else options.sample_num
    if task.base not in protocol.shuffled_tasks:
        sampling = f"random:{sample_num}" if sample_num else "all"
        return load_samples(path, image_root=options.image_root, data_format=task.data_format, seed=options.seed,
                            sampling_strategy=sampling)
    samples, report = load_samples(path, image_root=options.image_root, data_format=task.data_format)
    wheres = [record.where for record in read_records(path)]
    kept = {sample[SOURCE_KEY]: sample for sample in samples}  # a skipped row is left out, not replaced
    chosen = [wheres[i] for i in shuffled_first(len(wheres), sample_num, rng)]
    return [kept[where] for where in chosen if where in kept], report


def asked(samples: list[dict], column: Optional[str]) -> list[dict]:
    """The samples as prompted: ``column`` (PaddleMIX's REC baseline asks ``normal_caption``) in place of the
    problem when given."""
    if column is None:
        return samples
    missing = [s[SOURCE_KEY] for s in samples if not isinstance(s.get(column), str)]
    if missing:
        raise ValueError(f"{missing[0]}: no {column!r} to ask under this protocol and method "
                         f"({len(missing)} such rows)")
    return [dict(s, problem=s[column]) for s in samples]
