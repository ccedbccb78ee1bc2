"""User-style reward functions loaded by tests through get_reward("reward_helpers:...")."""


def short_reward(completions, **columns):
    """Prefers short completions: a signal a random tiny model's samples differ in."""
    return [1.0 - len(text) / 200.0 for text in completions]


def none_for_all(completions, **columns):
    return [None for _ in completions]


def inf_for_first(completions, **columns):
    """A buggy reward: inf for the first completion of the batch, 1.0 for the rest."""
    return [float("inf") if i == 0 else 1.0 for i in range(len(completions))]


def reads_a_missing_column(completions, **columns):
    """A buggy reward: reads a column the data does not have."""
    return [float(columns["answer"][i] == text) for i, text in enumerate(completions)]


def with_setting(completions, scale=1.0, **columns):
    """A user reward with one setting, checked like the built-in ones."""
    if scale <= 0:
        raise ValueError(f"scale must be positive, got {scale}")
    return [scale * (1.0 - len(text) / 200.0) for text in completions]


def short_reward_unless_tied(completions, tied=None, **columns):
    """``short_reward``, except a constant 1.0 for samples marked ``tied`` (a group with no learning signal)."""
    tied = tied or [False] * len(completions)
    return [1.0 if t else 1.0 - len(text) / 200.0 for text, t in zip(completions, tied)]


def inf_if_poisoned(completions, poison=None, **columns):
    """``short_reward``, but inf (a reward's failure) for samples marked ``poison``."""
    poison = poison or [None] * len(completions)
    return [float("inf") if p else 1.0 - len(text) / 200.0 for text, p in zip(completions, poison)]


def slow_on_rank(completions, seconds=0.0, rank=1, **columns):
    """``short_reward`` after ``seconds`` of waiting on rank ``rank`` only (a judge that answers slowly there)."""
    import os
    import time

    if completions and int(os.environ.get("PADDLE_TRAINER_ID", "0")) == rank:
        time.sleep(seconds)
    return short_reward(completions)
