"""Held-out evaluation during GRPO training (config keys ``eval_steps``, ``eval_data_path``, ``eval_sample_num``,
``eval_reward``).

The policy in memory answers a fixed set of held-out samples greedily, with the eval runner's decoding and the
training question template; the score is the mean of ``eval_reward`` over them (``iou_accuracy`` for REC,
``counting`` for counting: the fraction answered correctly), logged as ``eval/score``. Greedy decoding draws no
random numbers, so evaluating does not change the training run.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import paddle

from ..config import GRPOConfig
from ..data.loader import load_samples
from ..rewards.manager import RewardManager, reward_columns
from .runner import EvalOptions, Evaluator


class PolicyEvaluator(Evaluator):
    """The runner's ``Evaluator`` around a model already in memory (its own ``__init__`` loads from a folder)."""

    def __init__(self, model, processor, coord_system: str, options: EvalOptions):
        self.model_path, self.options = "<policy in memory>", options
        self.model, self.processor, self.coord_system = model, processor, coord_system
        tokenizer = processor.tokenizer
        self.eos = sorted({tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|endoftext|>")})


class HeldoutEval:
    def __init__(self, config: GRPOConfig, policy, processor, coord_system: str):
        self.config = config
        sampling = f"random:{config.eval_sample_num}" if config.eval_sample_num else "all"
        # the format is detected: the held-out file need not be in the training data's format
        self.samples, report = load_samples(config.eval_data_path, image_root=config.image_root, seed=config.seed,
                                            sampling_strategy=sampling)
        if report.summary():
            print(f"held-out set: {report.summary()}")
        self.rewards = RewardManager([config.eval_reward],
                                     settings={config.eval_reward: config.reward_kwargs.get(config.eval_reward, {})})
        if config.system_prompt:
            print("note: held-out evaluation prompts have no system prompt (the eval runner's prompts)")
        options = EvalOptions(data_root="", image_root=config.image_root, max_new_tokens=config.max_completion_length,
                              seed=config.seed, dtype=config.dtype)
        self.evaluator = PolicyEvaluator(policy, processor, coord_system, options)

    def due(self, step: int, total_steps: int) -> bool:
        """Before the first step, every ``eval_steps`` steps, and after the last."""
        return step == 0 or step % self.config.eval_steps == 0 or step == total_steps

    @paddle.no_grad()
    def score(self) -> float:
        completions, image_sizes, input_sizes = self.evaluator.answer(self.samples, self.config.question_template,
                                                                      "held-out eval")
        columns = reward_columns(self.samples, image_sizes, input_sizes, self.evaluator.coord_system)
        values = self.rewards.score(completions, columns).per_function[:, 0]
        values = values[~np.isnan(values)]
        return float(values.mean()) if values.size else float("nan")

    def evaluate(self, step: int, echo: Callable[[str], None] = print) -> dict:
        """``{"eval/score": ...}`` for the metrics of ``step``."""
        value = self.score()
        echo(f"step {step}: eval/score={value:.4f} ({len(self.samples)} held-out samples)")
        return {"eval/score": value}
