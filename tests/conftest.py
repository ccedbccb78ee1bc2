import gc
import warnings

import pytest

warnings.filterwarnings("ignore")


@pytest.fixture(scope="session", autouse=True)
def quiet_libraries():
    """The libraries' log levels, and the CPU settings a CPU job makes (before the first matrix product)."""
    from paddle_r1.cpu_math import tune_cpu_math
    from paddle_r1.quiet import quiet_libraries

    quiet_libraries()
    tune_cpu_math()


@pytest.fixture(scope="session", autouse=True)
def imports_out_of_full_collections(quiet_libraries):
    """As paddle-r1's own processes do (``paddle_r1.process_gc``): what the test modules' imports made is frozen, so
    the full collection Paddle's checkpoint loader asks for on every model load walks only what the tests made
    (0.2 s a load otherwise); handed back when the session ends."""
    gc.freeze()
    yield
    gc.unfreeze()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    from paddle_r1.testing.tiny import make_tiny_model

    return make_tiny_model(str(tmp_path_factory.mktemp("tiny") / "qwen2_5_vl"))


@pytest.fixture(scope="session")
def tiny(tiny_model_dir):
    """(policy, processor) loaded once for the read-only tests."""
    from paddle_r1.models.loading import load_model, load_processor

    model = load_model(tiny_model_dir)
    return model, load_processor(tiny_model_dir)


@pytest.fixture(scope="session")
def rec_jsonl(tmp_path_factory):
    from paddle_r1.synthetic import make_synthetic_rec

    return make_synthetic_rec(str(tmp_path_factory.mktemp("rec")), num_samples=12, seed=3)


@pytest.fixture(scope="session")
def rec_samples(rec_jsonl):
    from paddle_r1.data.loader import load_samples

    return load_samples(rec_jsonl)[0]


@pytest.fixture(scope="module")
def family_models(tiny, tmp_path_factory):
    """(model, processor) of each family's tiny checkpoint, made on first use."""
    from paddle_r1.models.loading import load_model, load_processor
    from paddle_r1.testing.tiny import make_tiny_model

    loaded = {"qwen2_5_vl": tiny}

    def get(family):
        if family not in loaded:
            path = make_tiny_model(str(tmp_path_factory.mktemp(family) / family), family=family)
            loaded[family] = load_model(path), load_processor(path)
        return loaded[family]

    return get


@pytest.fixture
def rollout_key_on_and_off(tiny_model_dir, rec_samples, tmp_path, capsys):
    """For a boolean rollout key: {on: (the trainer's SamplingParams, what the trainer printed)} for a tiny GRPO
    run made with the key true and false."""
    from paddle_r1.config.jobs import GRPOConfig
    from paddle_r1.trainer.grpo import GRPOTrainer

    def run(key: str) -> dict:
        said = {}
        for on in (True, False):
            config = GRPOConfig(model_name_or_path=tiny_model_dir, output_dir=str(tmp_path / f"{key}-{on}"),
                                num_generations=2, max_completion_length=4, max_steps=1, beta=0.0,
                                use_visualdl=False, **{key: on})
            said[on] = (GRPOTrainer(config, samples=rec_samples).sampling, capsys.readouterr().out)
        return said
    return run
