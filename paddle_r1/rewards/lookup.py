"""Finding a reward by name: a registered one (the built-in families loaded on first use) or a user's own
``"module.path:function"``, looked for where users keep it (``paddle_r1.user_code``)."""
from __future__ import annotations

from ..user_code import load_user_function
from .registry import REWARDS, RewardFn


def load_builtin_rewards() -> dict[str, RewardFn]:
    """Every registered reward by name, the built-in families (``rewards/families/``) imported first: importing
    ``paddle_r1.rewards`` alone loads none of them (they bring an HTTP client, math-verify's worker, scipy)."""
    from . import families  # noqa: F401  (each family module registers its rewards when imported)

    return REWARDS


def get_reward(name: str, folders: tuple = ()) -> RewardFn:
    """A registered reward (function or class) by name, or a user's own as ``"package.module:function"`` (looked
    for in ``folders`` too: see ``user_code.import_user_module``)."""
    load_builtin_rewards()
    if name in REWARDS:
        return REWARDS[name]
    if ":" in name:
        return load_user_function(name, folders, what="reward")
    parts = name.replace(",", " ").split()
    if len(parts) > 1 and all(part in REWARDS for part in parts):  # --reward_funcs iou,format: one name of two
        raise KeyError(f"unknown reward {name!r}: several rewards are a list, not one name (command line: "
                       f"--reward_funcs {' '.join(parts)}; yaml: reward_funcs: [{', '.join(parts)}])")
    raise KeyError(f"unknown reward {name!r}; known: {', '.join(sorted(REWARDS))}, or 'module.path:function'")
