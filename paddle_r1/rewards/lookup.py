"""Finding a reward by name: a registered one (the built-in families loaded on first use) or a user's own
``"module.path:function"``, looked for where users keep it."""
from __future__ import annotations

import importlib
import importlib.machinery
import os
import sys

from .registry import REWARDS, RewardFn


def load_builtin_rewards() -> dict[str, RewardFn]:
    """Every registered reward by name, the built-in families (``rewards/families/``) imported first: importing
    ``paddle_r1.rewards`` alone loads none of them (they bring an HTTP client, math-verify's worker, scipy)."""
    from . import families  # noqa: F401  (each family module registers its rewards when imported)

    return REWARDS


def get_reward(name: str, folders: tuple = ()) -> RewardFn:
    """A registered reward (function or class) by name, or a user's own as ``"package.module:function"`` (looked
    for in ``folders`` too: see ``import_user_module``)."""
    load_builtin_rewards()
    if name in REWARDS:
        return REWARDS[name]
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            fn = getattr(import_user_module(module_name, folders), attr)
        except (ImportError, AttributeError) as e:
            raise KeyError(f"reward {name!r}: cannot load {attr!r} from module {module_name!r} ({e})") from e
        if not callable(fn):
            raise KeyError(f"reward {name!r} is not callable")
        return fn
    raise KeyError(f"unknown reward {name!r}; known: {', '.join(sorted(REWARDS))}, or 'module.path:function'")


def import_user_module(module_name: str, folders: tuple = ()):
    """``module_name`` from sys.path, else from the working folder or one of ``folders`` (the config file's,
    ``config_folder``): the console script does not put the working folder on sys.path as ``python -m`` does, and
    users keep their reward file beside their config. A folder is added at the end of sys.path, so it never shadows
    an installed module."""
    top = module_name.partition(".")[0]
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name != top:
            raise  # the module was found, and something it imports is missing
        for folder in [os.getcwd(), *folders]:
            if importlib.machinery.PathFinder.find_spec(top, [folder]) is not None:
                if folder not in sys.path:
                    sys.path.append(folder)
                return importlib.import_module(module_name)
        raise

