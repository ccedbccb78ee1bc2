"""One registered object per algorithm a config key chooses: a loss type (``loss.LOSS_TYPE_RULES``), an advantage
estimator (``advantages.ADVANTAGE_ESTIMATORS``), a KL estimator and an importance-sampling level (``loss.KL_ESTIMATES``,
``loss.LOG_RATIO_LEVELS``). Each carries its name, its one-line help, its implementation (whose docstring has the
formula) and the keys it needs set; the config's choices, help text and rules are read from here (``names.py``), so
adding an algorithm is one ``register`` beside its code, as verl's ``@register_policy_loss``.

The config reads the registries when it is imported, and it must stay quick to import (``paddle-r1 plot --help``
should not wait for Paddle's import, which costs more than the rest): the implementations' modules take ``paddle``
from here, imported at its first use.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import ConfigError


class _PaddleAtFirstUse:
    """The ``paddle`` module, imported when one of its names is first looked up (a tensor operation runs)."""

    def __getattr__(self, name: str):
        import paddle as module

        return getattr(module, name)


paddle = _PaddleAtFirstUse()


@dataclass(frozen=True)
class Need:
    """A key the algorithm cannot run without (it must be set, not None); ``why`` follows the algorithm's name in
    the error, formatted with the config as ``config`` (``{config.epsilon}``)."""

    key: str
    why: str


@dataclass(frozen=True)
class Algorithm:
    """One value of the key: ``help`` is its part of the key's help (docs/config.md), ``implementation`` what the
    trainer calls, ``needs`` the keys it needs set."""

    name: str
    help: str
    implementation: Any
    needs: tuple[Need, ...] = ()


class Registry(Mapping):
    """The algorithms one config key (``key``) chooses between, by name, in the order they were registered (the
    order the key's help lists them)."""

    def __init__(self, key: str):
        self.key = key
        self._algorithms: dict[str, Algorithm] = {}

    def add(self, name: str, implementation, help: str, needs: tuple[Need, ...] = ()) -> Algorithm:
        if name in self._algorithms:
            raise ValueError(f"{self.key} {name!r} is registered twice")
        self._algorithms[name] = algorithm = Algorithm(name, help, implementation, needs)
        return algorithm

    def register(self, name: str, help: str, needs: tuple[Need, ...] = ()) -> Callable:
        """``@registry.register(name, help)`` over a function registers it as ``name``'s implementation."""

        def registered(function):
            self.add(name, function, help, needs)
            return function

        return registered

    def __getitem__(self, name: str) -> Algorithm:
        return self._algorithms[name]

    def implementation(self, name: str):
        """``name``'s implementation; a ValueError for a name nobody registered (a config has been checked against
        the names before: this is a caller's bug)."""
        if name not in self._algorithms:
            raise ValueError(f"unknown {self.key} {name!r}; one of {', '.join(self._algorithms)}")
        return self._algorithms[name].implementation

    def __iter__(self):
        return iter(self._algorithms)

    def __len__(self) -> int:
        return len(self._algorithms)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._algorithms)

    def choices_help(self) -> str:
        """'name: help | name: help (needs key) ...', the part of the key's help that lists its values."""
        return " | ".join(f"{a.name}: {a.help}"
                          + (f" (needs {', '.join(n.key for n in a.needs)} set)" if a.needs else "")
                          for a in self._algorithms.values())

    def check(self, config) -> None:
        """The rules of the algorithm ``config`` chooses: a ConfigError naming both keys for a key it needs unset."""
        chosen = self[getattr(config, self.key)]
        for need in chosen.needs:
            if getattr(config, need.key) is None:
                raise ConfigError(f"config keys {self.key!r} and {need.key!r}: {chosen.name} "
                                  f"{need.why.format(config=config)}", keys=(self.key, need.key))
