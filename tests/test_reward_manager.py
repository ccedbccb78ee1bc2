"""The RewardManager: settings bound and checked once, per-run reward state, TRL's rule for unscorable
completions, and reward failures that name the reward."""
import numpy as np
import pytest

from paddle_r1.config.jobs import GRPOConfig
from paddle_r1.errors import ConfigError
from paddle_r1.rewards.manager import RewardError, RewardManager, reward_columns

BOX_COLUMNS = dict(solution=[[10, 10, 50, 50]] * 2, image_sizes=[[(100, 100)]] * 2, input_sizes=[[(100, 100)]] * 2,
                   coord_system=["abs_original"] * 2)


@pytest.mark.parametrize("settings, match", [
    ({"gaussian_point": {"alpha": -1}}, r"'reward_kwargs.gaussian_point'.*alpha=-1"),
    ({"gaussian_point": {"alpah": 0.5}}, r"'reward_kwargs.gaussian_point'.*unknown setting.*'alpah'.*takes 'alpha'"),
    ({"math": {"timeout_seconds": 0}}, r"'reward_kwargs.math'.*timeout_seconds"),
    ({"math": {"timeout": 3}}, r"'reward_kwargs.math'.*timeout"),
    ({"llm_judge": {"modle": "x"}}, r"'reward_kwargs.llm_judge'.*modle"),
    ({"reward_helpers:with_setting": {"scale": 0}}, r"'reward_kwargs.reward_helpers:with_setting'.*scale must be"),
])
def test_a_bad_setting_is_a_config_error_not_a_silent_none(settings, match):
    """Before: _call_reward caught every ValueError, so alpha=-1 (or a misspelled key, swallowed by **_) made
    every score None and training went on without that reward."""
    with pytest.raises(ConfigError, match=match):
        RewardManager(list(settings), settings=settings)


def test_valid_settings_are_bound_once():
    manager = RewardManager(["gaussian_point", "reward_helpers:with_setting"],
                            settings={"gaussian_point": {"alpha": 1.0}, "reward_helpers:with_setting": {"scale": 2.0}})
    texts = ["<answer>[10, 10, 50, 70]</answer>", "x" * 100]
    scores = manager.score(texts, BOX_COLUMNS)
    np.testing.assert_allclose(scores.per_function[:, 0], [np.exp(-0.5 * (10 / 40) ** 2), 0.0], rtol=1e-6)
    np.testing.assert_allclose(scores.per_function[:, 1], [2 * (1 - len(texts[0]) / 200), 1.0], rtol=1e-6)


def test_reward_state_is_per_run(tmp_path):
    """Before: the math reward's counters were a module singleton shared by training and held-out evaluation,
    so eval timeouts leaked into the next training step's metrics."""
    slow = "<answer>" + "+".join(["x^{%d}" % i for i in range(300)]) + "</answer>"
    training = RewardManager(["math"], settings={"math": {"timeout_seconds": 5}})
    heldout = RewardManager(["math"], settings={"math": {"timeout_seconds": 0.01}})
    heldout.score([slow], {"solution": ["1"]})
    assert training.score(["<answer>4</answer>"], {"solution": ["4"]}).counters == {}
    assert training.functions[0] is not heldout.functions[0]


def test_unscorable_completions_have_reward_nan():
    manager = RewardManager(["reward_helpers:none_for_all", "counting"], weights=[1.0, 2.0])
    scores = manager.score(["<answer>3</answer>", "<answer>2</answer>"], {"solution": [3, None]})
    np.testing.assert_array_equal(np.isnan(scores.per_function), [[True, False], [True, True]])
    assert scores.rewards[0] == 2.0 and np.isnan(scores.rewards[1])


def test_a_non_finite_score_is_counted_as_a_failure_not_taken_for_none():
    manager = RewardManager(["reward_helpers:inf_for_first"])
    scores = manager.score(["a", "b"], {})
    assert scores.per_function[:, 0].tolist() == [0.0, 1.0]
    assert scores.counters == {"rewards/reward_helpers:inf_for_first/non_finite": 1}


def test_an_unusable_solution_scores_none_and_is_named_once_in_the_log(caplog, capsys):
    """A solution the reward cannot use (bad data, not model text) leaves that completion unscored; the others of
    the batch are scored one by one. The problem is named once in the rewards' log, never on the command's stdout."""
    manager = RewardManager(["ocr_ned"])
    columns = {"solution": [["not", "text"], "abc", ["not", "text"]], "problem": ["p1", "p2", "p1"]}
    with caplog.at_level("WARNING", logger="paddle_r1.rewards.manager"):
        scores = manager.score(["abc", "abc", "abc"], columns)
    assert np.isnan(scores.per_function[[0, 2], 0]).all() and scores.per_function[1, 0] == 1.0
    assert scores.counters == {"rewards/ocr_ned/bad_solutions": 2}
    [message] = [r.getMessage() for r in caplog.records]
    assert message.startswith("reward 'ocr_ned' cannot score problem 'p1': ") and "is not text to recognise" in message
    assert capsys.readouterr().out == ""


def test_a_reward_that_raises_is_named_with_its_exception_and_place():
    manager = RewardManager(["reward_helpers:reads_a_missing_column"])
    with pytest.raises(RewardError, match=r"reward 'reward_helpers:reads_a_missing_column' raised KeyError: 'answer' "
                                          r"\(at .*reward_helpers.py:\d+ in ") as info:
        manager.score(["a"], {"solution": ["a"]})
    assert "Traceback" in str(info.value)


def test_columns_are_built_in_one_place():
    samples = [{"problem": "p0", "solution": 1, "extra": "e0"}, {"problem": "p1", "solution": 2}]
    columns = reward_columns(samples, [[(10, 20)], [(30, 40)]], [[(28, 28)], [(56, 28)]], "rel_1000", repeat=2)
    assert columns["problem"] == ["p0", "p0", "p1", "p1"] and columns["extra"] == ["e0", "e0", None, None]
    assert columns["image_sizes"][2] == [(30, 40)] and columns["coord_system"] == ["rel_1000"] * 4


def test_the_trainer_checks_reward_settings_before_loading(tmp_path):
    from paddle_r1.trainer.grpo import GRPOTrainer

    config = GRPOConfig(model_name_or_path=str(tmp_path / "no_model_needed"), output_dir=str(tmp_path),
                        reward_funcs=["gaussian_point"], reward_kwargs={"gaussian_point": {"alpha": -1}})
    with pytest.raises(ConfigError, match="reward_kwargs.gaussian_point"):
        GRPOTrainer(config, samples=[{"images": [], "problem": "p", "solution": [1, 2, 3, 4]}])
