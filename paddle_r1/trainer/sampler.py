"""Which prompts each step sees: a seeded permutation per epoch, resumable from (epoch, index); which of a
generation batch's completions each rank holds in each micro-step; and which micro-steps generate (TRL's cycle)."""
from __future__ import annotations

import numpy as np


def rank_share(layout, rank: int, micro_step: int = 0) -> list[tuple[int, range]]:
    """The completions rank ``rank`` holds in micro-step ``micro_step`` of a block (``resume.BatchLayout``), in
    TRL's layout: the block is its prompts each repeated ``group`` times in a row (prompt 0's group, then prompt
    1's, ...), cut into micro-steps of ``ranks x per_device_batch`` completions, each cut into consecutive slices of
    ``per_device_batch``, slice r to rank r. So a group may lie on consecutive ranks, and on consecutive
    micro-steps. Returns the slice in prompt rows of ``layout.part`` completions each (whole groups when the slice
    holds whole groups; a prompt whose completions the slice holds in two parts comes twice): per row, (its
    prompt's place in the block's draw, the generation indices in its group)."""
    first = micro_step * layout.micro_step + rank * layout.per_device_batch
    return [(position // layout.group, range(position % layout.group, position % layout.group + layout.part))
            for position in range(first, first + layout.per_device_batch, layout.part)]


def generation_slot(micro_step: int, steps_per_generation: int, passes: int) -> tuple[bool, int]:
    """TRL's ``_prepare_inputs`` for the run's ``micro_step``-th micro-step (counted from 0 over the whole run):
    whether it makes the next generation batch (one every ``steps_per_generation x passes`` micro-steps, passes being
    num_iterations) and which of that batch's ``steps_per_generation`` micro-batches it trains on."""
    return micro_step % (steps_per_generation * passes) == 0, micro_step % steps_per_generation


class PromptSampler:
    def __init__(self, num_samples: int, batch_size: int, seed: int, shuffle: bool = True):
        """``shuffle`` (config key ``shuffle_dataset``): each epoch a permutation seeded by ``seed`` and the epoch;
        else the samples in their order, every epoch."""
        self.num_samples, self.batch_size, self.seed, self.shuffle = num_samples, batch_size, seed, shuffle
        self.epoch, self.index = 0, 0

    def _order(self, epoch: int) -> np.ndarray:
        if not self.shuffle:
            return np.arange(self.num_samples)
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
