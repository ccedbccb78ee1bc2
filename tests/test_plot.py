"""paddle-r1 plot: a PNG of a run's curves from the metrics.jsonl the test writes."""
import json

from PIL import Image

from paddle_r1.plot import plot_runs, read_metrics, reward_function_keys, series

from test_cli import paddle_r1


def _write_run(folder, steps=12, eval_every=4):
    folder.mkdir(parents=True)
    with open(folder / "metrics.jsonl", "w") as f:
        f.write(json.dumps({"step": 0, "eval/score": 0.25}) + "\n")  # the held-out score before training
        for step in range(1, steps + 1):
            row = {"step": step, "loss": 0.1, "reward": 0.5 + step / 40, "kl": 0.001 * step, "entropy": 2 - step / 10,
                   "completion_length": 13 - step / 12, "rewards/counting/mean": 0.3 + step / 40,
                   "rewards/format/mean": 0.9, "rewards/format/std": 0.1}
            if step % eval_every == 0:
                row["eval/score"] = 0.25 + step / 20
            f.write(json.dumps(row) + "\n")
    return folder


def test_series_and_reward_keys(tmp_path):
    rows = read_metrics(str(_write_run(tmp_path / "run")))
    assert series(rows, "eval/score") == ([0, 4, 8, 12], [0.25, 0.45, 0.65, 0.85])
    assert series(rows, "kl")[0] == list(range(1, 13))
    assert series(rows, "entropy")[1][:2] == [1.9, 1.8]
    assert reward_function_keys(rows) == ["rewards/counting/mean", "rewards/format/mean"]


def test_png_written(tmp_path):
    runs = [str(_write_run(tmp_path / name)) for name in ("seed0", "seed1")]
    out = plot_runs(runs, str(tmp_path / "plots" / "curve.png"))
    with Image.open(out) as img:
        assert img.format == "PNG" and img.size[0] > 300 and img.size[1] > 200
        assert len(set(img.convert("L").getdata())) > 10  # something was drawn


def test_plot_command(tmp_path):
    run = _write_run(tmp_path / "run")
    result = paddle_r1("plot", str(run))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith(str(run / "learning_curve.png"))
    assert (run / "learning_curve.png").stat().st_size > 1000
    result = paddle_r1("plot", str(tmp_path / "nothing"))
    assert result.returncode == 2 and "no metrics.jsonl in" in result.stderr
    assert not (tmp_path / "nothing").exists()  # a mistyped run folder is not created
    (tmp_path / "a_file").write_text("")
    result = paddle_r1("plot", str(run), "--output", str(tmp_path / "a_file" / "curve.png"))
    assert result.returncode == 2 and result.stderr.strip() == (f"paddle-r1 plot: error: --output: cannot write to "
                                                                f"{tmp_path}/a_file/curve.png: {tmp_path}/a_file is a "
                                                                "file, not a folder")


def test_a_run_in_progress_plots_its_finished_rows(tmp_path):
    """A run that is still writing (or was killed while it wrote) leaves its last line cut off: plot draws the rows
    before it (it raised a JSONDecodeError traceback)."""
    run = _write_run(tmp_path / "run")
    text = (run / "metrics.jsonl").read_text()
    (run / "metrics.jsonl").write_text(text[:-40])
    assert series(read_metrics(str(run)), "kl")[0] == list(range(1, 12))
    result = paddle_r1("plot", str(run))
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    with Image.open(run / "learning_curve.png") as img:
        assert img.format == "PNG"
