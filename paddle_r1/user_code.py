"""A user's own function named ``"package.module:function"`` (rewards, tools): imported from sys.path, else from the
working folder or the config file's folder, where users keep it."""
from __future__ import annotations

import importlib
import importlib.machinery
import os
import sys
from typing import Callable


def load_user_function(spec: str, folders: tuple = (), what: str = "function") -> Callable:
    """The callable ``spec`` = ``"package.module:function"`` names (looked for in ``folders`` too: see
    ``import_user_module``); a ``KeyError`` naming ``what`` and ``spec`` when it cannot be loaded or is not
    callable."""
    module_name, _, attr = spec.partition(":")
    try:
        fn = getattr(import_user_module(module_name, folders), attr)
    except (ImportError, AttributeError) as e:
        raise KeyError(f"{what} {spec!r}: cannot load {attr!r} from module {module_name!r} ({e})") from e
    if not callable(fn):
        raise KeyError(f"{what} {spec!r} is not callable")
    return fn


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
