"""Entry point for the 2-process checkpoint-integrity test (paddle.distributed.spawn needs an importable function)."""
import json
import os
import shutil

from dp_worker import spawned_rank_as_program
from paddle_r1.process_gc import importing_libraries


def flip_byte(path: str, offset=None) -> None:
    """Flip the lowest bit of one byte on disk (the middle one by default), as a bad sector or cable would."""
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2 if offset is None else offset)
        byte = f.read(1)[0]
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte ^ 1]))


def save_corrupt_and_resume(settings: dict, dump_dir: str) -> None:
    """A 2-rank stage-1 run saves a checkpoint every step (each rank its optimizer shard and, at odd steps, its
    rollout buffer); rank 0 keeps a copy of the run, then flips a byte in rank 1's shard of the newest checkpoint.
    Both ranks then start a run from ``latest`` and one from the damaged checkpoint by name; each rank dumps the
    checkpoint it chose, the error it was refused with and how many files it hashed to get there."""
    import warnings

    warnings.filterwarnings("ignore")
    spawned_rank_as_program()
    with importing_libraries():
        import paddle.distributed as dist

        from paddle_r1.config.jobs import GRPOConfig
        from paddle_r1.trainer.grpo import GRPOTrainer
        from paddle_r1.checkpoints import manifest
        from paddle_r1.checkpoints.manifest import CheckpointError

    GRPOTrainer(GRPOConfig(**settings)).train()
    rank = dist.get_rank()
    out = settings["output_dir"]
    newest = os.path.join(out, f"checkpoint-{settings['max_steps']}")
    if rank == 0:
        shutil.copytree(out, os.path.join(dump_dir, "saved"))
        flip_byte(os.path.join(newest, "optimizer.shard1.pdopt"))
    dist.barrier()
    hashed = []  # files this rank hashes from now on (the real function runs)
    hash_file = manifest.sha256_of
    manifest.sha256_of = lambda path, *args: hashed.append(path) or hash_file(path, *args)
    chosen = GRPOTrainer(GRPOConfig(**{**settings, "resume_from_checkpoint": "latest"})).resume_path
    try:
        GRPOTrainer(GRPOConfig(**{**settings, "resume_from_checkpoint": newest}))
        refused = None
    except CheckpointError as e:
        refused = str(e)
    with open(os.path.join(dump_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"chosen": chosen, "refused": refused, "hashed": len(hashed)}, f)
