"""Resuming with another batch layout: more or fewer ranks, another per-device batch or accumulation.

The data position carries over as it is: the sampler's state is (epoch, index into the epoch's seeded
permutation), counted in prompts, so the next batch starts at the first prompt the saved run had not taken,
whatever the new batch size. Whether the run then continues exactly as an uninterrupted one depends on the batches
over all ranks: each micro-step draws ``ranks x per-device completions / num_generations`` prompts and samples
their completions from (seed, step, micro-step, place in that draw, generation), wherever a group's completions
are, so with the same draw per micro-step and the same accumulation the
steps see the same prompts and completions (only the summation order of the gradients changes); otherwise the
same prompts come grouped into other batches, and the completions and weights go their own way.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

# the keys of a config that set how many prompts a rank takes per micro-step and how many micro-steps make a step
BATCH_KEYS = ("per_device_train_batch_size", "num_generations", "gradient_accumulation_steps")


@dataclass(frozen=True)
class BatchLayout:
    ranks: int
    per_device_batch: int  # per_device_train_batch_size as it applies (GRPO: completions, whole groups or a part)
    group: int  # rows per sample (GRPO: num_generations; SFT: 1)
    accumulation: int  # gradient_accumulation_steps (SFT: 1)

    @classmethod
    def of(cls, config, ranks: int) -> "BatchLayout":
        return cls(ranks, config.completions_per_device, config.group_size,
                   getattr(config, "gradient_accumulation_steps", 1))

    @classmethod
    def saved(cls, config, state: dict) -> "BatchLayout":
        """The layout of the run that wrote the trainer ``state``: its ranks and its batch keys (the rest of
        ``config`` does not change the layout)."""
        saved_keys = {k: state["config"][k] for k in BATCH_KEYS if hasattr(config, k) and k in state["config"]}
        return cls.of(dataclasses.replace(config, **saved_keys), state["world_size"])

    @property
    def micro_batch(self) -> int:
        """Prompts drawn per micro-step over all ranks."""
        return self.ranks * self.per_device_batch // self.group

    @property
    def global_batch(self) -> int:
        """Prompts per optimizer step over all ranks."""
        return self.micro_batch * self.accumulation

    def continues_exactly(self, other: "BatchLayout") -> bool:
        """Whether a run in ``other`` layout draws the same prompts and completions per micro-step as this one."""
        return (self.micro_batch, self.accumulation) == (other.micro_batch, other.accumulation)


def prompts_taken(position: dict, num_samples: int) -> int:
    """Prompts the sampler at ``position`` ({epoch, index}) has taken since the first epoch began."""
    return position["epoch"] * num_samples + position["index"]


def steps_to_finish_epochs(num_train_epochs: float, num_samples: int, prompts_per_step: int, steps_per_batch: int,
                           taken: int = 0) -> int:
    """Optimizer steps that take the prompts of ``num_train_epochs`` left after the first ``taken``,
    ``prompts_per_step`` at a time, each batch used for ``steps_per_batch`` steps."""
    return math.ceil(max(num_train_epochs * num_samples - taken, 0) / prompts_per_step) * steps_per_batch


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
                     change("gradient_accumulation_steps", old.accumulation, new.accumulation)])
        + f"; {change('global batch', old.global_batch, new.global_batch)} prompts per optimizer step",
        f"  data position: the sampler's (epoch, index) counts prompts, so it carries over: the next batch starts at "
        f"epoch {epoch}, index {index} of its {num_samples}-prompt seeded order",
    ]
    if old.continues_exactly(new):
        lines.append(f"  as before, a micro-step draws {new.micro_batch} prompts over all ranks and a step accumulates "
                     f"{new.accumulation}: the same prompts and completions as an uninterrupted run")
    else:
        lines.append("  the same prompts in the same order, grouped into other batches: from here the completions "
                     "(and the weights) will not match an uninterrupted run's")
    if epochs_based:
        lines.append(f"  num_train_epochs: the prompts left take {total_steps - step} more steps (the run and its "
                     f"learning-rate schedule end at step {total_steps})")
    return "\n".join(lines)
