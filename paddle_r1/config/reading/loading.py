"""``load_config``: a job config from a file and the command line, in one order: read, translate the peers' keys,
check every key is known, build and validate; an error names the file or the command line that set the key."""
from __future__ import annotations

import os
from typing import Optional

from ...errors import ConfigError
from .command_line import parse_overrides
from .files import read_config_file
from .peer_keys import from_easydistill, from_source_keys


def _check_known(cls, values: dict, source: str) -> None:
    unknown = sorted(set(values) - set(cls.__dataclass_fields__))
    if unknown:
        raise ConfigError(f"{source}: unknown config key(s) {', '.join(map(repr, unknown))}")


def config_from_dict(cls, values: dict, sources: dict[str, str]):
    """Build and validate ``cls`` from ``values``; ``sources`` says where each key was set (a file, "command
    line"), and an error is prefixed with the sources of the keys it names (keys left at their defaults have none).
    """
    try:
        return cls(**values)
    except ConfigError as e:
        where = list(dict.fromkeys(sources[key] for key in e.keys if key in sources))
        if not where:
            raise
        raise ConfigError(f"{', '.join(where)}: {e}", e.keys) from None


def load_config(cls, path: Optional[str] = None, overrides: Optional[list[str]] = None):
    """Read ``path`` (yaml or json, optional; EasyDistill job configs are translated), apply command-line
    overrides, translate the peers' keys (``SOURCE_KEYS``), and validate; an error names the file or the command
    line that set the key at fault. The config carries the file's folder (``config_folder``): user rewards
    (``"my_rewards:fn"``) are looked for there too."""
    values = read_config_file(path) if path else {}
    if "job_type" in values:
        values = from_easydistill(values, path, set(cls.__dataclass_fields__))
    command_line = parse_overrides(overrides or [], cls)
    context = {**values, **command_line}
    values = from_source_keys(values, path, context)
    _check_known(cls, values, path)
    command_line = from_source_keys(command_line, "command line", context)
    _check_known(cls, command_line, "command line")  # so that a typo on the command line is not blamed on the file
    sources = {**dict.fromkeys(values, path), **dict.fromkeys(command_line, "command line")}
    config = config_from_dict(cls, {**values, **command_line}, sources)
    if path:
        config.config_folder = os.path.dirname(os.path.abspath(path))
    return config
