import json
import os
import re

import pytest

from paddle_r1.config.jobs import GRPOConfig
from paddle_r1.errors import ConfigError
from paddle_r1.config.reading.loading import load_config
from paddle_r1.config.reading.command_line import parse_overrides

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
    ({"rollout_engine": "vllm"}, "'rollout_engine': 'vllm' is not one of auto, one_token, layers"),
    ({"lr_scheduler_type": "cosin"}, "'lr_scheduler_type': 'cosin' is not one of linear, cosine"),
    # TRL 1.16's loss keys
    ({"loss_type": "cispo"}, "^config keys 'loss_type' and 'epsilon_high': cispo caps the importance weight itself "
                             "at epsilon_high .*unset, it would be epsilon, 0.2"),
    ({"top_entropy_quantile": 1.5}, "'top_entropy_quantile': must be in \\[0, 1\\], got 1.5"),
    ({"delta": 0.0}, "'delta': must be > 0, got 0.0"),
    ({"sapo_temperature_neg": -1}, "'sapo_temperature_neg': must be > 0"),
    ({"multi_objective_aggregation": "mean"}, "'multi_objective_aggregation': 'mean' is not one of"),
    ({"multi_objective_aggregation": "normalize_then_sum", "adv_estimator": "rloo", "overlong_buffer": 4},
     "normalize_then_sum normalises each reward function's scores \\(GDPO\\), which leaves no place for "
     "adv_estimator 'rloo', overlong_buffer 4"),
    ({"multi_objective_aggregation": "normalize_then_sum", "use_kl_loss": False}, "no place for use_kl_loss False"),
    # EasyR1's filtering band
    ({"filter_low": 0.1}, "'filter_low': the filtering band drops groups and draws others, which is dynamic_sampling"),
    ({"dynamic_sampling": True, "filter_low": 0.9, "filter_high": 0.1}, "0.9 is not below 0.1"),
    ({"dynamic_sampling": True, "filter_key": "accuracy"}, "'filter_key': 'accuracy' is neither overall"),
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


# ---- one validation step: rules between keys, errors naming the keys and where they were set ---------------
def test_a_rule_between_keys_names_the_keys_and_where_each_was_set(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("ref_model_update: ema\n")
    with pytest.raises(ConfigError, match=r"command line, .*c.yaml: config keys 'sync_ref_model' and 'ref_model_upd"):
        load_config(GRPOConfig, str(path), ["--sync_ref_model"])
    with pytest.raises(ConfigError, match=r"^config key 'beta': must be >= 0, got -0.1$"):
        GRPOConfig(beta=-0.1)


def test_reward_kwargs_may_set_the_eval_reward_only_when_eval_is_on():
    GRPOConfig(eval_steps=5, eval_data_path="d.jsonl", eval_reward="counting", reward_kwargs={"counting": {}})
    with pytest.raises(ConfigError, match="'counting' not in reward_funcs$"):
        GRPOConfig(eval_reward="counting", reward_kwargs={"counting": {}})


@pytest.mark.parametrize("beta, lora, uses, loads", [(0.04, False, True, True), (0.04, True, True, False),
                                                     (0.0, False, False, False), (0.0, True, False, False)])
def test_the_reference_is_decided_by_the_config(beta, lora, uses, loads):
    config = GRPOConfig(beta=beta, lora=lora)
    assert (config.uses_reference, config.loads_reference_model) == (uses, loads)


def test_rules_that_need_the_machine(tmp_path):
    GRPOConfig(sharding="stage2").check_machine("gpu:0")
    with pytest.raises(ConfigError, match="'sharding': stage2 .*on CPU use stage1"):
        GRPOConfig(sharding="stage2").check_machine("cpu")
    config = GRPOConfig(eval_steps=5, eval_data_path=str(tmp_path / "heldout.jsonl"))
    with pytest.raises(ConfigError, match=f"'eval_data_path': {tmp_path}/heldout.jsonl not found"):
        config.check_machine("cpu")


# ---- types: every value against its key's declared type, before anything loads --------------------------
@pytest.mark.parametrize("args, message", [
    (["--learning_rate", "abc"], "config key 'learning_rate' expects a number (float), got 'abc'"),
    (["--beta", "abc"], "config key 'beta' expects a number (float), got 'abc'"),
    (["--num_generations", "2.7"], "config key 'num_generations' expects an integer (int), got 2.7"),
    (["--save_steps", "abc"], "config key 'save_steps' expects an integer (int), got 'abc'"),
    (["--max_steps", "1.5"], "config key 'max_steps' expects an integer (int), got 1.5"),
    (["--max_steps", "true"], "config key 'max_steps' expects an integer (int), got True"),
    (["--use_visualdl", "maybe"], "config key 'use_visualdl' expects true or false (bool), got 'maybe'"),
    (["--save_total_limit", "x"], "config key 'save_total_limit' expects an integer (int) or null, got 'x'"),
    (["--reward_weights", "1", "x"], "config key 'reward_weights[1]' expects a number (float), got 'x'"),
    (["--reward_kwargs", "{iou: 3}"], "config key 'reward_kwargs.iou' expects a mapping (dict), got 3"),
])
def test_a_value_of_the_wrong_type_names_key_value_type_and_source(args, message):
    with pytest.raises(ConfigError, match=f"^{re.escape('command line: ' + message)}$"):
        load_config(GRPOConfig, None, args)


def test_file_values_are_type_checked_too(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("learning_rate: abc\n")
    with pytest.raises(ConfigError, match=r"c.yaml: config key 'learning_rate' expects a number \(float\), got 'abc'"):
        load_config(GRPOConfig, str(path))
    path.write_text("num_train_epochs: 3\nmodel_name_or_path: m\n")
    config = load_config(GRPOConfig, str(path), ["--model_name_or_path", "123"])
    assert config.num_train_epochs == 3.0 and isinstance(config.num_train_epochs, float)
    assert config.model_name_or_path == "123"  # a string key takes the command-line text as typed
    with pytest.raises(ConfigError, match=r"expects an integer \(int\), got 1.5"):
        GRPOConfig(max_steps=1.5)  # direct construction is checked as well


# ---- list values: one or many, as TRL's HfArgumentParser takes them ----------------------------------------
@pytest.mark.parametrize("args, funcs, weights", [
    (["--reward_funcs", "format"], ["format"], None),
    (["--reward_funcs", "accuracy", "format", "--reward_weights", "1", "0.5"], ["accuracy", "format"], [1.0, 0.5]),
    (["--reward_funcs", "[accuracy, format]", "--reward_weights=[2, 1]"], ["accuracy", "format"], [2.0, 1.0]),
    (["--reward_funcs", "iou", "--reward_weights", "2", "--mask_truncated_completions"], ["iou"], [2.0]),
    (["--reward_weights", "null"], ["format", "iou"], None),
])
def test_list_keys_take_one_value_or_many(args, funcs, weights):
    config = load_config(GRPOConfig, None, args)
    assert (config.reward_funcs, config.reward_weights) == (funcs, weights)


def test_a_single_name_in_a_file_is_a_one_element_list(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("reward_funcs: format\nlora_target_modules: q_proj\nreward_kwargs: {format: {strict: true}}\n")
    config = load_config(GRPOConfig, str(path))
    assert config.reward_funcs == ["format"] and config.lora_target_modules == ["q_proj"]
    assert config.reward_kwargs == {"format": {"strict": True}}  # a reward's settings hold values of any type


# ---- what needs the machine, checked before any model loads (paddle_r1.trainer.job) -----------------------
SAMPLES = [{"images": [], "problem": "p", "solution": 1}]  # prepare_job returns given samples untouched


def test_a_missing_model_folder_is_named_before_anything_loads(tmp_path, monkeypatch):
    from paddleformers.transformers.configuration_utils import PretrainedConfig

    from paddle_r1.trainer.job import prepare_job

    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    for path in ("./nope_dir", "models/Qwen2.5-VL-3B", str(tmp_path / "missing")):
        with pytest.raises(FileNotFoundError, match=re.escape(f"'model_name_or_path': model folder not found: {path}")):
            prepare_job(GRPOConfig(model_name_or_path=path, device="cpu"), SAMPLES)

    def unreachable(*args, **kwargs):
        raise OSError("Name or service not known")

    monkeypatch.setattr(PretrainedConfig, "get_config_dict", unreachable)
    with pytest.raises(FileNotFoundError, match="model folder not found: Qwen/Qwen2.5-VL-3B-Instruct; as a hub id it "
                                                "could not be fetched .*only local folders load"):
        prepare_job(GRPOConfig(model_name_or_path="Qwen/Qwen2.5-VL-3B-Instruct", device="cpu"), SAMPLES)


def test_an_unwritable_output_dir_is_named_before_anything_loads(tmp_path, tiny_model_dir):
    from paddle_r1.trainer.job import prepare_job

    blocker = tmp_path / "a_file"
    blocker.write_text("")
    for output_dir in (blocker / "out", blocker):  # below a file, and the file itself
        with pytest.raises(ConfigError, match=re.escape(f"config key 'output_dir': cannot write to {output_dir}: "
                                                        f"{blocker} is a file, not a folder")):
            prepare_job(GRPOConfig(model_name_or_path=tiny_model_dir, device="cpu", output_dir=str(output_dir)),
                        SAMPLES)
    if os.geteuid() != 0:  # root writes into read-only folders
        read_only = tmp_path / "read_only"
        read_only.mkdir(mode=0o555)
        with pytest.raises(ConfigError, match="'output_dir': cannot write to .*Permission denied"):
            prepare_job(GRPOConfig(model_name_or_path=tiny_model_dir, device="cpu", output_dir=str(read_only)),
                        SAMPLES)
    out = tmp_path / "new" / "out"
    assert prepare_job(GRPOConfig(model_name_or_path=tiny_model_dir, device="cpu", output_dir=str(out)),
                       SAMPLES) == SAMPLES
    assert os.listdir(out) == []  # created, probe removed


def test_per_device_train_batch_size_counts_completions_as_in_trl():
    """TRL / VLM-R1 / EasyDistill: per_device_train_batch_size counts completions; a device decodes it / the part of
    a group each of its prompt rows gets."""
    assert GRPOConfig(per_device_train_batch_size=16, num_generations=8).prompts_per_device == 2
    assert GRPOConfig(per_device_train_batch_size=6, num_generations=3).prompts_per_device == 2
    assert GRPOConfig(num_generations=4).prompts_per_device == 1  # unset: one prompt's group per device
    # a part of a group: PaddleMIX's 2 completions per device of 8 (the group on 4 consecutive ranks), VLM-R1's 1
    paddlemix, vlm_r1 = GRPOConfig(per_device_train_batch_size=2), GRPOConfig(per_device_train_batch_size=1)
    assert (paddlemix.prompts_per_device, paddlemix.generations_per_device) == (1, 2)
    assert (vlm_r1.prompts_per_device, vlm_r1.generations_per_device) == (1, 1)
    paddlemix.check_ranks(8)
    with pytest.raises(ConfigError, match="a generation batch of ranks x per_device_train_batch_size x "
                                          "steps_per_generation \\(unset: gradient_accumulation_steps\\) = 2 x 2 x 1 = "
                                          "4 completions does not hold whole groups of num_generations 8 \\(TRL "
                                          "refuses it too\\); on 2 rank\\(s\\) of 2, steps_per_generation 2 or a "
                                          "multiple of it does"):
        paddlemix.check_ranks(2)
    # TRL takes any count whose generation batch holds whole groups: 4 completions of groups of 3 on 3 ranks, or
    # over 3 micro-steps; a device then decodes 4 prompt rows of 1 completion each
    odd = GRPOConfig(per_device_train_batch_size=4, num_generations=3)
    assert (odd.prompts_per_device, odd.generations_per_device) == (4, 1)
    odd.check_ranks(3)
    odd.with_values(gradient_accumulation_steps=3).check_ranks(1)
    with pytest.raises(ConfigError, match="1 x 4 x 1 = 4 completions does not hold whole groups of num_generations 3"):
        odd.check_ranks(1)
    from paddle_r1.config.jobs import SFTConfig

    assert SFTConfig(per_device_train_batch_size=4).prompts_per_device == 4  # SFT counts samples


def test_shipped_configs_keep_one_prompt_of_eight_per_device():
    for name in ("grpo_rec.yaml", "grpo_counting.yaml", "grpo_geometry.yaml"):
        config = load_config(GRPOConfig, os.path.join(ROOT, "configs", name))
        assert (config.per_device_train_batch_size, config.num_generations, config.prompts_per_device) == (8, 8, 1)


def test_a_generation_batch_of_parts_of_groups_is_blamed_on_the_command_line():
    with pytest.raises(ConfigError, match="^command line: config keys 'generation_batch_size' and 'num_generations'"):
        load_config(GRPOConfig, None, ["--generation_batch_size", "12", "--num_generations", "8"])


# ---- a key given twice in a file is an error naming both places ---------------------------------------------
@pytest.mark.parametrize("name, text, message", [
    ("c.yaml", "beta: 0.1\nlearning_rate: 1e-6\nbeta: 0.2\n", "key 'beta' is given twice, on line 1 and line 3"),
    ("c.yaml", "reward_kwargs:\n  iou: {a: 1}\n  iou: {a: 2}\n", "key 'iou' is given twice, on line 2 and line 3"),
    ("c.yaml", "reward_kwargs: {iou: {}, iou: {}}\n", "key 'iou' is given twice, on line 1 column 17 and column 26"),
    ("c.json", '{"beta": 0.1,\n "system_prompt": "\\"beta\\": {",\n "beta": 0.2}',
     "key 'beta' is given twice, on line 1 and line 3"),
    # EasyDistill's nested sections: the same key in two sections is fine, twice in one is not
    ("e.json", '{"job_type": "x",\n "models": {"student": "m"},\n "training": {"beta": 1,\n  "student": "s",\n'
               '  "beta": 2}}', "key 'beta' is given twice, on line 3 and line 5"),
])
def test_a_key_given_twice_in_a_file_names_the_key_and_both_lines(tmp_path, name, text, message):
    """yaml and json used to keep the last value silently."""
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"^{re.escape(f'{path}: {message}')}$"):
        load_config(GRPOConfig, str(path))


def test_a_yaml_merge_may_override_what_it_merges(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("base: &base {iou: {a: 1}}\nreward_kwargs:\n  <<: *base\n  iou: {a: 2}\n")
    from paddle_r1.config.reading.files import read_config_file

    assert read_config_file(str(path))["reward_kwargs"] == {"iou": {"a": 2}}


# ---- every numeric key within its range, before anything loads ----------------------------------------------
@pytest.mark.parametrize("text, message", [
    ("learning_rate: .nan", "config key 'learning_rate': must be finite and >= 0, got nan"),
    ("learning_rate: .inf", "config key 'learning_rate': must be finite and >= 0, got inf"),
    ("learning_rate: -1e-6", "config key 'learning_rate': must be >= 0, got -1e-06"),
    ("beta: .nan", "config key 'beta': must be finite and >= 0, got nan"),
    ("epsilon: -0.2", "config key 'epsilon': must be >= 0, got -0.2"),
    ("logging_steps: 0", "config key 'logging_steps': must be >= 1, got 0"),
    ("seed: -1", "config key 'seed': must be in [0, 4294967296), got -1 (the seeds numpy takes)"),
    ("data_seed: -5", "config key 'data_seed': must be in [0, 4294967296), got -5 (the seeds numpy takes)"),
    ("adam_beta2: 1", "config key 'adam_beta2': must be in [0, 1), got 1.0"),
    ("temperature: .nan", "config key 'temperature': must be finite and >= 0, got nan"),
    ("reward_weights: [1, .nan]", "config key 'reward_weights[1]': must be finite, got nan"),
])
def test_a_value_out_of_its_range_names_key_and_file(tmp_path, text, message):
    """These used to be accepted: NaN learning rates trained NaN weights, logging_steps 0 ended in
    ZeroDivisionError and a negative seed in a Paddle traceback."""
    path = tmp_path / "c.yaml"
    path.write_text(f"model_name_or_path: m\n{text}\n")
    with pytest.raises(ConfigError, match=f"^{re.escape(f'{path}: {message}')}$"):
        load_config(GRPOConfig, str(path))


def test_a_value_out_of_range_on_the_command_line_stops_before_anything_loads(tmp_path, capsys):
    from paddle_r1 import cli

    code = cli.main(["train", "--model_name_or_path", str(tmp_path / "no_model"), "--output_dir",
                     str(tmp_path / "out"), "--logging_steps=0"])
    assert code == 2 and capsys.readouterr().err.strip() == \
        "paddle-r1 train: error: command line: config key 'logging_steps': must be >= 1, got 0"
    assert not os.path.exists(tmp_path / "out")
    with pytest.raises(ConfigError, match=r"^command line: --learning_rate needs a value \(only a true/false key"):
        load_config(GRPOConfig, None, ["--learning_rate", "--beta", "0"])


def test_every_numeric_key_has_its_range():
    import typing

    from paddle_r1.config.jobs import SFTConfig
    from paddle_r1.config.keys import declared

    for cls in (GRPOConfig, SFTConfig):
        numeric = {key for key, annotation in typing.get_type_hints(cls).items()
                   if {int, float, list[float]} & {annotation, *typing.get_args(annotation)}}
        assert numeric - set(declared(cls, "bounds")) == set(), cls.__name__


def test_a_key_a_job_declares_again_keeps_its_range():
    """GRPO and SFT each redeclare per_device_train_batch_size and learning_rate (their own defaults and help); the
    range declared with the shared key still holds for both."""
    from paddle_r1.config.jobs import SFTConfig

    for cls in (GRPOConfig, SFTConfig):
        with pytest.raises(ConfigError, match=r"'per_device_train_batch_size': must be >= 1, got 0"):
            cls(per_device_train_batch_size=0)
        with pytest.raises(ConfigError, match=r"'learning_rate': must be finite and >= 0, got nan"):
            cls(learning_rate=float("nan"))


def test_undo_non_finite_updates_takes_true_false_or_auto(tmp_path):
    """Old configs' true and false keep their meaning, in a file and on the command line (a bare flag is true);
    auto is the default; any other word is refused, naming the key and the three values."""
    path = tmp_path / "c.yaml"
    path.write_text("undo_non_finite_updates: false\n")
    assert load_config(GRPOConfig, str(path)).undo_non_finite_updates is False
    assert load_config(GRPOConfig, str(path), ["--undo_non_finite_updates", "true"]).undo_non_finite_updates is True
    assert load_config(GRPOConfig, str(path), ["--undo_non_finite_updates"]).undo_non_finite_updates is True
    assert load_config(GRPOConfig, str(path), ["--undo_non_finite_updates", "auto"]).undo_non_finite_updates == "auto"
    assert GRPOConfig().undo_non_finite_updates == "auto"
    with pytest.raises(ConfigError, match="'undo_non_finite_updates': 'sometimes' is not one of true, false, auto"):
        GRPOConfig(undo_non_finite_updates="sometimes")
    with pytest.raises(ConfigError, match="'undo_non_finite_updates' expects true or false \\(bool\\) or a string"):
        GRPOConfig(undo_non_finite_updates=1)


def test_a_path_cut_by_a_yaml_comment_is_pointed_out(tmp_path, capsys):
    """``data_path: 我的 数据 #1/rows.jsonl``: yaml ends the value at " #", and the load then failed naming "我的 数据"
    alone. The config's reading says which line and why; a comment after a space, or a quoted path, says nothing."""
    config = tmp_path / "c.yaml"
    config.write_text("model_name_or_path: m\ndata_path: 我的 数据 #1/rows.jsonl\noutput_dir: out # where it goes\n"
                      "image_root: 'images #2'\n", encoding="utf-8")
    loaded = load_config(GRPOConfig, str(config))
    assert (loaded.data_path, loaded.output_dir, loaded.image_root) == ("我的 数据", "out", "images #2")
    assert capsys.readouterr().out.splitlines() == [
        f"{config}:2: data_path reads '我的 数据': yaml takes ' #1/rows.jsonl' after it for a comment; quote the value "
        "if that belongs to it"]
