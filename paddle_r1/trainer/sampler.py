"""Which prompts each step sees: a seeded permutation per epoch, resumable from (epoch, index); and which of a
micro-step's completions each rank holds."""
from __future__ import annotations

import numpy as np


def rank_share(rank: int, per_rank: int, group: int) -> list[tuple[int, range]]:
    """The completions of a micro-step that rank ``rank`` holds, in TRL's ``RepeatSampler`` layout: the global batch
    is the micro-step's prompts each repeated ``group`` times in a row (prompt 0's group, then prompt 1's, ...), cut
    into consecutive slices of ``per_rank`` completions, slice r to rank r. So a group larger than ``per_rank`` lies
    on consecutive ranks, and a rank holding whole groups takes its prompts in order. Returns, per prompt the rank
    holds completions of, (its place in the micro-step's prompt batch, the generation indices in its group)."""
    first, end = rank * per_rank, (rank + 1) * per_rank
    return [(place, range(max(first, place * group) - place * group, min(end, (place + 1) * group) - place * group))
            for place in range(first // group, (end - 1) // group + 1)]


class PromptSampler:
    def __init__(self, num_samples: int, batch_size: int, seed: int):
        self.num_samples, self.batch_size, self.seed = num_samples, batch_size, seed
        self.epoch, self.index = 0, 0

    def _order(self, epoch: int) -> np.ndarray:
        return np.random.default_rng(self.seed + epoch).permutation(self.num_samples)

    def next_batch(self) -> list[int]:
        """The next ``batch_size`` indices; an epoch boundary continues into the next permutation."""
        picked = []
        while len(picked) < self.batch_size:
            if self.index >= self.num_samples:
                self.epoch, self.index = self.epoch + 1, 0
            take = min(self.batch_size - len(picked), self.num_samples - self.index)
            picked.extend(self._order(self.epoch)[self.index:self.index + take].tolist())
            self.index += take
        return picked

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.index = int(state["epoch"]), int(state["index"])

    @property
    def progress(self) -> float:
        """Epochs done, fractional."""
        return self.epoch + self.index / self.num_samples
