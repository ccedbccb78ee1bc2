import json

import pytest

from paddle_r1.config import ConfigError, GRPOConfig, load_config, parse_overrides


def test_yaml_and_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model_name_or_path: m\nbeta: 0.1\nreward_funcs: [format, iou]\n")
    config = load_config(GRPOConfig, str(path), ["--beta", "0", "--temperature=0.7", "--mask_truncated_completions"])
    assert config.beta == 0 and config.temperature == 0.7 and config.mask_truncated_completions is True
    assert config.reward_funcs == ["format", "iou"] and config.clip_high == config.epsilon


def test_json_config(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"num_generations": 4, "reward_weights": [1, 2], "reward_funcs": ["a", "b"]}))
    assert load_config(GRPOConfig, str(path)).num_generations == 4


def test_unknown_key_names_key_and_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("num_generation: 8\n")
    with pytest.raises(ConfigError, match=r"c.yaml: unknown config key\(s\) 'num_generation'"):
        load_config(GRPOConfig, str(path))
    with pytest.raises(ConfigError, match="unknown config key.*'lr'"):
        load_config(GRPOConfig, None, ["--lr", "1"])


@pytest.mark.parametrize("values, message", [
    ({"num_generations": 1}, "num_generations"),
    ({"loss_type": "ppo"}, "loss_type"),
    ({"reward_weights": [1.0]}, "reward_weights"),
    ({"top_p": 0}, "top_p"),
])
def test_invalid_values(values, message):
    with pytest.raises(ConfigError, match=message):
        GRPOConfig(**values)


def test_missing_file_and_bad_override():
    with pytest.raises(ConfigError, match="config file not found: nope.yaml"):
        load_config(GRPOConfig, "nope.yaml")
    with pytest.raises(ConfigError, match="expected --key value"):
        parse_overrides(["beta"])


def test_a_command_line_typo_is_named_as_such(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("beta: 0.1\n")
    with pytest.raises(ConfigError, match=r"^command line: unknown config key\(s\) 'num_generatoins'"):
        load_config(GRPOConfig, str(path), ["--num_generatoins", "4"])
