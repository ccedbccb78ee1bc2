"""What the checks share: one folder holding the tiny models and synthetic data they build (each made once, on
first use), and the machine's precision and tolerances."""
from __future__ import annotations

import os
import shutil

import numpy as np

from ..models.families import DEFAULT_FAMILY, QWEN3_VL
from .machine import Machine
from .tolerances import Tolerance, tolerance_for

QUESTION = "{Question}"
# Sizes beside the tiny defaults, per family. Qwen3-VL's DeepStack adds vision block i's features to the image
# positions after decoder layer i: with 2 layers the last would enter after the last layer, which no completion reads
TINY_SIZES = {QWEN3_VL.model_type: {"num_hidden_layers": 3}}
PROMPTS = 2  # prompts of different image sizes: a left-padded batch, the masked attention path
CLIP_FRAMES = (4, 6)  # the clips' frame counts (2 and 3 time steps at 2 fps): prompts of two lengths, a padded batch
CLIP_SIZE = 56  # pixels a side: 4 vision tokens a time step on the tiny Qwen-VL towers (14-pixel patches, merged 2x2)


class Workspace:
    def __init__(self, root: str, machine: Machine, nproc: int):
        self.root, self.machine, self.nproc = root, machine, nproc
        self._made: dict = {}

    @property
    def dtype(self) -> str:
        return self.machine.dtype

    @property
    def tolerance(self) -> Tolerance:
        return tolerance_for(self.dtype, bool(self.machine.gpus))

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def fresh(self, name: str) -> str:
        """The path of a run's folder, emptied (a ``--workdir`` may hold an earlier selftest's)."""
        shutil.rmtree(self.path(name), ignore_errors=True)
        return self.path(name)

    def once(self, key, make):
        """``make()``, computed on the first call for ``key`` and kept."""
        if key not in self._made:
            self._made[key] = make()
        return self._made[key]

    def tiny_model(self, family: str = DEFAULT_FAMILY) -> str:
        from ..testing.tiny import TinySize, make_tiny_model

        size = TinySize(**TINY_SIZES.get(family, {}))
        return self.once(("model", family), lambda: make_tiny_model(self.path(f"tiny-{family}"), family, size=size))

    def data(self, media: str = "image") -> str:
        """A synthetic jsonl of 8 prompts: REC rows over images of three sizes (``image``), or Charades-STA rows over
        tiny clips of ``CLIP_FRAMES`` frames, ``CLIP_SIZE`` pixels a side (``video``)."""
        from ..synthetic import make_synthetic_rec
        from ..synthetic.clips import make_synthetic_temporal

        make = {"image": lambda: make_synthetic_rec(self.path("data"), num_samples=8, seed=0),
                # seed 5: each step of the runs (seed 1, 2 prompts) holds a clip of each length, left-padded
                "video": lambda: make_synthetic_temporal(self.path("clips"), num_samples=8, seed=5,
                                                         frame_counts=CLIP_FRAMES, size=CLIP_SIZE)}[media]
        return self.once(("data", media), make)

    def load(self, family: str = DEFAULT_FAMILY, attention=None):
        """(model, processor) of the tiny ``family`` model, in this machine's dtype and attention (or ``attention``)."""
        from ..models.loading import load_model, load_processor

        folder = self.tiny_model(family)
        model = load_model(folder, dtype=self.dtype, attn_implementation=attention or self.machine.precision.attention)
        return model, load_processor(folder)

    def prompts(self, processor, count: int = PROMPTS):
        """The first ``count`` prompts, left-padded to one length (one prompt alone has no padding)."""
        from ..data.loader import load_samples
        from ..generation.generator import build_prompt_batch

        samples = self.once("samples", lambda: load_samples(self.data())[0])
        return build_prompt_batch(samples[:count], processor, QUESTION)[0]

    def rollout(self, model, processor, generations: int = 2, tokens: int = 6, prompts: int = PROMPTS):
        """Sampled completions (temperature 1, seeded draws) of the first ``prompts`` prompts."""
        import paddle

        from ..generation.generator import eos_token_ids
        from ..generation.rollout import SamplingParams, sample_completions

        prompt = self.prompts(processor, prompts)
        uniforms = np.random.default_rng(0).random([prompt.size * generations, tokens]).astype("float32")
        return sample_completions(model, prompt, generations, SamplingParams(tokens, temperature=1.0),
                                  eos_token_ids(processor.tokenizer), processor.tokenizer.pad_token_id,
                                  uniforms=paddle.to_tensor(uniforms))
