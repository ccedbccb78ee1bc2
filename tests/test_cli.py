"""The commands as a user types them, each in its own process."""
import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from paddle_r1.config.jobs import GRPOConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def paddle_r1(*args, cwd=None, pythonpath=(), env=None):
    """The console script, running the code under test (this checkout first on PYTHONPATH) with the model hub off;
    ``env``: variables added to the environment."""
    exe = os.path.join(os.path.dirname(sys.executable), "paddle-r1")
    command = [exe] if os.path.exists(exe) else [sys.executable, "-m", "paddle_r1.cli"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {}),
           "PYTHONPATH": os.pathsep.join([ROOT, *map(str, pythonpath), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(command + list(args), capture_output=True, text=True, cwd=cwd, timeout=300, env=env)


# What importing paddleformers prints (transformers' notice, then paddleformers' yellow WARNING): both about PyTorch,
# which a Paddle user neither has nor needs
LIBRARY_NOTICES = ("PyTorch was not found", "compatibility issues between PaddlePaddle and PyTorch",
                   # PaddleOCR-VL's (the paddleocr_vl demo): paddleformers' import and build, Paddle's loader
                   "Triton is installed, but not yet compatible", "use GQA", "packing_position_embedding",
                   "does not have a fast version", "only supports the slow version",
                   # Paddle's log line on a product of two dtypes (Qwen2.5-VL's clip time positions); paddleformers'
                   # LoRAModel on a config without the model's tensor-parallel size
                   "run type promotion automatically", "Reset tensor_model_parallel_size")


def assert_no_library_notices(result: subprocess.CompletedProcess) -> None:
    for notice in LIBRARY_NOTICES:
        assert notice not in result.stdout + result.stderr, f"the command printed {notice!r}"


def imported_modules(result: subprocess.CompletedProcess) -> set:
    """The modules a process run with ``PYTHONPROFILEIMPORTTIME=1`` imported; their lines are taken out of
    ``result.stderr``, which keeps what the command itself wrote."""
    lines = result.stderr.splitlines()
    result.stderr = "\n".join(line for line in lines if not line.startswith("import time:"))
    return {line.rsplit("|", 1)[1].strip() for line in lines if line.startswith("import time:")}


def test_make_tiny_model(tmp_path):
    result = paddle_r1("make-tiny-model", str(tmp_path / "m"), "--family", "qwen2_5_vl")
    assert result.returncode == 0, result.stderr
    assert_no_library_notices(result)
    assert json.load(open(tmp_path / "m" / "config.json"))["model_type"] == "qwen2_5_vl"
    result = paddle_r1("make-tiny-model", str(tmp_path / "x"), "--family", "llava")
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1] == (
        "paddle-r1 make-tiny-model: error: argument --family: invalid choice: 'llava' (choose from 'qwen2_vl', "
        "'qwen2_5_vl', 'qwen3_vl', 'paddleocr_vl')")


def test_train_stops_on_bad_input_with_one_line(tmp_path, tiny_model_dir, rec_jsonl):
    config = tmp_path / "c.yaml"
    config.write_text(f"model_name_or_path: {tiny_model_dir}\ndata_path: {rec_jsonl}\nnum_generation: 4\n")
    result = paddle_r1("train", "--config", str(config), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == \
        f"paddle-r1 train: error: {config}: unknown config key(s) 'num_generation'"
    config.write_text(f"model_name_or_path: {tmp_path}/missing\ndata_path: {rec_jsonl}\n")
    result = paddle_r1("train", "--config", str(config), cwd=tmp_path)
    assert result.returncode == 2 and f"model folder not found: {tmp_path}/missing" in result.stderr
    config.write_text(f"model_name_or_path: {tiny_model_dir}\ndata_path: {rec_jsonl}\nnum_generations: 1\n")
    assert "'num_generations': must be >= 2, got 1" in paddle_r1("train", "--config", str(config), cwd=tmp_path).stderr
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    config.write_text(f"model_name_or_path: {tiny_model_dir}\ndata_path: {empty}\n")
    assert "the dataset is empty" in paddle_r1("train", "--config", str(config), cwd=tmp_path).stderr


def test_a_config_typo_stops_before_paddle_loads_and_the_libraries_stay_quiet_when_it_does(tmp_path):
    """``train`` reads its config before importing Paddle: a typo is one line in under a second of imports. The
    libraries quieted before their import stay quiet: paddleformers' and fleet's INFO lines are dropped, their
    warnings kept (paddleformers sets its logger to DEBUG when imported)."""
    config = tmp_path / "c.yaml"
    config.write_text("model_name_or_path: m\ndata_path: d.jsonl\nnum_generation: 4\n")
    script = (f"import sys; from paddle_r1.cli import main; code = main(['train', '--config', {str(config)!r}]); "
              "assert 'paddle' not in sys.modules and 'paddleformers' not in sys.modules, 'imported before'; "
              "from paddleformers.utils.log import logger; logger.info('library info'); "
              "logger.warning('library warn'); "
              "from paddle.distributed.fleet.utils.log_util import logger as fleet; fleet.info('fleet info'); "
              "fleet.warning('fleet warn'); sys.exit(code)")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": ROOT})
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"paddle-r1 train: error: {config}: unknown config key(s) 'num_generation'" in result.stderr
    assert "library warn" in result.stderr and "fleet warn" in result.stderr
    assert "library info" not in result.stderr + result.stdout and "fleet info" not in result.stderr + result.stdout


# Runs paddle-r1 with the arguments after -c's script, as the program (main() reads sys.argv) or as a caller
# (main(list)); prints the frozen object count, whether the collector is on, the full collections that ran while
# the trainer's libraries were being imported, and the frozen count once the exit handlers have run
GC_PROBE = """
import atexit, gc, sys
while_importing = []
gc.callbacks.append(lambda phase, info: phase == "start" and info["generation"] == 2
                    and while_importing.append("paddle" in sys.modules and "paddle_r1.trainer.grpo" not in sys.modules))
from paddle_r1.cli import main
mode = sys.argv.pop(1)
code = main() if mode == "program" else main(sys.argv[1:])
print(gc.get_freeze_count(), gc.isenabled(), sum(while_importing))
atexit._run_exitfuncs()
print(gc.get_freeze_count())
sys.exit(code)
"""


@pytest.mark.parametrize("mode", ["program", "caller"])
def test_the_program_keeps_the_libraries_out_of_full_collections(tmp_path, tiny_model_dir, mode):
    """``paddle-r1`` holds the collector while Paddle, PaddleFormers and transformers import, then freezes what they
    made until exit (``process_gc``); ``main([...])`` called from another program leaves that program's collector as
    it was."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    result = subprocess.run([sys.executable, "-c", GC_PROBE, mode, "train", "--model_name_or_path", tiny_model_dir,
                             "--data_path", str(empty)], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": ROOT}, cwd=tmp_path)
    assert result.returncode == 2 and "the dataset is empty" in result.stderr, result.stderr[-2000:]
    frozen, enabled, collections_while_importing, frozen_at_exit = result.stdout.split()[-4:]
    assert enabled == "True" and frozen_at_exit == "0"  # the interpreter's last collection finalizes them
    if mode == "program":
        assert int(frozen) > 100_000 and collections_while_importing == "0"
    else:
        assert int(frozen) == 0 and int(collections_while_importing) >= 1


@pytest.mark.parametrize("command", ["train", "sft"])
def test_a_wrong_model_path_stops_before_paddle_loads(tmp_path, command):
    """``train`` and ``sft`` check ``model_name_or_path`` right after reading the config: a folder that is not
    there is one line, with Paddle never imported (its import alone takes seconds)."""
    missing = tmp_path / "no_such_model"
    script = (f"import sys; from paddle_r1.cli import main; code = main([{command!r}, '--model_name_or_path', "
              f"{str(missing)!r}, '--data_path', 'd.jsonl']); "
              "assert 'paddle' not in sys.modules and 'paddleformers' not in sys.modules, 'imported before'; "
              "sys.exit(code)")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": ROOT})
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == \
        f"paddle-r1 {command}: error: config key 'model_name_or_path': model folder not found: {missing}"


def test_train_and_resume_from_the_command_line(tmp_path, tiny_model_dir, rec_jsonl):
    out = tmp_path / "run"
    args = ["train", "--model_name_or_path", tiny_model_dir, "--data_path", rec_jsonl, "--output_dir", str(out),
            "--num_generations", "2", "--max_completion_length", "6", "--save_steps", "1", "--use_visualdl", "false"]
    first = paddle_r1(*args, "--max_steps", "1")
    assert first.returncode == 0, first.stderr
    assert_no_library_notices(first)
    resumed = paddle_r1(*args, "--max_steps", "2", "--resume", "latest")
    assert resumed.returncode == 0, resumed.stderr
    steps = [json.loads(line)["step"] for line in open(out / "metrics.jsonl")]
    assert steps == [1, 2] and os.path.isdir(out / "checkpoint-2")


@pytest.mark.parametrize("family, output_flag", [("qwen2_5_vl", "--output-dir"), ("paddleocr_vl", "--output_dir")])
def test_demo_runs_and_says_where_things_are(tmp_path, family, output_flag):
    result = paddle_r1("demo", output_flag, str(tmp_path / "demo"), "--family", family, "--max_steps", "2",
                       "--sft_steps", "5", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert_no_library_notices(result)
    for what in ("metrics:", "completions:", "checkpoint:"):
        assert what in result.stdout
    assert os.path.isdir(tmp_path / "demo" / "checkpoint-2")
    assert json.load(open(tmp_path / "demo" / "checkpoint-2" / "config.json"))["model_type"] == family


def test_the_shipped_config_lists_every_key_and_loads():
    values = yaml.safe_load(open(os.path.join(ROOT, "configs", "grpo_rec.yaml")))
    assert set(values) == set(GRPOConfig.__dataclass_fields__)
    GRPOConfig(**values)


def test_check_data_counts_per_file(tmp_path, rec_jsonl):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"image": "nope.png", "problem": "p", "solution": [0, 0, 1, 1]}\nnot json\n')
    mixture = tmp_path / "mix.yaml"
    mixture.write_text(f"datasets:\n  - json_path: {rec_jsonl}\n  - json_path: {bad}\n")
    config = tmp_path / "c.yaml"
    config.write_text(f"data_path: {mixture}\n")
    result = paddle_r1("check-data", str(config))
    assert result.returncode == 0, result.stderr
    assert f"| {rec_jsonl} | 12 | 12 | 0 |" in result.stdout and f"| {bad} | 2 | 0 | 2 |" in result.stdout
    assert f"skipped {bad}:1: image not found: " in result.stdout and f"skipped {bad}:2: malformed" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == "skipped 2 of 14 samples"
    config.write_text(f"data_path: {bad}\nstrict_data: true\n")
    result = paddle_r1("check-data", str(config))
    assert result.returncode == 2 and f"{bad}:1: image not found" in result.stderr


def test_wrong_values_and_paths_stop_before_anything_loads(tmp_path, rec_jsonl):
    base = ["train", "--data_path", rec_jsonl, "--output_dir", str(tmp_path / "out"), "--device", "cpu"]
    result = paddle_r1(*base, "--model_name_or_path", "./nope_dir", "--learning_rate", "abc", cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1] == (
        "paddle-r1 train: error: command line: config key 'learning_rate' expects a number (float), got 'abc'")
    result = paddle_r1(*base, "--model_name_or_path", "./nope_dir", cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1] == (
        "paddle-r1 train: error: config key 'model_name_or_path': model folder not found: ./nope_dir")
    result = paddle_r1(*base, "--model_name_or_path", "Qwen/Qwen2.5-VL-3B-Instruct", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "model folder not found: Qwen/Qwen2.5-VL-3B-Instruct; as a hub id it could not be fetched" in result.stderr
    assert not os.path.exists(tmp_path / "out")


def test_serve_names_a_missing_model_folder_before_paddle_loads(tmp_path):
    result = paddle_r1("serve", "./nope_dir", "--port", "0", cwd=tmp_path, env={"PYTHONPROFILEIMPORTTIME": "1"})
    modules = imported_modules(result)
    assert result.returncode == 2
    assert result.stderr.strip() == "paddle-r1 serve: error: model folder not found: ./nope_dir"
    assert "paddle_r1.cli" in modules and "paddle" not in modules


def test_a_user_reward_that_raises_is_reported_in_full(tmp_path, tiny_model_dir, rec_jsonl):
    (tmp_path / "my_rewards.py").write_text("def needs_answer(completions, **columns):\n"
                                            "    return [float(a) for a in columns['answer']]\n")
    result = paddle_r1("train", "--model_name_or_path", tiny_model_dir, "--data_path", rec_jsonl, "--output_dir",
                       str(tmp_path / "out"), "--reward_funcs", "my_rewards:needs_answer", "--num_generations", "2",
                       "--max_completion_length", "4", "--max_steps", "1", "--use_visualdl", "false",
                       pythonpath=[tmp_path])
    assert result.returncode == 1, result.stderr
    assert "paddle-r1 train: error: reward 'my_rewards:needs_answer' raised KeyError: 'answer' (at " \
           f"{tmp_path}/my_rewards.py:2 in needs_answer)" in result.stderr
    assert "Traceback (most recent call last)" in result.stderr


def test_a_bug_is_not_taken_for_a_user_mistake(monkeypatch, tmp_path):
    from paddle_r1 import cli, plot

    def broken(run_dirs, output):
        raise KeyError("a bug")

    monkeypatch.setattr(plot, "plot_runs", broken)
    with pytest.raises(KeyError, match="a bug"):
        cli.main(["plot", str(tmp_path)])


def command_parsers():
    """(name, argparse parser) of every paddle-r1 command and of the four eval scripts."""
    import argparse

    from paddle_r1.cli import build_parser
    from paddle_r1.evaluation.cli import build_parser as eval_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    return [*commands.items(), *((f"eval {kind}", eval_parser(kind)) for kind in ("rec", "r1v", "ocr", "video"))]


def outside(bounds) -> list[float]:
    """The values just past each finite end of ``bounds``."""
    values = [bounds.low if bounds.low_open else bounds.low - 1] if bounds.low > float("-inf") else []
    return values + ([bounds.high if bounds.high_open else bounds.high + 1] if bounds.high < float("inf") else [])


def test_every_numeric_option_of_every_command_refuses_a_value_outside_its_range():
    """No command option is a bare int or float (a 0 batch divided by zero in serve and the eval scripts, a
    negative one raised a ZeroDivisionError traceback): each names its range, checked as argparse reads it."""
    import argparse

    checked = 0
    for name, parser in command_parsers():
        for action in parser._actions:
            where = f"{name} {'/'.join(action.option_strings) or action.dest}"
            assert action.type not in (int, float), f"{where}: a bare {action.type.__name__}, no range"
            if not hasattr(action.type, "bounds"):
                continue
            for value in outside(action.type.bounds):
                with pytest.raises(argparse.ArgumentTypeError, match=re.escape(f"must be {action.type.bounds}, got")):
                    action.type(str(action.type.kind(value)))
            with pytest.raises(argparse.ArgumentTypeError, match="expects"):
                action.type("many")
            checked += 1
    assert checked >= 30


@pytest.mark.parametrize("command", [["serve", "folder", "--max_batch", "0"], ["estimate-memory", "--gpus", "0"]])
def test_a_value_outside_an_options_range_is_one_line_before_paddle_loads(command):
    result = paddle_r1(*command, env={"PYTHONPROFILEIMPORTTIME": "1"})
    modules = imported_modules(result)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == \
        f"paddle-r1 {command[0]}: error: argument {command[-2]}: must be >= 1, got 0"
    assert "paddle" not in modules


@pytest.mark.parametrize("command, error", [
    (["selftest", "--only", "environment", "--workdir", "{tmp}/a_file/work"],
     "--workdir: cannot write to {tmp}/a_file/work: {tmp}/a_file is a file, not a folder"),
    (["serve", "{model}", "--image_root", "{tmp}/images"], "--image_root {tmp}/images: no such folder"),
    (["view", "{tmp}", "--model", "{tmp}/model"], "--model {tmp}/model: no such model folder"),
], ids=["selftest workdir", "serve image_root", "view model"])
def test_a_folder_option_that_cannot_be_used_is_one_line_before_paddle_loads(command, error, tmp_path, tiny_model_dir):
    (tmp_path / "a_file").write_text("")
    values = {"tmp": tmp_path, "model": tiny_model_dir}
    result = paddle_r1(*(part.format(**values) for part in command), env={"PYTHONPROFILEIMPORTTIME": "1"})
    modules = imported_modules(result)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == f"paddle-r1 {command[0]}: error: " + error.format(**values)
    assert "paddle" not in modules
