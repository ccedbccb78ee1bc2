"""Entry points for the 2-process data-parallel tests (paddle.distributed.spawn needs importable functions)."""
import json
import multiprocessing
import os

import numpy as np

from paddle_r1.process_gc import importing_libraries, running_as_program


def spawned_rank_as_program() -> None:
    """A rank ``paddle.distributed.spawn`` started is a program of its own: it keeps its libraries out of full
    collections as paddle-r1's ranks do (``paddle_r1.process_gc``). The same functions called in the test's own
    process leave its collector alone."""
    if multiprocessing.parent_process() is not None:
        running_as_program()


def train_and_dump(settings: dict, dump_dir: str) -> None:
    """Train, then dump this rank's weights, logged metrics and, under plain data parallel, the gradient
    reducer's counts. ``settings["bucket_bytes"]`` (not a config key) sets the reducer's bucket size;
    ``settings["<key>_of_rank"]``: each rank's own value of config key ``<key>`` (what one node's files make of a
    shared config)."""
    import warnings

    warnings.filterwarnings("ignore")
    spawned_rank_as_program()
    with importing_libraries():
        import paddle.distributed as dist

        from paddle_r1.config.jobs import GRPOConfig
        from paddle_r1.evaluation.heldout import heldout_for
        from paddle_r1.trainer.grpo import GRPOTrainer
        from paddle_r1.parallel.sharding import ReplicatedUpdate

    settings = dict(settings)
    rank = int(os.environ.get("PADDLE_TRAINER_ID", "0"))
    for key in [key for key in settings if key.endswith("_of_rank")]:
        settings[key[:-len("_of_rank")]] = settings.pop(key)[rank]
    ReplicatedUpdate.bucket_bytes = settings.pop("bucket_bytes", ReplicatedUpdate.bucket_bytes)
    config = GRPOConfig(**settings)
    trainer = GRPOTrainer(config, heldout=heldout_for(config))
    history = trainer.train()["history"]
    weights = {k: v.numpy() for k, v in trainer.policy.state_dict().items()}
    rank = dist.get_rank() if dist.is_initialized() else 0
    np.savez(os.path.join(dump_dir, f"rank{rank}.npz"), **weights)
    for name, key in (("rewards", "reward"), ("grad_norms", "grad_norm"), ("eval_scores", "eval/score"),
                      ("skipped", "train/skipped_steps")):
        np.save(os.path.join(dump_dir, f"rank{rank}_{name}.npy"), np.asarray([h.get(key, np.nan) for h in history]))
    with open(os.path.join(dump_dir, f"rank{rank}_completions.json"), "w") as f:
        json.dump(last_generation_batch(trainer), f)
    reducer = getattr(trainer.update, "reducer", None)
    if reducer is not None:
        with open(os.path.join(dump_dir, f"rank{rank}_reducer.json"), "w") as f:
            json.dump({"buckets": len(reducer.buckets), "after_backward": len(reducer.after_backward),
                       "launched_in_backward": reducer.launched_in_backward,
                       "late_gradients": reducer.late_gradients}, f)


def last_generation_batch(trainer) -> list[list[dict]]:
    """This rank's micro-batches of the last generation batch: per completion, its group's key, generation index,
    reward and advantage."""
    batches = []
    for exp in trainer.buffer:
        keys, generations = exp.completion_keys()
        batches.append([{"key": list(key), "generation": g, "reward": float(reward), "advantage": float(advantage)}
                        for key, g, reward, advantage in zip(keys, generations, exp.rewards,
                                                             exp.advantages.numpy())])
    return batches


def train_each_and_dump(jobs: list) -> None:
    """``train_and_dump`` for each (settings, dump_dir) in turn, in one process group (a spawn costs seconds). A
    run refused with a ``ConfigError`` or ``DataError`` leaves its message in ``dump_dir/rank<r>_error.txt``."""
    import paddle.distributed as dist

    from paddle_r1.data.samples import DataError
    from paddle_r1.errors import ConfigError

    for settings, dump_dir in jobs:
        os.makedirs(dump_dir, exist_ok=True)
        try:
            train_and_dump(settings, dump_dir)
        except (ConfigError, DataError) as e:
            rank = dist.get_rank() if dist.is_initialized() else 0
            with open(os.path.join(dump_dir, f"rank{rank}_error.txt"), "w") as f:
                f.write(str(e))


def train_commands(commands: list, codes_dir: str) -> None:
    """``paddle-r1 train`` with each command line in turn, through the console script's own entry point
    (``paddle_r1.cli.main``), in one process group; each rank's exit codes in ``codes_dir/rank<r>_codes.json``."""
    import warnings

    warnings.filterwarnings("ignore")
    import paddle.distributed as dist

    from paddle_r1.cli import main

    codes = [main(["train", *command]) for command in commands]
    rank = dist.get_rank() if dist.is_initialized() else 0
    with open(os.path.join(codes_dir, f"rank{rank}_codes.json"), "w") as f:
        json.dump(codes, f)


def reduce_and_dump(dump_dir: str) -> None:
    """``GradientReducer`` on a small model whose ranks differ the ways that make overlapping unsafe, against
    averaging each finished gradient after the backward. Rank 0 runs the head's log-prob-like part in 3 reentrant
    recompute chunks, rank 1 in one piece; ``shared`` runs inside those chunks but is not declared repeated (so
    its bucket is launched after its first chunk and the later chunks must be caught); ``vision`` is used on
    rank 0 only; ``unused`` never. Two backward passes per step (gradient accumulation), two steps."""
    import warnings

    warnings.filterwarnings("ignore")
    spawned_rank_as_program()
    with importing_libraries():
        import paddle
        import paddle.distributed as dist
        from paddle.distributed.fleet.utils import recompute

        from paddle_r1.parallel.distributed import GradientReducer

    dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()

    def build():
        paddle.seed(0)
        layers = paddle.nn.LayerDict({"embed": paddle.nn.Embedding(11, 8), "vision": paddle.nn.Linear(8, 8),
                                      "body": paddle.nn.Linear(8, 8), "unused": paddle.nn.Linear(8, 8),
                                      "shared": paddle.nn.Linear(8, 8), "head": paddle.nn.Linear(8, 11)})
        return layers

    def loss_of(m, seed: int) -> paddle.Tensor:
        ids = paddle.to_tensor(np.random.default_rng([seed, rank]).integers(0, 11, 12))
        h = m["embed"](ids)
        if rank == 0:
            h = h + m["vision"](h)
        h = recompute(m["body"], h, use_reentrant=True)  # gradient checkpointing

        def chunk(x):
            return paddle.nn.functional.log_softmax(m["head"](paddle.tanh(m["shared"](x))), axis=-1)[:, 0]
        chunks = [h[i:i + 4] for i in range(0, 12, 4)] if rank == 0 else [h]
        return paddle.concat([recompute(chunk, c, use_reentrant=True) if rank == 0 else chunk(c)
                              for c in chunks]).sum()

    model, reference = build(), build()
    reducer = GradientReducer(list(model.named_parameters()), world, repeated=model["head"].parameters(),
                              bucket_bytes=1)  # every parameter its own bucket: launched as early as possible
    report = {"buckets": len(reducer.buckets), "steps": []}
    for step in range(2):
        for m in (model, reference):
            m.clear_gradients(set_to_zero=True)
            loss_of(m, 10 * step).backward()
        with reducer.final_backward():
            loss_of(model, 10 * step + 1).backward()
        reducer.reduce()
        loss_of(reference, 10 * step + 1).backward()
        # the reference: each finished gradient averaged on its own; none where no rank had one
        has_grad = paddle.to_tensor([float(p.grad is not None) for p in reference.parameters()])
        dist.all_reduce(has_grad)
        expected = {}
        for (name, p), present in zip(reference.named_parameters(), has_grad.numpy()):
            grad = p.grad if p.grad is not None else paddle.zeros(p.shape, p.dtype)
            grad = grad.scale(1.0 / world)
            dist.all_reduce(grad)
            expected[name] = grad.numpy() if present else None
        got = {name: None if p.grad is None else p.grad.numpy() for name, p in model.named_parameters()}
        report["steps"].append({
            "launched_in_backward": reducer.launched_in_backward, "late_gradients": reducer.late_gradients,
            "after_backward": sorted(reducer.names[reducer.buckets[b][0]] for b in reducer.after_backward),
            "missing": [n for n in expected if (expected[n] is None) != (got[n] is None)],
            "none": [n for n in expected if expected[n] is None],
            "bitwise_differ": [n for n in expected if expected[n] is not None and got[n] is not None
                               and not np.array_equal(expected[n], got[n])],
            "max_abs_diff": max(float(np.abs(expected[n] - got[n]).max()) for n in expected
                                if expected[n] is not None and got[n] is not None)})
        for (name, a), b in zip(model.named_parameters(), reference.parameters()):  # the same SGD step on both
            if got[name] is not None:
                a.set_value(a.numpy() - 0.1 * got[name])
            b.set_value(a.numpy())
    with open(os.path.join(dump_dir, f"rank{rank}_reducer.json"), "w") as f:
        json.dump(report, f)


def overflow_each(stages: list, dtype: str, out: str) -> None:
    """``selftest.overflow.overflow_steps`` for each sharding stage in turn, in one process group, reports in
    ``out/<stage or replicated>/``."""
    spawned_rank_as_program()
    with importing_libraries():
        from paddle_r1.selftest.overflow import overflow_steps

    for stage in stages:
        overflow_steps(stage, dtype, os.path.join(out, stage or "replicated"))


def dump_environment(names: list, dump_dir: str) -> None:
    """This rank's values of the environment variables ``names`` and Paddle's ``PADDLE_TRAINER_ID``, and whether the
    trainer's modules were imported before this function ran (``forked_ranks``' preloaded server)."""
    import sys

    rank = os.environ["PADDLE_TRAINER_ID"]
    report = {"values": {name: os.environ.get(name) for name in names}, "trainer_id": rank,
              "trainer_preloaded": "paddle_r1.trainer.grpo" in sys.modules}
    with open(os.path.join(dump_dir, f"rank{rank}_environment.json"), "w") as f:
        json.dump(report, f)
