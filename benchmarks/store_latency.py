"""What a request to the job's TCP store costs, and what that did to a GRPO step of several ranks (CPU, gloo).

    python benchmarks/store_latency.py [--calls 50] [--ranks 2] [--steps 4] [--rounds 2]

Before each collective a rank checks in at the job's store (``paddle_r1.parallel.rank_watch``): one ``add`` to say
it came, one per rank to see who has. Paddle's TCPStore client writes a request in pieces with Nagle's algorithm on,
so every piece after the first waits for the server's delayed ACK. Two tables, each side alternating within a
round: the seconds of one ``add`` and one ``get`` through a client as Paddle makes it and through one with
TCP_NODELAY (``rank_watch.no_delay``, what paddle_r1's clients get); then the seconds per step of the same tiny
GRPO job over ``--ranks`` gloo processes, its check-ins through either kind of client.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import tempfile
import time
import warnings

warnings.filterwarnings("ignore")
SIDES = ("as Paddle makes it", "TCP_NODELAY")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request_seconds(calls: int) -> dict:
    """{side: (seconds per add, seconds per get)} through clients of one store served by this process."""
    from paddle.base.core import TCPStore

    from paddle_r1.parallel import rank_watch

    port = _free_port()
    server = TCPStore("127.0.0.1", port, True, 1, 60)  # serves while referenced
    server.set("key", "value")
    result = {}
    for side in SIDES:
        client = (rank_watch._client("127.0.0.1", port) if side == "TCP_NODELAY"
                  else TCPStore("127.0.0.1", port, False, 0, 60))
        result[side] = _seconds_per_call(client.add, ("count", 0), calls), _seconds_per_call(client.get, ("key",),
                                                                                             calls)
    return result


def _seconds_per_call(method, args: tuple, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        method(*args)
    return (time.perf_counter() - start) / calls


def run_rank(settings: dict, nagle: bool, report_dir: str) -> None:
    """One rank of the GRPO job; ``nagle``: its store clients as Paddle makes them."""
    warnings.filterwarnings("ignore")
    import paddle.distributed as dist

    from paddle_r1.config.jobs import GRPOConfig
    from paddle_r1.cpu_math import tune_cpu_math
    from paddle_r1.parallel import rank_watch
    from paddle_r1.quiet import quiet_libraries
    from paddle_r1.trainer.grpo import GRPOTrainer

    if nagle:
        rank_watch.no_delay = lambda fds, port: None
    quiet_libraries("ERROR")
    tune_cpu_math()
    trainer = GRPOTrainer(GRPOConfig(**settings))
    trainer.train()
    steps = [row["step_seconds"] for row in map(json.loads, open(os.path.join(settings["output_dir"],
                                                                            "metrics.jsonl")))]
    with open(os.path.join(report_dir, f"rank{dist.get_rank()}.json"), "w") as f:
        json.dump(steps, f)


def step_seconds(ranks: int, steps: int, nagle: bool, work: str) -> float:
    """Median seconds per step (rank 0's ``step_seconds``) of a tiny GRPO job over ``ranks`` gloo processes."""
    import paddle.distributed as dist

    from paddle_r1.synthetic import make_synthetic_rec
    from paddle_r1.testing.tiny import make_tiny_model

    model = os.path.join(work, "model")
    if not os.path.isdir(model):
        make_tiny_model(model)
    data = make_synthetic_rec(os.path.join(work, "data"), num_samples=8 * ranks, seed=0)
    out = tempfile.mkdtemp(dir=work)
    settings = dict(model_name_or_path=model, data_path=data, output_dir=os.path.join(out, "run"), num_generations=2,
                    per_device_train_batch_size=2, max_completion_length=8, max_steps=steps, save_steps=10 ** 6,
                    use_visualdl=False, disable_tqdm=True, logging_steps=1, device="cpu", dtype="float32")
    dist.spawn(run_rank, args=(settings, nagle, out), nprocs=ranks, backend="gloo")
    return statistics.median(json.load(open(os.path.join(out, "rank0.json"))))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=50, help="requests timed per kind and side")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    requests = {side: [] for side in SIDES}
    steps = {side: [] for side in SIDES}
    with tempfile.TemporaryDirectory() as work:
        for _ in range(args.rounds):
            for side, seconds in request_seconds(args.calls).items():
                requests[side].append(seconds)
            for side in SIDES:
                steps[side].append(step_seconds(args.ranks, args.steps, side == SIDES[0], work))
    print(f"\none request to the job's store, median of {args.rounds} rounds x {args.calls} calls\n")
    print("| client | add (ms) | get (ms) |\n|---|---|---|")
    for side in SIDES:
        add, get = (statistics.median(r[i] for r in requests[side]) * 1e3 for i in (0, 1))
        print(f"| {side} | {add:.3f} | {get:.3f} |")
    print(f"\na GRPO step of the tiny model over {args.ranks} gloo ranks (2 completions of 8 tokens per rank), "
          f"median over {args.steps} steps and {args.rounds} rounds\n")
    print("| check-ins through | seconds per step | ratio |\n|---|---|---|")
    base = statistics.median(steps[SIDES[0]])
    for side in SIDES:
        seconds = statistics.median(steps[side])
        print(f"| {side} | {seconds:.3f} | {base / seconds:.2f}x |")


if __name__ == "__main__":
    main()
