"""Held-out evaluation during GRPO training (config keys ``eval_steps``, ``eval_data_path``, ``eval_sample_num``,
``eval_reward``).

The policy in memory answers a fixed set of held-out samples greedily, with the eval runner's decoding and the
training question template; the score is the mean of ``eval_reward`` over them (``iou_accuracy`` for REC,
``counting`` for counting: the fraction answered correctly), logged as ``eval/score``. A run with tools
(``max_turns`` > 1) answers in episodes with the same tools, as its rollout does, and the reward gets the ``turns``
and ``tool_calls`` columns. Greedy decoding draws no random numbers, so evaluating does not change the training
run.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import paddle

from ..config.jobs import GRPOConfig
from ..data.loader import load_samples
from ..data.video import VideoSampling
from ..rewards.manager import RewardManager, config_folders, reward_columns
from ..generation.generator import Generator
from ..tools.toolbox import toolbox_for
from .runner import EvalOptions, GreedyAnswers, answer_greedily


class HeldoutEval:
    """Built from the config alone (its samples and reward are read and checked before any model loads); the
    trainer hands it its generator (the policy in memory) at each evaluation."""

    def __init__(self, config: GRPOConfig):
        self.config = config
        sampling = f"random:{config.eval_sample_num}" if config.eval_sample_num else "all"
        # the format is detected: the held-out file need not be in the training data's format
        self.samples, report = load_samples(config.eval_data_path, image_root=config.image_root, seed=config.seed,
                                            sampling_strategy=sampling, video=VideoSampling.from_config(config))
        if report.summary():
            print(f"held-out set: {report.summary()}")
        self.rewards = RewardManager([config.eval_reward],
                                     settings={config.eval_reward: config.reward_kwargs.get(config.eval_reward, {})},
                                     folders=config_folders(config))
        self.toolbox = toolbox_for(config.tools, config.max_turns, config_folders(config))
        if config.system_prompt:
            print("note: held-out evaluation prompts have no system prompt (the eval runner's prompts)")

    def due(self, step: int, total_steps: int) -> bool:
        """Before the first step, every ``eval_steps`` steps, and after the last."""
        return step == 0 or step % self.config.eval_steps == 0 or step == total_steps

    @paddle.no_grad()
    def scores(self, generator: Generator, samples: list[dict]) -> np.ndarray:
        """The eval reward of each of ``samples`` answered greedily (NaN where it does not apply, and for a sample
        whose image or clip does not open)."""
        config = self.config
        answers = answer_greedily(generator, samples, config.question_template, EvalOptions.batch_size,
                                  config.max_completion_length, "held-out eval", self.toolbox, config.max_turns,
                                  config.repetition_penalty)  # greedy, with the rollout's penalty (as TRL's eval)
        values = np.full(len(samples), np.nan)
        if answers.kept:
            values[answers.kept] = self.score_answers([samples[i] for i in answers.kept], answers,
                                                      generator.coord_system)
        return values

    def score_answers(self, samples: list[dict], answers: GreedyAnswers, coord_system: str) -> np.ndarray:
        columns = reward_columns(samples, answers.image_sizes, answers.input_sizes, coord_system,
                                 turns=answers.turns, tool_calls=answers.tool_calls)
        return self.rewards.score(answers.texts, columns).per_function[:, 0]

    def evaluate(self, generator: Generator, step: int, echo: Callable[[str], None] = print, rank: int = 0,
                 world_size: int = 1, sum_over_ranks: Callable[[list], list] = lambda values: values) -> dict:
        """``{"eval/score": mean eval reward over the held-out samples it scores}`` for the metrics of ``step``.
        With several ranks each answers its own slice (``samples[rank::world_size]``) and ``sum_over_ranks``
        adds the slices' sums and counts, so no rank waits idle in a collective while rank 0 evaluates alone."""
        values = self.scores(generator, self.samples[rank::world_size])
        values = values[~np.isnan(values)]
        total, count = sum_over_ranks([float(values.sum()), float(values.size)])
        value = total / count if count else float("nan")
        echo(f"step {step}: eval/score={value:.4f} ({len(self.samples)} held-out samples)")
        return {"eval/score": value}


def heldout_for(config) -> "HeldoutEval | None":
    """The held-out evaluation a config asks for (``eval_steps`` > 0), else None."""
    return HeldoutEval(config) if getattr(config, "eval_steps", 0) else None
