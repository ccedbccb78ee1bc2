"""Model folders written by a 1-step ``paddle-r1 train`` run (and ``paddle-r1 export`` of its checkpoint), the same
ones on every machine: a tiny seeded source of each family, a seeded synthetic REC set, one GRPO step, a save.
tests/test_checkpoint_goldens.py builds them and compares them with what transformers saw loading the same folders
(tests/fixtures/make_checkpoint_reference.py, which reads the folders this file writes when run as a script, in the
Paddle environment):

    PYTHONPATH=. python tests/checkpoint_builds.py /tmp/paddle_r1_checkpoints

``BUILDS`` covers the ways a model folder is written: plain weights (Qwen2-VL, Qwen3-VL), LoRA merged into a tied
model (Qwen2.5-VL), PaddleOCR-VL with the image processor's pixel limits overridden by the run, weights a step with
non-zero advantages changed (``TRAINED``), stage-1 sharding on 2 gloo ranks, and exports: bfloat16 weights, and
weights split over several files by a small ``--max_shard_size``. ``VLLM_BUILDS`` are the checkpoints
tests/test_vllm_golden.py serves and compares with vLLM's greedy tokens (tests/fixtures/make_vllm_reference.py);
``--vllm`` writes them:

    PYTHONPATH=. python tests/checkpoint_builds.py /tmp/paddle_r1_vllm_checkpoints --vllm
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from typing import Optional

# a reward a random tiny model's completions differ in (shorter is better): the step's advantages are not zero and
# the weights move, where format and IoU give every completion 0
TRAINED = {"reward_funcs": ["reward_helpers:short_reward"]}


@dataclasses.dataclass(frozen=True)
class Build:
    """One model folder: the run's family and settings, the (width, height) of the prompt's image, and how the folder
    is made from the run's checkpoint-1 (``export``: ``export_checkpoint``'s arguments; None: the checkpoint itself).
    ``ranks``: processes of the run (2: gloo, as ``paddle.distributed.spawn`` starts them). A name with ``tied`` in it
    trains the family's tiny model without lm_head.weight."""

    family: str
    image: tuple[int, int]
    settings: dict = dataclasses.field(default_factory=dict)
    export: Optional[dict] = None
    ranks: int = 1
    size: Optional[dict] = None  # the tiny source's sizes where not the family's tiny ones (TinySize's fields)
    seed: int = 0  # the tiny source's seed

    @property
    def trained(self) -> bool:
        """The step changed the weights (its advantages were not all zero)."""
        return self.settings.get("reward_funcs") == TRAINED["reward_funcs"]


# The Qwen images are already of a size the processor keeps (sides multiples of 28, or 32 for Qwen3-VL): paddle_r1
# takes paddleformers' fast image processor, transformers without torchvision the slow one, and their bicubic
# resizing differs (up to 0.015 here), which is no property of the checkpoint. PaddleOCR-VL's image is larger than the
# run's max_pixels and smaller than its source's: its grid shows which limit the processor read (both sides run its
# one image processor).
BUILDS = {
    "qwen2_vl": Build("qwen2_vl", (112, 84)),
    "qwen2_5_vl_tied_lora": Build("qwen2_5_vl", (112, 84), {"lora": True}),
    "qwen3_vl": Build("qwen3_vl", (128, 64)),
    "paddleocr_vl_pixels": Build("paddleocr_vl", (100, 80), {"min_pixels": 28 * 28, "max_pixels": 56 * 84}),
    "qwen2_vl_trained": Build("qwen2_vl", (112, 84), TRAINED),
    "qwen2_5_vl_tied_lora_bf16": Build("qwen2_5_vl", (112, 84), {"lora": True, **TRAINED},
                                       export={"dtype": "bfloat16"}),
    "qwen3_vl_sharded": Build("qwen3_vl", (128, 64), TRAINED, export={"max_shard_size": "100KB"}),
    "paddleocr_vl_bf16_sharded": Build("paddleocr_vl", (100, 80), TRAINED,
                                       export={"dtype": "bfloat16", "max_shard_size": "150KB"}),
    "qwen2_5_vl_stage1": Build("qwen2_5_vl", (112, 84), {"sharding": "stage1", **TRAINED}, ranks=2),
}
# vLLM's CPU attention takes heads 32, 64, 80, ... wide (vLLM 0.32's CPUAttentionBackend.get_supported_head_sizes)
# and refuses the tiny models' 16: the builds it serves have 2 heads of 32 (and 1 key/value head, grouped as in
# the tiny models). Qwen2.5-VL twice: with tied embeddings a random tiny model's greedy answer repeats the prompt's
# last token ("\n", whose embedding is the output row nearest the hidden state), which shows that vLLM ties lm_head
# but little of the decode; the untied LoRA-merged model's tiny source is seeded 4 (seed 0's answers one token 16
# times), for a varied answer.
VLLM_SIZE = {"num_attention_heads": 2, "num_key_value_heads": 1}
VLLM_BUILDS = {
    "qwen2_vl_head32": dataclasses.replace(BUILDS["qwen2_vl"], size=VLLM_SIZE),
    "qwen2_5_vl_lora_head32": Build("qwen2_5_vl", (112, 84), {"lora": True}, size=VLLM_SIZE, seed=4),
    "qwen2_5_vl_tied_lora_head32": dataclasses.replace(BUILDS["qwen2_5_vl_tied_lora"], size=VLLM_SIZE),
    "qwen3_vl_head32": dataclasses.replace(BUILDS["qwen3_vl"], size=VLLM_SIZE),
    "paddleocr_vl_pixels_head32": dataclasses.replace(BUILDS["paddleocr_vl_pixels"], size=VLLM_SIZE),
}
ALL_BUILDS = {**BUILDS, **VLLM_BUILDS}
PROMPT = "Locate the red square in the image."


def build(name: str, root: str) -> tuple[str, str]:
    """(source folder, model folder) of build ``name`` under ``root/name`` (emptied first)."""
    from paddle_r1.synthetic import make_synthetic_rec
    from paddle_r1.testing.parts import TinySize
    from paddle_r1.testing.tiny import make_tiny_model

    spec = ALL_BUILDS[name]
    folder = os.path.join(root, name)
    shutil.rmtree(folder, ignore_errors=True)
    source = make_tiny_model(os.path.join(folder, "untied" if "tied" in name else "source"), family=spec.family,
                             seed=spec.seed, size=TinySize(**spec.size) if spec.size else None)
    if "tied" in name:
        from model_checks import tied_copy

        tied_copy(source, os.path.join(folder, "source"))
        source = os.path.join(folder, "source")
    data = make_synthetic_rec(os.path.join(folder, "data"), num_samples=2, seed=3)
    settings = dict(model_name_or_path=source, data_path=data, output_dir=os.path.join(folder, "out"),
                    num_generations=2, per_device_train_batch_size=2, max_completion_length=4, max_steps=1,
                    save_steps=1, beta=0.0, learning_rate=1e-3, seed=0, use_visualdl=False, disable_tqdm=True,
                    **spec.settings)
    if spec.ranks == 1:
        train(settings)
    else:
        from forked_ranks import spawn_ranks

        spawn_ranks(train, args=(settings,), nprocs=spec.ranks)
    if spec.export is None:
        return source, model_folder(name, root)
    from paddle_r1.checkpoints.export import export_checkpoint

    return source, export_checkpoint(os.path.join(folder, "out", "checkpoint-1"), model_folder(name, root),
                                     **spec.export)


def model_folder(name: str, root: str) -> str:
    """Where build ``name`` under ``root`` leaves its model folder: the run's checkpoint-1, or its export."""
    return os.path.join(root, name, "out", "checkpoint-1") if ALL_BUILDS[name].export is None else \
        os.path.join(root, name, "export")


def train(settings: dict) -> None:
    """One run of ``settings`` (GRPOConfig keys), on this rank."""
    from paddle_r1.config.jobs import GRPOConfig
    from paddle_r1.trainer.grpo import GRPOTrainer

    GRPOTrainer(GRPOConfig(**settings)).train()


def prompt_image(name: str):
    """The fixed RGB image of build ``name``'s prompt."""
    import numpy as np
    from PIL import Image

    width, height = ALL_BUILDS[name].image
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
    parser.add_argument("names", nargs="*", help="the builds to make (default: all of BUILDS, or of VLLM_BUILDS)")
    parser.add_argument("--vllm", action="store_true", help="the builds vLLM serves (VLLM_BUILDS), not BUILDS")
    args = parser.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # model_checks, reward_helpers
    for build_name in args.names or (VLLM_BUILDS if args.vllm else BUILDS):
        print(build_name, *build(build_name, args.root))
