"""AdamW with paddleformers' learning-rate schedules, built the same way for GRPO and SFT."""
from __future__ import annotations

import math

import paddle


def build_optimizer(parameters, config, total_steps: int, *, clip: bool):
    """(optimizer, scheduler) from the config keys both jobs share; bfloat16 weights get float32 master weights
    and moments (``multi_precision``). ``clip``: AdamW clips by the global gradient norm itself (otherwise the
    update does, see ``trainer.sharding``)."""
    from paddleformers.trainer.trainer_utils import get_scheduler

    warmup = config.warmup_steps or math.ceil(config.warmup_ratio * total_steps)
    scheduler = get_scheduler(config.lr_scheduler_type, learning_rate=config.learning_rate,
                              num_warmup_steps=warmup, num_training_steps=total_steps)
    optimizer = paddle.optimizer.AdamW(
        learning_rate=scheduler, parameters=parameters, weight_decay=config.weight_decay,
        beta1=config.adam_beta1, beta2=config.adam_beta2, epsilon=config.adam_epsilon,
        grad_clip=paddle.nn.ClipGradByGlobalNorm(config.max_grad_norm) if clip and config.max_grad_norm > 0 else None,
        multi_precision=config.dtype != "float32")
    return optimizer, scheduler
