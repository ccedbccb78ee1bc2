"""``paddle-r1 demo``: the main job on an embedded default, on CPU, in about a minute.

Builds the tiny model and the synthetic REC set, runs a few GRPO steps with the ``format`` and
``iou`` rewards, and says where the metrics, completions and checkpoint are.
"""
from __future__ import annotations

import os

from .config import GRPOConfig
from .models.tiny import make_tiny_model

DEMO_SETTINGS = dict(
    dataset_name="synthetic_rec",
    reward_funcs=["format", "iou"],
    num_generations=4,
    per_device_train_batch_size=2,
    max_completion_length=32,
    max_steps=6,
    learning_rate=1e-3,
    beta=0.04,
    temperature=1.0,
    save_steps=3,
    logging_steps=1,
)


def demo_config(output_dir: str, family: str = "qwen2_5_vl", **overrides) -> GRPOConfig:
    model_dir = os.path.join(output_dir, f"tiny-{family}")
    if not os.path.isfile(os.path.join(model_dir, "config.json")):
        make_tiny_model(model_dir, family=family)
    settings = {**DEMO_SETTINGS, "model_name_or_path": model_dir, "output_dir": output_dir, **overrides}
    return GRPOConfig(**settings)


def run_demo(output_dir: str = "demo_output", family: str = "qwen2_5_vl", **overrides) -> dict:
    from .trainer.grpo import GRPOTrainer

    config = demo_config(output_dir, family, **overrides)
    result = GRPOTrainer(config).train()
    print(f"\nmetrics:     {os.path.join(output_dir, 'metrics.jsonl')} (VisualDL logs in {output_dir}/visualdl)")
    print(f"completions: {os.path.join(output_dir, 'completions.jsonl')}")
    print(f"checkpoint:  {result['checkpoint']}")
    return result
