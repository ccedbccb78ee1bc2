"""Every config key shown from its one help string, default and range (the dataclass field's metadata, see
``config.keys.key``): in ``paddle-r1 train/sft/estimate-memory --help``, grouped by concern as TRL's HfArgumentParser
shows them, and in docs/config.md (``python -m paddle_r1.config.help docs/config.md`` writes it; a test fails when it
and config/keys.py differ).

A key group is the dataclass that declares the key first (``ModelKeys``, ``RolloutKeys``, ...); its docstring's first
line is the group's title, the rest its description. The help only shows the keys: the command line is still read by
``config.reading.command_line`` (argparse passes every ``--key value`` it does not know through to it).
"""
from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import sys
import typing

from .jobs import GRPOConfig, SFTConfig
from .keys import declared
from .values import alternatives, split_optional

JOBS = {"train": GRPOConfig, "sft": SFTConfig}
CONFIG_DOC = "docs/config.md"
WRITE_COMMAND = f"python -m paddle_r1.config.help {CONFIG_DOC}"


@dataclasses.dataclass
class KeyGroup:
    title: str
    description: str
    keys: list[dataclasses.Field]


def _declaring_class(cls, name: str) -> type:
    """The most basic class of ``cls`` that declares ``name`` (a job that changes a shared key's default keeps it in
    the shared group)."""
    return next(klass for klass in reversed(cls.__mro__) if name in vars(klass).get("__annotations__", {}))


def key_groups(cls) -> list[KeyGroup]:
    """``cls``'s keys by the group that declares them, in declaration order."""
    groups: dict[type, KeyGroup] = {}
    for field in dataclasses.fields(cls):
        klass = _declaring_class(cls, field.name)
        if klass not in groups:
            title, _, description = inspect.getdoc(klass).partition("\n")
            groups[klass] = KeyGroup(title.strip(), " ".join(description.split()), [])
        groups[klass].keys.append(field)
    return list(groups.values())


def type_name(annotation) -> str:
    """``Optional[list[str]]`` -> ``list[str] | None``, ``Union[bool, str]`` -> ``bool | str``, as a user reads it."""
    inner, optional = split_optional(annotation)
    if len(alternatives(inner)) > 1:
        name = " | ".join(type_name(member) for member in alternatives(inner))
    else:
        name = getattr(inner, "__name__", None) if typing.get_origin(inner) is None else str(inner)
    return f"{name} | None" if optional else name


def default_text(field: dataclasses.Field) -> str:
    """The default as it would be written in a yaml config (json spelling: null, true, ["format", "iou"])."""
    value = field.default_factory() if field.default is dataclasses.MISSING else field.default
    return json.dumps(value, ensure_ascii=False)


def key_text(cls, field: dataclasses.Field) -> str:
    """A key's help, then its default and, for a number, its range: 'sampling temperature (default: 1.0; >= 0)'
    (a word key's help names its choices itself, with what each means)."""
    bounds = declared(cls, "bounds").get(field.name)
    return f"{field.metadata['help']} (default: {default_text(field)}{'' if bounds is None else f'; {bounds}'})"


def add_key_groups(parser: argparse.ArgumentParser, cls) -> argparse.ArgumentParser:
    """Argument groups listing ``cls``'s keys on ``parser``, for its help only."""
    hints = typing.get_type_hints(cls)
    for group in key_groups(cls):
        section = parser.add_argument_group(group.title, group.description or None)
        for field in group.keys:
            section.add_argument(f"--{field.name}", metavar=type_name(hints[field.name]),
                                 help=key_text(cls, field).replace("%", "%%"))
    return parser


class KeysHelpParser(argparse.ArgumentParser):
    """A command's parser whose help also lists a job config's keys by group, while parsing stays its own: the keys
    live on a second parser that only formats them, so every ``--key value`` still reaches ``parse_known_args``'s
    unknown list, as before."""

    def __init__(self, *args, config_class=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.config_class = config_class

    def format_help(self) -> str:
        text = super().format_help()
        if self.config_class is None:
            return text
        keys = argparse.ArgumentParser(usage=argparse.SUPPRESS, add_help=False, formatter_class=self.formatter_class,
                                       description="Config keys: in the yaml/json file, or as --key value.")
        return text + "\n" + add_key_groups(keys, self.config_class).format_help()


def config_reference() -> str:
    """docs/config.md: every key of both jobs, by group, with type, default and help."""
    lines = ["# Config keys", "",
             f"Generated from the keys' declarations in `paddle_r1/config/keys.py` by `{WRITE_COMMAND}`; do not edit "
             "by hand. "
             "`paddle-r1 train --help` and `paddle-r1 sft --help` show the same. Keys go in the yaml/json config "
             "file or on the command line as `--key value`.", ""]
    for command, cls in JOBS.items():
        hints = typing.get_type_hints(cls)
        lines += [f"## `paddle-r1 {command}` ({cls.__name__})", ""]
        for group in key_groups(cls):
            lines += [f"### {group.title}", ""] + ([group.description, ""] if group.description else [])
            lines += ["| key | type | meaning (default; range) |", "|---|---|---|"]
            for field in group.keys:
                cells = (f"`{field.name}`", f"`{type_name(hints[field.name])}`", key_text(cls, field))
                lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
            lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(f"usage: {WRITE_COMMAND}")
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        f.write(config_reference())
    print(sys.argv[1])
