"""Checkpoints written by a 1-step ``paddle-r1 train`` run, the same ones on every machine: a tiny seeded source of each
family, a seeded synthetic REC set, one GRPO step, a save. tests/test_checkpoint_goldens.py builds them and compares
them with what transformers saw loading the same checkpoints (tests/fixtures/make_checkpoint_reference.py, which reads
the folders this file writes when run as a script, in the Paddle environment):

    PYTHONPATH=. python tests/checkpoint_builds.py /tmp/paddle_r1_checkpoints

``BUILDS`` covers the ways a model folder is written: plain weights (Qwen2-VL, Qwen3-VL), LoRA merged into a tied
model (Qwen2.5-VL), and PaddleOCR-VL with the image processor's pixel limits overridden by the run.
"""
from __future__ import annotations

import os
import shutil
import sys

# name -> (family, run settings, (width, height) of the prompt's image); the tied source is the family's tiny model
# without lm_head.weight. The Qwen images are already of a size the processor keeps (sides multiples of 28, or 32 for
# Qwen3-VL): paddle_r1 takes paddleformers' fast image processor, transformers without torchvision the slow one, and
# their bicubic resizing differs (up to 0.015 here), which is no property of the checkpoint. PaddleOCR-VL's image is
# larger than the run's max_pixels and smaller than its source's: its grid shows which limit the processor read
# (both sides run its one image processor).
BUILDS = {
    "qwen2_vl": ("qwen2_vl", {}, (112, 84)),
    "qwen2_5_vl_tied_lora": ("qwen2_5_vl", {"lora": True}, (112, 84)),
    "qwen3_vl": ("qwen3_vl", {}, (128, 64)),
    "paddleocr_vl_pixels": ("paddleocr_vl", {"min_pixels": 28 * 28, "max_pixels": 56 * 84}, (100, 80)),
}
PROMPT = "Locate the red square in the image."


def build(name: str, root: str) -> tuple[str, str]:
    """(source folder, checkpoint folder) of build ``name`` under ``root/name`` (emptied first)."""
    from paddle_r1.config.jobs import GRPOConfig
    from paddle_r1.data.loader import load_samples
    from paddle_r1.data.synthetic import make_synthetic_rec
    from paddle_r1.testing.tiny import make_tiny_model
    from paddle_r1.trainer.grpo import GRPOTrainer

    family, settings, _ = BUILDS[name]
    folder = os.path.join(root, name)
    shutil.rmtree(folder, ignore_errors=True)
    source = make_tiny_model(os.path.join(folder, "untied" if "tied" in name else "source"), family=family)
    if "tied" in name:
        from model_checks import tied_copy

        tied_copy(source, os.path.join(folder, "source"))
        source = os.path.join(folder, "source")
    samples = load_samples(make_synthetic_rec(os.path.join(folder, "data"), num_samples=2, seed=3))[0]
    config = GRPOConfig(model_name_or_path=source, output_dir=os.path.join(folder, "out"), num_generations=2,
                        per_device_train_batch_size=2, max_completion_length=4, max_steps=1, save_steps=1, beta=0.0,
                        learning_rate=1e-3, seed=0, use_visualdl=False, disable_tqdm=True, **settings)
    GRPOTrainer(config, samples=samples).train()
    return source, os.path.join(folder, "out", "checkpoint-1")


def prompt_image(name: str):
    """The fixed RGB image of build ``name``'s prompt."""
    import numpy as np
    from PIL import Image

    width, height = BUILDS[name][2]
    return Image.fromarray((np.random.default_rng(7).random((height, width, 3)) * 255).astype("uint8"))


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # model_checks
    for build_name in BUILDS:
        print(build_name, *build(build_name, sys.argv[1]))
