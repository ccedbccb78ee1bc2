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
