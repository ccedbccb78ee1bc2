"""``paddle-r1``: train | sft | check-data | demo | plot | view | serve | export | estimate-memory | make-tiny-model |
selftest."""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import time

from .models.families import DEFAULT_FAMILY, FAMILIES
from .process_gc import importing_libraries, running_as_program
from .quiet import quiet_libraries


def _train(args, extra: list[str]) -> int:
    from .config.jobs import GRPOConfig
    from .config.reading.loading import load_config
    from .models.model_path import check_model_key

    resume = ["--resume_from_checkpoint", args.resume] if args.resume else []
    config = load_config(GRPOConfig, args.config, extra + resume)  # before Paddle's import: a typo stops in a second
    check_model_key(config.model_name_or_path)  # and so does a wrong model path
    with importing_libraries():
        from .evaluation.heldout import heldout_for
        from .trainer.grpo import GRPOTrainer

    result = GRPOTrainer(config, heldout=heldout_for(config)).train()
    print(f"done: {len(result['history'])} steps; checkpoint {result['checkpoint']}")
    return 0


def _sft(args, extra: list[str]) -> int:
    from .config.jobs import SFTConfig
    from .config.reading.loading import load_config
    from .models.model_path import check_model_key

    config = load_config(SFTConfig, args.config, extra)  # before Paddle's import, as in _train
    check_model_key(config.model_name_or_path)
    with importing_libraries():
        from .trainer.sft import SFTTrainer

    result = SFTTrainer(config).train()
    print(f"done: {len(result['history'])} steps; model folder {result['checkpoint']} "
          "(name it as model_name_or_path in a GRPO config)")
    return 0


def _plot(args, extra: list[str]) -> int:
    from .config.paths import file_in_the_way
    from .errors import ConfigError
    from .plot import plot_runs

    if extra:
        raise SystemExit(f"plot: unexpected arguments {extra}")
    output = args.output or os.path.join(args.run_dirs[0], "learning_curve.png")
    blocker = file_in_the_way(os.path.dirname(output))  # before the curves are drawn; nothing created yet
    if blocker:
        raise ConfigError(f"--output: cannot write to {output}: {blocker} is a file, not a folder")
    print(plot_runs(args.run_dirs, output))
    return 0


def _view(args, extra: list[str]) -> int:
    from .view.report import write_report

    if extra:
        raise SystemExit(f"view: unexpected arguments {extra}")
    if args.model and not os.path.isdir(args.model):
        raise FileNotFoundError(f"--model {args.model}: no such model folder")
    try:
        path = write_report(args.folder, steps=args.steps, output=args.output, model_dir=args.model,
                            coord_system=args.coord_system)
    except ValueError as e:
        raise SystemExit(f"paddle-r1 view: error: {e}") from None
    print(path)
    if args.open:
        import webbrowser

        webbrowser.open("file://" + os.path.abspath(path))
    return 0


def _serve(args, extra: list[str]) -> int:
    from .cpu_math import tune_if_no_gpu
    from .data.video import VideoSampling
    from .models.model_path import check_model_path
    from .serve.limits import ServeLimits

    if extra:
        raise SystemExit(f"serve: unexpected arguments {extra}")
    check_model_path(args.checkpoint)  # a wrong path is one line before Paddle loads
    if args.image_root and not os.path.isdir(args.image_root):  # else every request naming a local image fails
        raise FileNotFoundError(f"--image_root {args.image_root}: no such folder")
    with importing_libraries():
        from .serve.server import serve
    tune_if_no_gpu()
    limits = ServeLimits(max_request_bytes=args.max_request_mb << 20, max_images=args.max_images,
                         max_image_pixels=args.max_image_pixels, max_tokens=args.max_tokens, max_n=args.max_n,
                         max_concurrency=args.max_concurrency, max_batch=args.max_batch, read_timeout=args.read_timeout,
                         max_prompt_tokens=args.max_prompt_tokens, max_videos=args.max_videos)
    serve(args.checkpoint, host=args.host, port=args.port, model_name=args.model_name, image_root=args.image_root,
          limits=limits, dtype=args.dtype, api_key=args.api_key, video=VideoSampling(frames_fps=args.video_frames_fps))
    return 0


def _export(args, extra: list[str]) -> int:
    from .checkpoints.export import ExportError, export_checkpoint

    if extra:
        raise SystemExit(f"export: unexpected arguments {extra}")
    try:
        export_checkpoint(args.checkpoint, args.dest, dtype=args.dtype, max_shard_size=args.max_shard_size)
    except ExportError as e:
        print(f"paddle-r1 export: error: {e}", file=sys.stderr)
        return 2
    return 0


def _check_data(args, extra: list[str]) -> int:
    from .config.jobs import GRPOConfig
    from .config.reading.loading import load_config
    from .data.loader import is_data_path, short_clips
    from .data.video import VideoSampling
    from .job_data import load_from_config

    if is_data_path(args.config):  # the data itself, under the default config and the overrides given
        config = load_config(GRPOConfig, None, ["--data_path", args.config, *extra])
    else:
        config = load_config(GRPOConfig, args.config, extra)
    start = time.perf_counter()
    samples, report = load_from_config(config, decode_threads=args.threads if args.decode else 0)
    print(report.table())
    for where, reason in report.problems:
        print(f"skipped {where}: {reason}")
    for where, note in short_clips(samples, VideoSampling.from_config(config)):
        print(f"note {where}: {note}")
    if args.decode:
        threads = f"{args.threads} thread" + ("s" if args.threads > 1 else "")
        print(f"decoded {report.decoded['images']} images and {report.decoded['clips']} clips whole on {threads}; "
              f"the checks took {time.perf_counter() - start:.1f} s")
    read = sum(report.read.values())
    print(f"skipped {report.skipped} of {read} samples" if report.skipped else f"all {len(samples)} samples are usable")
    return 0


def _demo(args, extra: list[str]) -> int:
    from .config.jobs import GRPOConfig
    from .config.reading.command_line import parse_overrides
    from .demo import run_demo

    overrides = parse_overrides(extra, GRPOConfig)
    with importing_libraries():
        importlib.import_module(".trainer.grpo", __package__)  # what run_demo imports when it runs
    run_demo(args.output_dir, args.family, sft_steps=args.sft_steps, **overrides)
    return 0


def _estimate_memory(args, extra: list[str]) -> int:
    from .config.jobs import GRPOConfig
    from .config.reading.loading import load_config
    from .memory import VideoClip, estimate

    video = None
    if args.video_seconds is not None:
        video = VideoClip(args.video_seconds, *args.video_size, args.video_fps, args.videos_per_prompt)
    result = estimate(load_config(GRPOConfig, args.config, extra), args.gpus, args.gpu_memory,
                      flash_attention=args.sm >= 80, host_memory_gib=args.host_memory, video=video)
    print(result.table())
    return 0 if result.fits and result.host_fits else 1


def _frame_size(text: str) -> tuple[int, int]:
    """``WxH`` (``1280x720``) as (w, h)."""
    try:
        width, height = (int(side) for side in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not WxH, e.g. 1280x720") from None
    return width, height


def _make_tiny_model(args, extra: list[str]) -> int:
    from .testing.tiny import make_tiny_model

    if extra:
        raise SystemExit(f"make-tiny-model: unexpected arguments {extra}")
    print(make_tiny_model(args.dir, family=args.family, seed=args.seed))
    return 0


def _selftest(args, extra: list[str]) -> int:
    import functools

    from .config.paths import check_writable
    from .cpu_math import tune_if_no_gpu
    from .selftest import run_selftest

    if extra:
        raise SystemExit(f"selftest: unexpected arguments {extra}")
    if args.workdir:
        check_writable(args.workdir, "workdir", option=True)
    with importing_libraries():
        importlib.import_module(".trainer.grpo", __package__)  # what the checks import when they run
    tune_if_no_gpu()  # the CPU checks on the kernels a CPU training job uses
    return run_selftest(only=args.only, output=args.output, nproc=args.nproc, dtype=args.dtype, workdir=args.workdir,
                        echo=functools.partial(print, flush=True))


def build_parser() -> argparse.ArgumentParser:
    from .config.jobs import GRPOConfig, SFTConfig
    from .config.help import KeysHelpParser
    from .config.values import Bounds, above, at_least, option_type

    positive, count, above_zero = option_type(int, at_least(1)), option_type(int, at_least(0)), \
        option_type(float, above(0))
    parser = argparse.ArgumentParser(prog="paddle-r1", description="GRPO fine-tuning of Qwen-VL models on Paddle")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=KeysHelpParser)
    train = sub.add_parser("train", help="GRPO training from a yaml/json config; --key value overrides any key",
                           config_class=GRPOConfig)
    train.add_argument("--config", help="yaml or json config file")
    train.add_argument("--resume", help="checkpoint folder to resume from, or 'latest'")
    train.set_defaults(run=_train)
    sft = sub.add_parser("sft", help="supervised fine-tuning on the solutions (a warm start for GRPO); --key value",
                         config_class=SFTConfig)
    sft.add_argument("--config", help="yaml or json config file (keys of paddle_r1.config.SFTConfig)")
    sft.set_defaults(run=_sft)
    plot = sub.add_parser("plot", help="PNG of reward, KL, entropy, completion length and held-out score from "
                          "metrics.jsonl")
    plot.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="output folders holding metrics.jsonl")
    plot.add_argument("--output", "-o", help="PNG path (default: RUN_DIR/learning_curve.png)")
    plot.set_defaults(run=_plot)
    view = sub.add_parser("view", help="static HTML report of a run's completions (images with predicted and true "
                          "boxes, rewards, advantages) and curves, or of an eval results folder")
    view.add_argument("folder", metavar="OUTPUT_DIR", help="a training run's output folder or an eval results folder")
    view.add_argument("--steps", help="steps to render: 'all' or e.g. 1,5,10-20 (default: the last 3 logged)")
    view.add_argument("--output", "-o", help="HTML path (default: OUTPUT_DIR/report/index.html)")
    view.add_argument("--model", help="model folder whose processor and family convert boxes when the rows do not "
                                      "say (default: the run's newest checkpoint)")
    view.add_argument("--coord_system", help="abs_resized | rel_1000 | abs_original (default: the family's)")
    view.add_argument("--open", action="store_true", help="open the report in the default browser")
    view.set_defaults(run=_view)
    srv = sub.add_parser("serve", help="OpenAI-compatible chat-completions server for a checkpoint (CPU or GPU)")
    srv.add_argument("checkpoint", help="model folder (a checkpoint-N/ or a published model)")
    srv.add_argument("--host", default="127.0.0.1", help="address to bind (default: this machine only)")
    srv.add_argument("--port", type=option_type(int, Bounds(0, 65535)), default=8000)
    srv.add_argument("--api_key", "--api-key", default=os.environ.get("PADDLE_R1_API_KEY") or None,
                     help="requests must send 'Authorization: Bearer KEY' (else 401); default: the environment "
                     "variable PADDLE_R1_API_KEY (not shown by ps, unlike the command line); without a key a --host "
                     "beyond this machine prints a warning")
    srv.add_argument("--model_name", help="the model id clients name (default: the folder's name)")
    srv.add_argument("--image_root", help="folder local image paths may be read from (default: none allowed)")
    srv.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    srv.add_argument("--max_request_mb", type=positive, default=20, help="largest request body, MiB")
    srv.add_argument("--max_images", type=count, default=8, help="images per request")
    srv.add_argument("--max_image_pixels", type=positive, default=4096 * 4096, help="pixels per image, before resizing")
    srv.add_argument("--max_tokens", type=positive, default=1024, help="ceiling of a request's max_tokens")
    srv.add_argument("--max_n", type=positive, default=8, help="ceiling of a request's n")
    srv.add_argument("--max_concurrency", type=positive, default=16, help="requests in progress at once; more get 429")
    srv.add_argument("--max_batch", type=positive, default=8, help="requests decoded together in one batch")
    srv.add_argument("--read_timeout", type=above_zero, default=30.0, help="seconds a request (headers and body) may "
                     "take to arrive; slower clients get 408")
    srv.add_argument("--max_videos", type=count, default=2, help="videos per request (video_url parts)")
    srv.add_argument("--video_frames_fps", type=above_zero, default=2.0, help="frames per second of a video sent as a "
                     "list of frames (data:video/jpeg;base64,<frame>,<frame>,...)")
    srv.add_argument("--max_prompt_tokens", type=positive, help="longest prompt, text and image tokens (default: the "
                     "model's context less max_tokens, and what a full batch fits in half the free memory)")
    srv.set_defaults(run=_serve)
    export = sub.add_parser("export", help="a checkpoint's model alone, to publish or serve: weights (LoRA merged) in "
                            "one dtype as sharded safetensors, config, generation config, processor files, model card")
    export.add_argument("checkpoint", metavar="CHECKPOINT", help="a checkpoint-N folder, or a run's output_dir (its "
                        "most recently written checkpoint)")
    export.add_argument("dest", metavar="DEST", help="a new or empty folder")
    export.add_argument("--dtype", choices=("float32", "bfloat16", "float16"),
                        help="the weights' dtype (default: the source model's config.json's)")
    export.add_argument("--max_shard_size", "--max-shard-size", default="5GB",
                        help="largest weight file, as transformers takes it: 5GB (default), 500MB, 2GiB or bytes")
    export.set_defaults(run=_export)
    check = sub.add_parser("check-data", help="validate a config's data, or a data file, without training; counts "
                           "per file")
    check.add_argument("config", metavar="CONFIG_OR_DATA", help="a training config (yaml or json), or data as "
                       "data_path takes it (a jsonl, json, csv or parquet file, a datasets folder, a mixture yaml), "
                       "checked under the default config and the --key value overrides given after it")
    check.add_argument("--decode", action="store_true", help="also decode every image and clip whole, as training "
                       "reads them (the checks read an image's header only: a truncated image passes them)")
    check.add_argument("--threads", type=option_type(int, Bounds(1, 64)), default=min(8, os.cpu_count() or 1),
                       help="threads that decode, 1 to 64 (--decode; default: the CPUs, at most 8; more than the "
                       "CPUs help only where reading the files waits, as on a network mount)")
    check.set_defaults(run=_check_data)
    demo = sub.add_parser("demo", help="a few GRPO steps of a tiny model on synthetic shapes, on CPU")
    # both spellings: --output_dir is the config key's everywhere else (as an override it reached run_demo twice)
    demo.add_argument("--output-dir", "--output_dir", dest="output_dir", default="demo_output")
    demo.add_argument("--family", default=DEFAULT_FAMILY, choices=tuple(FAMILIES), metavar="FAMILY",
                      help="tiny model family (its task): " + ", ".join(
        f"{name} ({family.demo_task})" for name, family in FAMILIES.items()))
    demo.add_argument("--sft_steps", type=count, default=100, help="answer-format SFT steps before GRPO (0: none)")
    demo.set_defaults(run=_demo)
    memory = sub.add_parser("estimate-memory", help="per-GPU memory of a GRPO config, from config.json alone; "
                            "exit 1 when it does not fit; --key value overrides any config key",
                            config_class=GRPOConfig)
    memory.add_argument("--config", help="yaml or json GRPO config file")
    memory.add_argument("--gpus", type=positive, default=8, help="GPUs the run uses (sharding divides by this)")
    memory.add_argument("--gpu_memory", type=above_zero, default=80.0, help="GiB per GPU")
    memory.add_argument("--sm", type=positive, default=80, help="the GPU's compute capability x 10 (V100: 70, T4: 75, "
                        "A100: 80): below 80 sdpa has no flash attention, and the attention's copies are counted")
    memory.add_argument("--host_memory", type=above_zero, help="GiB of RAM per machine, shared by its ranks (all "
                        "--gpus); default: the host rows are shown, not compared")
    memory.add_argument("--video_seconds", type=above_zero, help="the data's longest clip, in seconds: its frames and "
                        "tokens (video_* keys) join each prompt; default: no video")
    memory.add_argument("--video_size", type=_frame_size, default=(1280, 720),
                        help="the data's largest clip frame, WxH (default 1280x720)")
    memory.add_argument("--video_fps", type=above_zero, default=30.0, help="the clips' own frame rate")
    memory.add_argument("--videos_per_prompt", type=positive, default=1)
    memory.set_defaults(run=_estimate_memory)
    tiny = sub.add_parser("make-tiny-model", help="write a seeded tiny checkpoint folder")
    tiny.add_argument("dir")
    tiny.add_argument("--family", default=DEFAULT_FAMILY, choices=tuple(FAMILIES), metavar="FAMILY",
                      help=", ".join(FAMILIES))
    tiny.add_argument("--seed", type=count, default=0)
    tiny.set_defaults(run=_make_tiny_model)
    from .selftest import CHECK_NAMES  # names only: the checks import Paddle when they run

    selftest = sub.add_parser("selftest", help="run this machine's GPU paths (or CPU ones) on tiny models: one line "
                              "per check, exit 1 when one fails")
    selftest.add_argument("--output", "-o", help="write the whole report as JSON here (send it with a bug report)")
    selftest.add_argument("--only", nargs="+", choices=CHECK_NAMES, metavar="NAME",
                          help=f"run only these checks: {', '.join(CHECK_NAMES)}")
    selftest.add_argument("--nproc", type=positive, default=2, help="ranks of the multi-rank checks (GPUs, or CPU "
                          "processes over gloo)")
    selftest.add_argument("--dtype", choices=("bfloat16", "float16", "float32"),
                          help="the dtype a GPU run asks for (default bfloat16, as the shipped configs; the GPU may "
                          "change it as training does); CPU checks run float32")
    selftest.add_argument("--workdir", help="keep the tiny models, runs and rank logs in this folder (default: a "
                          "temporary one, removed)")
    selftest.set_defaults(run=_selftest)
    return parser


def _run_errors() -> tuple:
    """What stops a run that was set up right, each reported in full: a reward that raised (``RewardError``:
    the reward's name, the exception, its traceback), a run whose steps stopped being finite
    (``TrainingDiverged``), a disk that filled while saving (``NoSpaceError``), another rank of the job late or
    gone (``RankFailure``). Imported only once an error
    reaches ``main`` (the rewards package takes seconds to import, and most commands never score)."""
    from .rewards.manager import RewardError
    from .trainer.base import TrainingDiverged
    from .checkpoints.folders import NoSpaceError
    from .parallel.rank_watch import RankFailure

    return RewardError, TrainingDiverged, NoSpaceError, RankFailure


def main(argv: list[str] | None = None) -> int:
    """Run one command. A user's mistake (a bad key, value, path, data file, a checkpoint that fails verification) is
    one line and exit code 2; a run that stopped (a reward that raised, steps no longer finite, a full disk) is its
    full report and exit code 1; any other exception is a bug and keeps its traceback."""
    from .errors import ConfigError
    from .data.samples import DataError
    from .checkpoints.manifest import CheckpointError

    if argv is None:  # the console script, python -m paddle_r1.cli, a launch script's rank
        running_as_program()
    args, extra = build_parser().parse_known_args(argv)
    quiet_libraries()
    try:
        return args.run(args, extra)
    except (ConfigError, DataError, CheckpointError, FileNotFoundError) as e:
        print(f"paddle-r1 {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        kept = "; completed checkpoints are intact" if args.command in ("train", "sft") else ""
        print(f"paddle-r1 {args.command}: interrupted{kept}", file=sys.stderr)
        return 130
    except _run_errors() as e:  # evaluated only when the clauses above did not match
        print(f"paddle-r1 {args.command}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
