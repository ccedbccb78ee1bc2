"""``paddle-r1 demo``: the main job on an embedded default, on CPU, in about a minute.

Builds the tiny model and its family's synthetic task (a training and a held-out split): REC boxes for the Qwen-VL
families, text lines to read for PaddleOCR-VL. Warm-starts the model with a short SFT in the answer format (a random
model's completions never match it, so every reward would be 0), then runs a few GRPO steps with the task's rewards
(REC: ``format`` and ``iou``; OCR: ``ocr_ned``) and a held-out score, and says where the metrics, completions and
checkpoint are.
"""
from __future__ import annotations

import os

from .config.jobs import GRPOConfig, SFTConfig
from .synthetic import make_synthetic_splits
from .models.families import DEFAULT_FAMILY, family_of
from .testing.tiny import make_tiny_model

DEMO_SFT_SETTINGS = dict(
    per_device_train_batch_size=8,
    learning_rate=3e-3,
    warmup_steps=10,
    lr_scheduler_type="constant_with_warmup",
    logging_steps=20,
    use_visualdl=False,
)

DEMO_SETTINGS = dict(
    reward_funcs=["format", "iou"],
    num_generations=4,
    per_device_train_batch_size=8,  # completions: 2 prompts x 4
    max_completion_length=40,
    max_steps=6,
    learning_rate=3e-4,
    beta=0.04,
    temperature=1.0,
    save_steps=3,
    logging_steps=1,
    eval_steps=3,
    eval_reward="iou_accuracy",
)


# PaddleOCR-VL reads text: its demo task is rendered text lines ("OCR:" -> the text, answered as it is)
OCR_DEMO_SETTINGS = dict(reward_funcs=["ocr_ned"], eval_reward="ocr_ned", question_template="{Question}",
                         max_completion_length=12)


def demo_config(output_dir: str, family: str = DEFAULT_FAMILY, **overrides) -> GRPOConfig:
    """The demo's GRPO config (its model: the tiny checkpoint; ``run_demo`` puts the SFT folder there)."""
    model_dir = os.path.join(output_dir, f"tiny-{family}")
    if not os.path.isfile(os.path.join(model_dir, "config.json")):
        make_tiny_model(model_dir, family=family)
    task = family_of(family).demo_task  # rec, or ocr_lines for a family that reads text
    data = make_synthetic_splits(os.path.join(output_dir, f"synthetic_{task}"), task, num_train=64, num_heldout=16)
    settings = {**DEMO_SETTINGS, **(OCR_DEMO_SETTINGS if task == "ocr_lines" else {}), "model_name_or_path": model_dir,
                "output_dir": output_dir, "data_path": data["train"], "eval_data_path": data["heldout"],
                "overwrite_output_dir": True, **overrides}  # the demo run again starts over
    return GRPOConfig(**settings)


def run_demo(output_dir: str = "demo_output", family: str = DEFAULT_FAMILY, sft_steps: int = 100, **overrides) -> dict:
    """``sft_steps`` = 0 skips the warm start; ``overrides`` are GRPO config keys."""
    from .trainer.grpo import GRPOTrainer
    from .evaluation.heldout import heldout_for
    from .trainer.sft import SFTTrainer

    config = demo_config(output_dir, family, **overrides)
    if sft_steps:
        answer = {"answer_template": "{Answer}"} if family_of(family).demo_task == "ocr_lines" else {}  # the text alone
        sft = SFTTrainer(SFTConfig(**DEMO_SFT_SETTINGS, **answer, max_steps=sft_steps,
                                   model_name_or_path=config.model_name_or_path, data_path=config.data_path,
                                   question_template=config.question_template, system_prompt=config.system_prompt,
                                   output_dir=os.path.join(output_dir, "sft"), overwrite_output_dir=True,
                                   seed=config.seed,
                                   disable_tqdm=config.disable_tqdm)).train()
        config.model_name_or_path = sft["checkpoint"]
    result = GRPOTrainer(config, heldout=heldout_for(config)).train()
    print(f"\nmetrics:     {os.path.join(output_dir, 'metrics.jsonl')} (VisualDL logs in {output_dir}/visualdl; "
          f"paddle-r1 plot {output_dir})")
    print(f"completions: {os.path.join(output_dir, 'completions.jsonl')}")
    print(f"checkpoint:  {result['checkpoint']}")
    return result
