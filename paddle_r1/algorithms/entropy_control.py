"""Adaptive entropy control (Skywork-OR1, arXiv 2505.22312), as TRL 1.16's ``use_adaptive_entropy``."""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class AdaptiveEntropy:
    """The entropy bonus's coefficient c, moved after every optimizer step toward a target entropy H*:

    H = sum H_t m'_t / sum m'_t over the step's completion tokens of every micro-batch and rank (m' the loss's mask
    times the high-entropy mask); c <- min(c + delta, c_max) when H <= H*, else max(c - delta, c_min). The loss of the
    next step subtracts c * (its entropy bonus) only when that H was at or below H* (0 otherwise, and before the first
    step, when H is +inf). Config keys: ``entropy_coef`` (c's start), ``entropy_coef_delta``, ``entropy_coef_min``,
    ``entropy_coef_max``, ``entropy_target``."""

    coef: float
    target: float
    delta: float
    low: float
    high: float
    last_entropy: float = math.inf

    @classmethod
    def of(cls, config) -> "AdaptiveEntropy":
        return cls(config.entropy_coef, config.entropy_target, config.entropy_coef_delta, config.entropy_coef_min,
                   config.entropy_coef_max)

    def applied(self) -> float:
        """The coefficient this step's loss takes."""
        return self.coef if self.last_entropy <= self.target else 0.0

    def update(self, entropy: float) -> None:
        """After an optimizer step whose entropy (over every rank) was ``entropy``."""
        if entropy <= self.target:
            self.coef = min(self.coef + self.delta, self.high)
        else:
            self.coef = max(self.coef - self.delta, self.low)
        self.last_entropy = entropy

    def state(self) -> dict:
        return {"entropy_coef": self.coef, "last_world_entropy": self.last_entropy}

    def load(self, state: dict) -> None:
        self.coef, self.last_entropy = state["entropy_coef"], state["last_world_entropy"]
