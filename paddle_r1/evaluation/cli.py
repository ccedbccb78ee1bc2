"""Arguments shared by eval/test_rec.py, eval/test_r1-v.py (those of PaddleMIX r1_mllm's commands), eval/test_ocr.py
and eval/test_video.py."""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from .inputs import EvalOptions, benchmark_file, checkpoint_label, expand_model_paths, read_benchmarks
from .protocols import PROTOCOLS, get_protocol
from .tasks import SCRIPT_TASKS, TASKS, task_for_dataset
from ..checkpoints.folders import verify_checkpoint
from ..config.jobs import GRPOConfig
from ..config.keys import declared
from ..config.paths import check_writable
from ..config.values import above, at_least, option_type
from ..data.video import CONFIG_KEYS as VIDEO_KEYS
from ..models.model_path import check_model_path

POSITIVE, COUNT = option_type(int, at_least(1)), option_type(int, at_least(0))
VIDEO_BOUNDS = declared(GRPOConfig, "bounds")


def build_parser(kind: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=f"paddle_r1 {kind} evaluation")
    parser.add_argument("--model_path", nargs="+", required=True,
                        help="model folders, or a training run's output folder (all its checkpoints)")
    parser.add_argument("--model_name", help="name used in result file names (default: the folder's name)")
    parser.add_argument("--method", choices=("r1", "baseline"), default="r1")
    parser.add_argument("--data_root", required=True)
    parser.add_argument("--image_root", default=None)
    parser.add_argument("--test_datasets", nargs="+", required=True)
    parser.add_argument("--batch_size", type=POSITIVE, default=32)
    parser.add_argument("--sample_num", type=POSITIVE, default=None,
                        help="a seeded subset of each dataset (default: all; paddlemix: 500 for REC)")
    parser.add_argument("--seed", type=COUNT, default=42)
    parser.add_argument("--steps", type=COUNT, default=None, help="training steps, recorded in result names")
    parser.add_argument("--dtype", default=None, choices=("float32", "bfloat16", "float16"),
                        help="default: float32 (paddlemix: bfloat16 on GPU, as PaddleMIX's scripts)")
    parser.add_argument("--attn_implementation", default=None,
                        help="accepted as PaddleMIX's commands pass it; the device chooses the attention kernel here")
    parser.add_argument("--max_new_tokens", type=POSITIVE, default=256)
    parser.add_argument("--repetition_penalty", type=option_type(float, above(0)), default=None,
                        help="the greedy decoding's repetition penalty (transformers' and vLLM's); default: the "
                             "checkpoint's generation_config.json value with --protocol published (transformers' "
                             "generate applies it in R1-V's and VLM-R1's eval scripts), else 1")
    parser.add_argument("--question_template", default=None,
                        help="default: the protocol's prompt, else the checkpoint's training template (r1) or "
                             "{Question}")
    parser.add_argument("--coord_system", default=None, help="default: the model family's own")
    parser.add_argument("--output_dir", default=None, help="default: eval_results (paddlemix: logs, as PaddleMIX)")
    parser.add_argument("--protocol", choices=tuple(PROTOCOLS), default="paddle_r1",
                        help="paddle_r1: the training prompt, scored by the training reward; published: counting "
                             "credits only <answer>\\s*(\\d+)\\s*</answer> (R1-V's and VLM-R1's scripts); paddlemix: "
                             "PaddleMIX r1_mllm's eval scripts (prompts, subset, IoU, dtype, result files)")
    if kind == "rec":
        parser.add_argument("--visualize", type=COUNT, default=0, help="draw N predictions per dataset")
    else:
        tasks = SCRIPT_TASKS[kind]
        parser.add_argument("--task", choices=tasks, default=None,
                            help=f"default: from the dataset {'file' if kind == 'video' else 'name'} "
                                 f"({' / '.join(tasks)})")
    if kind == "video":
        for key in VIDEO_KEYS:
            spec = GRPOConfig.__dataclass_fields__[key]
            parser.add_argument(f"--{key}", type=option_type(type(spec.default), VIDEO_BOUNDS[key]), default=None,
                                help=f"{spec.metadata['help']}; default: the checkpoint's training value, else "
                                     f"{spec.default}")
    return parser


def default_dtype(protocol) -> str:
    """The protocol's dtype on a GPU; float32 on CPU, where Paddle has no bfloat16 convolution (the vision tower)."""
    import paddle

    on_gpu = paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0
    return protocol.dtype if on_gpu else "float32"


def main(kind: str, argv: list[str] | None = None) -> int:
    from ..cpu_math import tune_if_no_gpu
    from ..process_gc import importing_libraries, running_as_program
    from ..quiet import quiet_libraries

    if argv is None:  # python eval/test_rec.py ...
        running_as_program()
    args = build_parser(kind).parse_args(argv)  # --help and a wrong option answer before Paddle loads
    protocol = get_protocol(args.protocol)
    steps = args.steps if args.steps is not None else protocol.steps
    options = EvalOptions(data_root=args.data_root, image_root=args.image_root, method=args.method,
                          question_template=args.question_template, batch_size=args.batch_size,
                          sample_num=args.sample_num if args.sample_num is not None else protocol.sample_num,
                          seed=args.seed, max_new_tokens=args.max_new_tokens,
                          repetition_penalty=args.repetition_penalty, coord_system=args.coord_system,
                          output_dir=args.output_dir or protocol.output_dir, visualize=getattr(args, "visualize", 0),
                          dtype=args.dtype, protocol=protocol.name,
                          video={key: getattr(args, key, None) for key in VIDEO_KEYS})
    try:
        # every model folder found and verified, every benchmark read, before the first model loads
        model_paths = expand_model_paths(args.model_path)
        for model_path in model_paths:
            check_model_path(model_path)
            verify_checkpoint(model_path, model_only=True)
        tasks = {}
        for dataset in args.test_datasets:
            task = TASKS["rec"] if kind == "rec" else task_for_dataset(  # a video task is told by its file's rows
                dataset, args.task, kind, benchmark_file(args.data_root, dataset) if kind == "video" else None)
            tasks[dataset] = task.under(protocol.name, args.method)
        benchmarks = read_benchmarks(tasks, options)
        check_writable(options.output_dir, "output_dir", option=True)
        for benchmark in benchmarks:
            if benchmark.report.summary():
                print(benchmark.report.summary())

        quiet_libraries()  # before .runner imports paddleformers, whose import-time notices it drops
        with importing_libraries():
            from .runner import Evaluator, accuracy_table, file_name_part, metrics_table, write_results
        tune_if_no_gpu()
        write = protocol.write or write_results
        options = dataclasses.replace(options, dtype=args.dtype or default_dtype(protocol))
        table: dict[str, dict[str, float]] = {}
        metrics: dict[str, dict[tuple, dict]] = {}  # per task: (label, dataset) -> its own metrics
        for model_path in model_paths:
            evaluator = Evaluator(model_path, options)
            model_name = args.model_name if args.model_name and len(model_paths) == 1 else \
                (args.model_name + "_" if args.model_name else "") + checkpoint_label(model_path)
            label = checkpoint_label(model_path) if len(model_paths) > 1 else model_name
            for benchmark in benchmarks:
                dataset, task = benchmark.name, benchmark.task
                summary = evaluator.evaluate(benchmark)
                path = write(summary, options.output_dir, model_name, steps)
                mean = summary.get(f"mean_{task.mean_reward}") if task.mean_reward else None
                print(f"{dataset}: accuracy {summary['accuracy'] * 100:.2f}% "
                      f"({summary['correct']}/{summary['total']})"
                      + ("" if mean is None else f", mean {task.mean_reward} {mean:.4f}") + f" -> {path}")
                if options.visualize:
                    from .visualize import draw_rec_results

                    folder = os.path.join(options.output_dir, "visualize", f"{dataset}_{file_name_part(model_name)}")
                    draw_rec_results(summary["results"], folder, options.visualize)
                table.setdefault(label, {})[dataset] = summary["accuracy"]
                if "metrics" in summary:
                    metrics.setdefault(task.name, {})[(label, dataset)] = summary["metrics"]
        print(accuracy_table(table, args.test_datasets))
        for rows in metrics.values():
            print(metrics_table(rows))
        return 0
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
