"""Entry point for the 2-process data-parallel test (paddle.distributed.spawn needs an importable function)."""
import os

import numpy as np


def train_and_dump(settings: dict, dump_dir: str) -> None:
    import warnings

    warnings.filterwarnings("ignore")
    import paddle.distributed as dist

    from paddle_r1.config import GRPOConfig
    from paddle_r1.evaluation.heldout import heldout_for
    from paddle_r1.trainer.grpo import GRPOTrainer

    config = GRPOConfig(**settings)
    trainer = GRPOTrainer(config, heldout=heldout_for(config))
    history = trainer.train()["history"]
    weights = {k: v.numpy() for k, v in trainer.policy.state_dict().items()}
    rank = dist.get_rank() if dist.is_initialized() else 0
    np.savez(os.path.join(dump_dir, f"rank{rank}.npz"), **weights)
    for name, key in (("rewards", "reward"), ("grad_norms", "grad_norm"), ("eval_scores", "eval/score")):
        np.save(os.path.join(dump_dir, f"rank{rank}_{name}.npy"), np.asarray([h.get(key, np.nan) for h in history]))
