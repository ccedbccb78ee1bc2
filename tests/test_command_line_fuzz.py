"""What the user typed is what runs: every ``GRPOConfig`` key given on ``paddle-r1 train``'s command line, in every
form argparse users know (``--key value``, ``--key=value``, ``--key-name`` spelled with dashes, a bare ``--flag`` for
true), reads as the same key written in a yaml file. Values are drawn with dashes, slashes, dots, ``=``, spaces and
any unicode; the command line goes through the CLI's own argparse parser, as ``paddle-r1 train`` runs it.

argparse reads a space-separated value that starts with ``-`` as an option (``-h`` is its help), so such values are
given as ``--key=value`` here, as they must be with argparse itself.
"""
import math
import typing

import pytest
import yaml

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is in the test extra: pip install -e .[test]")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from paddle_r1.algorithms import names as algorithms  # noqa: E402
from paddle_r1.cli import build_parser  # noqa: E402
from paddle_r1.config.jobs import GRPOConfig  # noqa: E402
from paddle_r1.config.keys import LR_SCHEDULERS, ROLLOUT_ENGINES, SHARDING_STAGES, declared  # noqa: E402
from paddle_r1.config.reading.command_line import YAML_NULLS  # noqa: E402
from paddle_r1.config.reading.files import EXPONENT_FLOAT  # noqa: E402
from paddle_r1.config.reading.loading import load_config  # noqa: E402

# the string keys whose value is one of a few words (every other string key takes any text); dataset_name is also
# PaddleMIX's (any other name is read as data_path, see SOURCE_KEYS), attn_implementation TRL's (flash_attention_2)
CHOICES = {"dataset_name": ("synthetic_rec",), "attn_implementation": ("eager", "sdpa"),
           "dtype": ("float32", "bfloat16", "float16"), "lr_scheduler_type": LR_SCHEDULERS,
           "sharding": SHARDING_STAGES, "rollout_engine": ROLLOUT_ENGINES,
           # the loss types and the aggregation with no rules tying them to other keys (cispo needs epsilon_high;
           # normalize_then_sum refuses other estimators and the KL in the reward)
           "loss_type": ("grpo", "bnpo", "dr_grpo", "dapo"), "multi_objective_aggregation": ("sum_then_normalize",),
           "scale_rewards": algorithms.SCALE_REWARDS, "ref_model_update": ("", "none", "sync", "ema"),
           "adv_estimator": algorithms.ADV_ESTIMATORS, "kl_estimator": algorithms.KL_ESTIMATORS,
           "importance_sampling_level": algorithms.IMPORTANCE_SAMPLING_LEVELS,
           # signal names: a process can catch only some (the key refuses SIGKILL and names it does not know)
           "stop_signals": (["SIGTERM"], ["SIGTERM", "SIGUSR1"], ["SIGUSR2"]),
           "importance_sampling_mode": algorithms.SAMPLER_MODES}
TYPES = typing.get_type_hints(GRPOConfig)

# characters users' paths, ids and prompts hold, and any other but surrogates (no file or argv holds them), NUL (no
# argv holds it) and the line breaks PyYAML writes as they are inside quotes and reads back as spaces (NEL, U+2028,
# U+2029: a limit of the yaml writer this test uses, not of the command line)
CHARACTERS = st.one_of(st.sampled_from(list("-/._=:~ @+,[]{}'\"#%*&\\\n\té中🙂")),
                       st.characters(exclude_categories=("Cs",), exclude_characters="\x00\x85\u2028\u2029"))
TEXT = st.text(CHARACTERS, max_size=24)


def _optional(annotation) -> bool:
    return type(None) in typing.get_args(annotation)


def _inner(annotation):
    return next(a for a in typing.get_args(annotation) if a is not type(None)) if _optional(annotation) else annotation


def _number(key: str, kind):
    """Values ``key``'s declared bounds admit; an integer is fine for a float key too."""
    bounds = declared(GRPOConfig, "bounds")[key]
    low = bounds.low if math.isfinite(bounds.low) else -1e6
    high = bounds.high if math.isfinite(bounds.high) else low + 1e6
    whole = st.integers(math.ceil(low), math.floor(high)).filter(bounds.admits)
    return whole if kind is int else st.one_of(st.floats(low, high).filter(bounds.admits), whole)


def _not_null(text: str) -> bool:
    return text not in YAML_NULLS


SOME_TEXT = TEXT.filter(_not_null)  # a value of a key that may be null: the null words unset it (--data_path null)


def _value_strategy(key: str, annotation):
    """The values of one key, or None for the keys ``configs`` draws from others (rules between keys)."""
    inner = _inner(annotation)
    if key in CHOICES:
        value = st.sampled_from(CHOICES[key])
    elif inner is bool:
        value = st.booleans()
    elif inner in (int, float):
        value = _number(key, inner)
    elif inner is str:
        value = SOME_TEXT if _optional(annotation) else TEXT
    elif typing.get_origin(inner) is list and typing.get_args(inner)[0] is str:
        value = st.lists(TEXT, min_size=1, max_size=3)
    else:  # reward_weights, reward_kwargs
        return None
    return st.one_of(st.none(), value) if _optional(annotation) else value


# built once: hypothesis describes a strategy by its source, which is slow to do on every draw
VALUES = {key: _value_strategy(key, annotation) for key, annotation in TYPES.items()}
WEIGHT = _number("reward_weights", float)
REWARD_SETTINGS = st.dictionaries(st.from_regex(r"[a-z_]{1,8}", fullmatch=True),
                                  st.one_of(st.integers(-10, 10), st.floats(-1, 1), TEXT), max_size=2)


@st.composite
def configs(draw) -> dict:
    """Every key of GRPOConfig, drawn so that the rules between keys hold."""
    values = {key: draw(strategy) for key, strategy in VALUES.items() if strategy is not None}
    values["num_generations"] = group = draw(st.integers(2, 16))
    # completions per device: any count (the generation batch holds whole groups, a rule that needs the ranks)
    values["per_device_train_batch_size"] = per_device = draw(st.none() | st.integers(1, 4 * group))
    # TRL's generation batch, one spelling at most; in completions, whole groups and whole micro-batches of a device
    values["steps_per_generation"] = values["generation_batch_size"] = None
    spelling = draw(st.sampled_from(("unset", "steps_per_generation", "generation_batch_size")))
    if spelling == "steps_per_generation":
        values["steps_per_generation"] = draw(st.integers(1, 16))
    elif spelling == "generation_batch_size":
        per_device = per_device or group
        values["generation_batch_size"] = per_device * group // math.gcd(per_device, group) * draw(st.integers(1, 4))
    values["overlong_buffer"] = draw(st.integers(0, values["max_completion_length"] - 1))
    funcs = values["reward_funcs"]
    values["reward_weights"] = draw(st.none() | st.lists(WEIGHT, min_size=len(funcs), max_size=len(funcs)))
    values["reward_kwargs"] = draw(st.dictionaries(st.sampled_from(funcs), REWARD_SETTINGS, max_size=2))
    if values["eval_steps"] and values["eval_data_path"] is None:
        values["eval_data_path"] = draw(SOME_TEXT)
    # EasyR1's filtering band goes with dynamic sampling, low below high, keyed by the reward or one of reward_funcs
    values["filter_low"] = values["filter_high"] = None
    if values["dynamic_sampling"] and draw(st.booleans()):
        low, high = sorted(draw(st.lists(st.floats(-10, 10), min_size=2, max_size=2, unique=True)))
        values["filter_low"], values["filter_high"] = draw(st.sampled_from([(low, high), (low, None), (None, high)]))
    values["filter_key"] = draw(st.sampled_from(["overall", *funcs]))
    # tools run in multi-turn rollouts only, which need tools
    values["max_turns"] = draw(st.integers(2, 8)) if values["tools"] else 1
    # TRL's report_to: trackers, or none alone
    values["report_to"] = draw(st.just(["none"]) | st.lists(st.sampled_from(("visualdl", "swanlab", "wandb")),
                                                             min_size=1, max_size=3, unique=True))
    if values["sync_ref_model"]:
        values["ref_model_update"] = draw(st.sampled_from(("", "sync")))
    # the sampler correction's truncation needs a bound, its lower bound at most its upper one
    low, high = values["importance_sampling_clip_min"], values["importance_sampling_clip_max"]
    if low is not None and high is not None:
        values["importance_sampling_clip_min"], values["importance_sampling_clip_max"] = sorted((low, high))
    elif low is None and high is None:
        values["importance_sampling_clip_max"] = 3.0
    # T-GRPO compares whole groups on a device, and draws no further groups
    if values["temporal_grpo"] and ((per_device or group) % group or values["dynamic_sampling"]):
        values["temporal_grpo"] = False
    # the video sampling's minimums at most their maximums
    for low, high in (("video_min_frames", "video_max_frames"), ("video_min_pixels", "video_max_pixels")):
        values[low], values[high] = sorted((values[low], values[high]))
    return values


class _Dumper(yaml.SafeDumper):
    """Quotes the strings paddle_r1's config reader takes for floats (``1e5``: a string in YAML 1.1), as a user
    writing the string would."""


_Dumper.add_implicit_resolver("tag:yaml.org,2002:float", EXPONENT_FLOAT, list("-+0123456789."))


def _yaml_text(value, **style) -> str:
    return yaml.dump(value, Dumper=_Dumper, allow_unicode=True, width=math.inf, **style)


def _flow(value) -> str:
    return _yaml_text(value, default_flow_style=True).strip()


def _item_text(value) -> str:
    """One value as typed on a command line: a string as it is, anything else as yaml."""
    if isinstance(value, str):
        return value
    if value is None:
        return "null"
    if isinstance(value, float):
        return repr(value)
    return _flow(value)


def _spaced(text: str) -> bool:
    """Whether a value can follow its key as the next argument (argparse takes one starting with - as an option)."""
    return not text.startswith("-")


@st.composite
def command_lines(draw, values: dict) -> list[str]:
    """``values`` as command-line arguments, each key in a form drawn for it."""
    args = []
    for key, value in values.items():
        flag = "--" + (key.replace("_", "-") if draw(st.booleans()) else key)
        items = value if isinstance(value, list) and not (key == "reward_weights" and draw(st.booleans())) else None
        if value is True and draw(st.booleans()):
            args.append(flag)  # a bare flag is true
        elif items is not None and len(items) > 1 and all(_spaced(_item_text(v)) for v in items):
            args += [flag, *map(_item_text, items)]  # --reward_funcs a b c
        else:
            text = _flow(value) if isinstance(value, list) and len(value) != 1 else \
                _item_text(value[0] if isinstance(value, list) else value)
            if isinstance(value, list) and len(value) == 1 and (text in YAML_NULLS or (
                    text.strip().startswith("[") and text.strip().endswith("]"))):
                text = _flow(value)  # "[qk]" alone would read as a yaml list, "null" as none: give the list itself
            if _spaced(text) and draw(st.booleans()):
                args += [flag, text]
            else:
                args.append(f"{flag}={text}")
    return args


@pytest.fixture(scope="module")
def config_file(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz") / "config.yaml"


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(data=st.data())
def test_every_key_reads_from_the_command_line_as_from_yaml(config_file, data):
    values = data.draw(configs())
    args = data.draw(command_lines(values))
    config_file.write_text(_yaml_text(values, sort_keys=False), encoding="utf-8")
    from_file = load_config(GRPOConfig, str(config_file))
    namespace, extra = build_parser().parse_known_args(["train", *args])
    assert namespace.config is None and extra == args  # argparse passed every argument through, in order
    from_command_line = load_config(GRPOConfig, None, extra)
    assert from_command_line == from_file == GRPOConfig(**values)


@pytest.mark.parametrize("arg, key, value", [
    ("--output_dir=/runs/my-run-1", "output_dir", "/runs/my-run-1"),
    ("--output-dir=/runs/my-run-1", "output_dir", "/runs/my-run-1"),
    ("--model_name_or_path=Qwen/Qwen2.5-VL-3B-Instruct", "model_name_or_path", "Qwen/Qwen2.5-VL-3B-Instruct"),
    ("--learning_rate=1e-6", "learning_rate", 1e-6),
    ("--lora_target_modules=[qk]_proj", "lora_target_modules", ["[qk]_proj"]),
])
def test_key_equals_value_keeps_the_value(arg, key, value):
    """``--key=value`` used to turn the dashes of the value into underscores: /runs/my_run_1, Qwen2.5_VL_3B,
    and '1e_6' refused as a number."""
    assert getattr(load_config(GRPOConfig, None, [arg]), key) == value
