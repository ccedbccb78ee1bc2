"""A run's batch layout (how many prompts a draw takes, how a generation batch is split over ranks and micro-steps),
how many steps a number of epochs takes in it, and resuming with another layout: more or fewer ranks, another
per-device batch, accumulation or generation batch.

The data position carries over as it is: the sampler's state is (epoch, index into the epoch's seeded
permutation), counted in prompts, so the next batch starts at the first prompt the saved run had not taken,
whatever the new batch size. Whether the run then continues exactly as an uninterrupted one depends on the batches
over all ranks: each draw takes ``BatchLayout.block_prompts`` prompts and samples their completions from (seed, the
micro-step the draw begins in, place in that draw, generation), wherever a group's completions are, so with the same
completions per micro-step over all ranks, generation batch and accumulation the steps see the same prompts and
completions (only the summation order of the gradients changes); otherwise the same prompts come grouped into other
batches, and the completions and weights go their own way.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

# the keys of a config that set how many prompts a draw takes, how a generation batch is split and how many
# micro-steps make a step
BATCH_KEYS = ("per_device_train_batch_size", "num_generations", "gradient_accumulation_steps", "steps_per_generation",
              "generation_batch_size")


@dataclass(frozen=True)
class BatchLayout:
    """A generation batch (TRL's): ``ranks x per_device_batch x steps_per_generation`` completions, each prompt's
    ``group`` in a row, cut into micro-steps of ``ranks x per_device_batch`` (rank r the r-th slice of each). It is
    drawn and scored block by block: a block is the fewest consecutive micro-steps whose completions are whole groups
    (one micro-step when ranks x per_device_batch is a multiple of the group)."""

    ranks: int
    per_device_batch: int  # per_device_train_batch_size as it applies (GRPO: completions; SFT: samples)
    group: int  # rows per sample (GRPO: num_generations; SFT: 1)
    accumulation: int  # gradient_accumulation_steps (SFT: 1)
    steps_per_generation: int  # micro-steps one generation batch is split over (SFT: 1)

    @classmethod
    def of(cls, config, ranks: int) -> "BatchLayout":
        return cls(ranks, config.completions_per_device, config.group_size,
                   getattr(config, "gradient_accumulation_steps", 1), config.steps_per_generation_for(ranks))

    @classmethod
    def saved(cls, config, state: dict) -> "BatchLayout":
        """The layout of the run that wrote the trainer ``state``: its ranks and its batch keys (the rest of
        ``config`` does not change the layout)."""
        saved_keys = {k: state["config"][k] for k in BATCH_KEYS if hasattr(config, k) and k in state["config"]}
        return cls.of(dataclasses.replace(config, **saved_keys), state["world_size"])

    @property
    def micro_step(self) -> int:
        """Completions (SFT: samples) of one micro-step over all ranks."""
        return self.ranks * self.per_device_batch

    @property
    def block_steps(self) -> int:
        """Micro-steps of a block: the fewest whose completions over all ranks are whole groups."""
        return self.group // math.gcd(self.micro_step, self.group)

    @property
    def block_prompts(self) -> int:
        """Prompts a draw takes: those of one block."""
        return self.micro_step * self.block_steps // self.group

    @property
    def blocks(self) -> int:
        """Blocks of a generation batch."""
        return self.steps_per_generation // self.block_steps

    @property
    def generation_prompts(self) -> int:
        """Prompts of a generation batch over all ranks."""
        return self.block_prompts * self.blocks

    @property
    def part(self) -> int:
        """Completions of a prompt row a device decodes: whole groups, a part of one, or gcd(batch, group)."""
        return math.gcd(self.per_device_batch, self.group)

    @property
    def global_batch(self):
        """Prompts per optimizer step over all ranks (a fraction when a group spans optimizer steps)."""
        prompts = self.micro_step * self.accumulation / self.group
        return int(prompts) if prompts == int(prompts) else prompts

    def continues_exactly(self, other: "BatchLayout") -> bool:
        """Whether a run in ``other`` layout draws the same prompts and completions per micro-step as this one."""
        def shape(layout):
            return layout.micro_step, layout.group, layout.accumulation, layout.steps_per_generation

        return shape(self) == shape(other)


def prompts_taken(position: dict, num_samples: int) -> int:
    """Prompts the sampler at ``position`` ({epoch, index}) has taken since the first epoch began."""
    return position["epoch"] * num_samples + position["index"]


def steps_to_finish_epochs(num_train_epochs: float, num_samples: int, layout: BatchLayout, passes: int,
                           taken: int = 0) -> int:
    """Optimizer steps that take the prompts of ``num_train_epochs`` left after the first ``taken``: generation
    batches of ``layout.generation_prompts``, each trained on for ``passes`` x steps_per_generation micro-steps,
    ``layout.accumulation`` to a step (the last step completed when a generation batch ends inside one)."""
    generations = math.ceil(max(num_train_epochs * num_samples - taken, 0) / layout.generation_prompts)
    return math.ceil(generations * layout.steps_per_generation * passes / layout.accumulation)


def layout_note(path: str, old: BatchLayout, new: BatchLayout, position: dict, num_samples: int,
                step: int, total_steps: int, epochs_based: bool) -> str:
    """What rank 0 says when a resume changes the batch layout: old and new, where the data goes on, and whether
    the run continues as the uninterrupted one would."""
    def change(name: str, before, after) -> str:
        return f"{name} {before}" if before == after else f"{name} {before} -> {after}"

    epoch, index = divmod(prompts_taken(position, num_samples), num_samples)  # an epoch's end is the next's start
    lines = [
        f"resuming {path} with another batch layout: "
        + ", ".join([change("ranks", old.ranks, new.ranks),
                     change("per_device_train_batch_size", old.per_device_batch, new.per_device_batch),
                     change("gradient_accumulation_steps", old.accumulation, new.accumulation)]
                    + ([change("steps_per_generation", old.steps_per_generation, new.steps_per_generation)]
                       if (old.steps_per_generation, new.steps_per_generation) != (old.accumulation, new.accumulation)
                       else []))
        + f"; {change('global batch', old.global_batch, new.global_batch)} prompts per optimizer step",
        f"  data position: the sampler's (epoch, index) counts prompts, so it carries over: the next batch starts at "
        f"epoch {epoch}, index {index} of its {num_samples}-prompt seeded order",
    ]
    if old.continues_exactly(new):
        lines.append(f"  as before, a draw takes {new.block_prompts} prompts over all ranks and a step accumulates "
                     f"{new.accumulation}: the same prompts and completions as an uninterrupted run")
    else:
        lines.append("  the same prompts in the same order, grouped into other batches: from here the completions "
                     "(and the weights) will not match an uninterrupted run's")
    if epochs_based:
        lines.append(f"  num_train_epochs: the prompts left take {total_steps - step} more steps (the run and its "
                     f"learning-rate schedule end at step {total_steps})")
    return "\n".join(lines)
