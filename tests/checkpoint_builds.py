"""Checkpoints written by a 1-step ``paddle-r1 train`` run, the same ones on every machine: a tiny seeded source of each
family, a seeded synthetic REC set, one GRPO step, a save. tests/test_checkpoint_goldens.py builds them and compares
them with what transformers saw loading the same checkpoints (tests/fixtures/make_checkpoint_reference.py, which reads
the folders this file writes when run as a script, in the Paddle environment):

    PYTHONPATH=. python tests/checkpoint_builds.py /tmp/paddle_r1_checkpoints

``BUILDS`` covers the ways a model folder is written: plain weights (Qwen2-VL, Qwen3-VL), LoRA merged into a tied
model (Qwen2.5-VL), and PaddleOCR-VL with the image processor's pixel limits overridden by the run. ``VLLM_BUILDS`` are
the checkpoints tests/test_vllm_golden.py serves and compares with vLLM's greedy tokens
(tests/fixtures/make_vllm_reference.py); ``--vllm`` writes them:

    PYTHONPATH=. python tests/checkpoint_builds.py /tmp/paddle_r1_vllm_checkpoints --vllm
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
# vLLM's CPU attention takes heads 32, 64, 80, ... wide (vLLM 0.32's CPUAttentionBackend.get_supported_head_sizes)
# and refuses the tiny models' 16: the builds it serves have 2 heads of 32 (and 1 key/value head, grouped as in
# the tiny models). Qwen2.5-VL twice: with tied embeddings a random tiny model's greedy answer repeats the prompt's
# last token ("\n", whose embedding is the output row nearest the hidden state), which shows that vLLM ties lm_head
# but little of the decode; the untied LoRA-merged model's tiny source is seeded 4 (seed 0's answers one token 16
# times), for a varied answer.
VLLM_SIZE = {"num_attention_heads": 2, "num_key_value_heads": 1}
MODEL_SEEDS = {"qwen2_5_vl_lora_head32": 4}  # the tiny source's seed where it is not 0
VLLM_BUILDS = {
    "qwen2_vl_head32": BUILDS["qwen2_vl"],
    "qwen2_5_vl_lora_head32": ("qwen2_5_vl", {"lora": True}, (112, 84)),
    "qwen2_5_vl_tied_lora_head32": BUILDS["qwen2_5_vl_tied_lora"],
    "qwen3_vl_head32": BUILDS["qwen3_vl"],
    "paddleocr_vl_pixels_head32": BUILDS["paddleocr_vl_pixels"],
}
PROMPT = "Locate the red square in the image."


def build(name: str, root: str) -> tuple[str, str]:
    """(source folder, checkpoint folder) of build ``name`` under ``root/name`` (emptied first)."""
    from paddle_r1.config.jobs import GRPOConfig
    from paddle_r1.data.loader import load_samples
    from paddle_r1.data.synthetic import make_synthetic_rec
    from paddle_r1.testing.parts import TinySize
    from paddle_r1.testing.tiny import make_tiny_model
    from paddle_r1.trainer.grpo import GRPOTrainer

    family, settings, _ = {**BUILDS, **VLLM_BUILDS}[name]
    size = TinySize(**VLLM_SIZE) if name in VLLM_BUILDS else None
    folder = os.path.join(root, name)
    shutil.rmtree(folder, ignore_errors=True)
    source = make_tiny_model(os.path.join(folder, "untied" if "tied" in name else "source"), family=family,
                             seed=MODEL_SEEDS.get(name, 0), size=size)
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

    width, height = {**BUILDS, **VLLM_BUILDS}[name][2]
    return Image.fromarray((np.random.default_rng(7).random((height, width, 3)) * 255).astype("uint8"))


def chat_request(name: str, model: str, max_tokens: int) -> dict:
    """The greedy OpenAI chat request both servers get for build ``name``: its image (as a PNG data URL) and PROMPT,
    asking for the prompt's and the completion's token ids (``return_token_ids``, vLLM's extension)."""
    import base64
    import io

    png = io.BytesIO()
    prompt_image(name).save(png, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(png.getvalue()).decode()
    return {"model": model, "temperature": 0, "max_tokens": max_tokens, "return_token_ids": True,
            "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                                      {"type": "text", "text": PROMPT}]}]}


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", help="folder to build in (each build in root/<name>, emptied first)")
    parser.add_argument("--vllm", action="store_true", help="the builds vLLM serves (VLLM_BUILDS), not BUILDS")
    args = parser.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # model_checks
    for build_name in VLLM_BUILDS if args.vllm else BUILDS:
        print(build_name, *build(build_name, args.root))
