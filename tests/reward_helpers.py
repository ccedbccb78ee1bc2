"""User-style reward functions loaded by tests through get_reward("reward_helpers:...")."""


def short_reward(completions, **columns):
    """Prefers short completions: a signal a random tiny model's samples differ in."""
    return [1.0 - len(text) / 200.0 for text in completions]


def none_for_all(completions, **columns):
    return [None for _ in completions]
