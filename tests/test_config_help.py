"""Every config key has one help string (its field's metadata), shown by ``paddle-r1 train/sft/estimate-memory --help``
grouped by concern and written to docs/config.md; showing the keys does not change how the command line is read."""
import dataclasses
import os

import pytest

from paddle_r1.cli import build_parser, main
from paddle_r1.config.jobs import GRPOConfig, SFTConfig
from paddle_r1.config.help import CONFIG_DOC, WRITE_COMMAND, config_reference, key_groups

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("cls", [GRPOConfig, SFTConfig])
def test_every_key_has_one_help_string(cls):
    missing = [f.name for f in dataclasses.fields(cls) if not f.metadata.get("help", "").strip()]
    assert not missing, f"keys without help (give them key(default, 'help') in paddle_r1/config/keys.py): {missing}"


@pytest.mark.parametrize("command, cls", [("train", GRPOConfig), ("sft", SFTConfig), ("estimate-memory", GRPOConfig)])
def test_help_lists_every_key_by_group_with_type_default_and_help(capsys, command, cls):
    with pytest.raises(SystemExit) as stop:
        main([command, "--help"])
    assert stop.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    position = -1
    for group in key_groups(cls):
        assert f"{group.title}:" in text
        for field in group.keys:
            shown = text.find(f"--{field.name} ", text.index(f"{group.title}:"))  # under its group's title
            assert shown > position, f"--{field.name} not listed under {group.title!r}"
            position = shown
            assert " ".join(field.metadata["help"].split()[:4]) in text[shown:]
    assert "--lora_rank int LoRA's rank r (default: 8; >= 1)" in text  # the range declared with the key
    assert "--top_p float nucleus sampling" in text and "(default: 1.0; in (0, 1])" in text or cls is SFTConfig
    batch_help = text.split("--per_device_train_batch_size ")[1].split(" --")[0]
    if cls is SFTConfig:  # SFT's own default and help for a shared key, in the shared group
        assert batch_help.startswith("int samples per device") and batch_help.endswith("(default: 8; >= 1)")
    else:
        assert batch_help.startswith("int | None completions per device")
        assert batch_help.endswith("(default: null; >= 1)")
        assert '--reward_funcs list[str] registry names' in text and '(default: ["format", "iou"])' in text
        for title in ("Model and memory", "Data", "Rewards", "Rollout", "GRPO objective and reference model"):
            assert f"{title}: " in text


def test_the_keys_in_help_leave_parsing_to_the_overrides():
    overrides = ["--learning_rate", "1e-5", "--lora", "--reward_funcs", "iou", "format", "--output-dir=/runs/a-b"]
    for command in ("train", "sft", "estimate-memory"):
        args, extra = build_parser().parse_known_args([command, "--config", "c.yaml"] + overrides)
        assert (args.config, extra) == ("c.yaml", overrides)


def test_the_config_reference_is_generated_from_the_help_strings():
    with open(os.path.join(ROOT, CONFIG_DOC), encoding="utf-8") as f:
        written = f.read()
    assert written == config_reference(), (f"{CONFIG_DOC} differs from the keys' declarations in "
                                           f"paddle_r1/config/keys.py: run `{WRITE_COMMAND}` and commit it")
    for cls in (GRPOConfig, SFTConfig):
        for field in dataclasses.fields(cls):
            assert f"| `{field.name}` |" in written
