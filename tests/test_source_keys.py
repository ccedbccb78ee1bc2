"""The peers' commands and configs as their users type them (PaddleMIX r1_mllm, VLM-R1), read with their meaning."""
import json
import os

import pytest
import yaml

from paddle_r1.config.jobs import GRPOConfig
from paddle_r1.errors import ConfigError
from paddle_r1.config.reading.loading import load_config
from test_cli import paddle_r1
from test_trackers import offline_trackers


def paddlemix_rec_args(model, mixture, out, num_generations=8):
    """PaddleMIX's scripts/run_grpo_rec.sh as it calls grpo_rec.py (GPUS=8, PER_DEVICE_BATCH_SIZE=2, BATCH_SIZE=16)."""
    return ["--do_train", "--model_name_or_path", model, "--output_dir", out, "--logging_dir", f"{out}/logs",
            "--dataset_name", mixture, "--image_root", os.path.dirname(mixture), "--max_prompt_length", "1024",
            "--max_completion_length", "256", "--num_generations", str(num_generations), "--overwrite_output_dir",
            "True", "--dataloader_num_workers", "8", "--bf16", "True", "--fp16", "False", "--fp16_opt_level", "O2",
            "--num_train_epochs", "1", "--max_steps", "500", "--per_device_train_batch_size", "2",
            "--gradient_accumulation_steps", "1", "--attn_implementation", "eager", "--freeze_vision", "False",
            "--recompute", "True", "--logging_steps", "1", "--report_to", "visualdl", "--save_strategy", "steps",
            "--save_steps", "100", "--save_total_limit", "1", "--tensor_parallel_degree=1",
            "--sharding_parallel_degree=8", "--pipeline_parallel_degree=1", "--sep_parallel_degree=1", "--sharding",
            "stage2", "--amp_master_grad=1", "--hybrid_parallel_topo_order=sharding_first"]


@pytest.fixture
def mixture(tmp_path, rec_jsonl):
    """PaddleMIX's data_config/rec.yaml shape: datasets with json_path."""
    path = tmp_path / "rec.yaml"
    path.write_text(yaml.safe_dump({"datasets": [{"json_path": rec_jsonl}]}))
    return str(path)


def test_paddlemix_rec_command(tmp_path, mixture, capsys):
    args = paddlemix_rec_args("m", mixture, str(tmp_path / "out"), num_generations=2)
    config = load_config(GRPOConfig, None, args)
    assert (config.data_path, config.dataset_name, config.gradient_checkpointing, config.dtype) == \
        (mixture, None, True, "bfloat16")
    assert (config.attn_implementation, config.use_visualdl, config.sharding, config.freeze_vision) == \
        ("eager", True, "stage2", False)
    assert (config.per_device_train_batch_size, config.prompts_per_device) == (2, 1)
    printed = capsys.readouterr().out.splitlines()
    assert any(line.startswith("command line: max_prompt_length 1024 (TRL / transformers): prompts are not "
                               "truncated") for line in printed)
    assert sum(line.startswith("command line: ") for line in printed) == 16  # one line per translated key
    # with the script's default NUM_GENERATIONS=8, 2 completions per GPU hold a quarter of a group, which lies on 4
    # consecutive ranks (TRL's layout): its 8 GPUs take it; 2 cannot in one micro-step, said plainly before any
    # model loads
    config = load_config(GRPOConfig, None, paddlemix_rec_args("m", mixture, str(tmp_path / "out")))
    assert (config.prompts_per_device, config.generations_per_device) == (1, 2)
    config.check_ranks(8)
    with pytest.raises(ConfigError, match="2 x 2 x 1 = 4 completions does not hold whole groups of num_generations 8 "
                                          ".*on 2 rank\\(s\\) of 2, steps_per_generation 2 or a multiple of it does"):
        config.check_ranks(2)


def test_keys_with_no_meaning_here_refuse_what_would_mislead(tmp_path):
    with pytest.raises(ConfigError, match="tensor_parallel_degree .*degree 2: tensor, pipeline and sequence "
                                          "parallelism are not offered"):
        load_config(GRPOConfig, None, ["--tensor_parallel_degree", "2"])
    with pytest.raises(ConfigError, match="'recompute' .* and 'gradient_checkpointing' disagree"):
        load_config(GRPOConfig, None, ["--recompute", "True", "--gradient_checkpointing", "false"])
    with pytest.raises(ConfigError, match="'image_folders' goes with data_file_paths"):
        load_config(GRPOConfig, None, ["--image_folders", "/images"])
    assert load_config(GRPOConfig, None, ["--attn_implementation", "flash_attention_2"]).attn_implementation == "sdpa"


def test_trls_generation_keys_reach_the_rollout(tmp_path, tiny_model_dir, rec_samples, capsys):
    """TRL's generation_kwargs (JSON on the command line) set the rollout's sampling keys, use_vllm false is what runs
    here; the trainer's rollout samples with them."""
    from paddle_r1.trainer.grpo import GRPOTrainer

    args = ["--model_name_or_path", tiny_model_dir, "--output_dir", str(tmp_path), "--reward_funcs", "iou",
            "--generation_kwargs", '{"min_p": 0.2, "repetition_penalty": 1.3, "do_sample": true}',
            "--use_vllm", "false"]
    config = load_config(GRPOConfig, None, args)
    assert (config.min_p, config.repetition_penalty) == (0.2, 1.3)
    assert "generation_kwargs {'min_p': 0.2, 'repetition_penalty': 1.3, 'do_sample': True} (TRL / transformers): " \
           "read as min_p: 0.2, repetition_penalty: 1.3" in capsys.readouterr().out
    sampling = GRPOTrainer(config, samples=rec_samples).sampling
    assert (sampling.min_p, sampling.repetition_penalty) == (0.2, 1.3)
    for given, message in (
            (["--use_vllm", "true"], "use_vllm .*paddle_r1 rolls out with its own decode step"),
            (["--chat_template_kwargs", '{"enable_thinking": false}'], "chat_template_kwargs .*not offered"),
            (["--generation_kwargs", '{"typical_p": 0.9}'], "'typical_p': not a setting of paddle_r1's rollout"),
            (["--generation_kwargs", '{"do_sample": false}'], "do_sample false: GRPO samples"),
            (["--generation_kwargs", "{min_p: 0.1"], "--generation_kwargs: cannot read"),
            (["--generation_kwargs", "min_p=0.1"], "expected a mapping"),
            (["--generation_kwargs", '{"top_p": 0.5}', "--top_p", "0.9"],
             "'generation_kwargs' .* and 'top_p' disagree"),
            (["--min_p", "1.5"], "config key 'min_p': must be in \\[0, 1\\]"),
            (["--repetition_penalty", "0"], "config key 'repetition_penalty': must be > 0")):
        with pytest.raises(ConfigError, match=message):
            load_config(GRPOConfig, None, given)


def test_vlm_r1_multinode_yaml_and_task_type(tmp_path, rec_jsonl):
    """VLM-R1's run_scripts/multinode_training_args.yaml, with its data and images here."""
    path = tmp_path / "multinode_training_args.yaml"
    path.write_text(f"""output_dir: {tmp_path}/out
model_name_or_path: m
dataset_name: Idefics-ai2d
data_file_paths: {rec_jsonl}:{rec_jsonl}
image_folders: {os.path.dirname(rec_jsonl)}
max_prompt_length: 1024
per_device_train_batch_size: 8
gradient_accumulation_steps: 2
logging_steps: 1
bf16: true
report_to: wandb
gradient_checkpointing: false
deepspeed: /path/to/config/zero3.json
attn_implementation: flash_attention_2
max_pixels: 401408
max_steps: 500
run_name: Qwen2.5-VL-3B-Idefics-V3-RSN-ai2d-500steps-multinode
save_steps: 100
save_total_limit: 3
save_only_model: true
num_generations: 8
""")
    config = load_config(GRPOConfig, str(path), ["--task_type", "rec", "--reward_method", "iou:default"])
    mixture = yaml.safe_load(open(config.data_path))["datasets"]
    assert mixture == [{"json_path": rec_jsonl, "image_root": os.path.dirname(rec_jsonl), "reward_method": "iou"},
                       {"json_path": rec_jsonl, "image_root": os.path.dirname(rec_jsonl), "reward_method": "default"}]
    assert (config.dtype, config.attn_implementation, config.prompts_per_device) == ("bfloat16", "sdpa", 1)
    assert config.question_template.endswith("Output the final answer in JSON format.")
    assert config.report_to == ["wandb"]  # TRL's key, TRL's meaning: tests/test_trackers.py


def test_vlm_r1_gui_command_trains_and_resumes_by_itself(tmp_path, tiny_model_dir, rec_jsonl):
    """VLM-R1's run_scripts/run_grpo_gui.sh (grpo_jsonl.py) on this machine's tiny model and data, shortened with
    max_steps / max_completion_length and without --bf16 --torch_dtype bfloat16 (Paddle's CPU kernels have no
    bfloat16 conv3d; those two are read in test_vlm_r1_multinode_yaml_and_task_type); a reward file in the working
    folder, as `python -m` would find it; and resume_from_checkpoint auto: a fresh start, then a resume. Its --report_to
    wandb writes W&B runs (offline)."""
    (tmp_path / "my_rewards.py").write_text("def short(completions, **_):\n"
                                            "    return [1.0 / (1 + len(c)) for c in completions]\n")
    out = tmp_path / "output" / "run"
    args = ["train", "--deepspeed", "local_scripts/zero3.json", "--output_dir", str(out),
            "--model_name_or_path", tiny_model_dir, "--dataset_name", "none",
            "--image_folders", os.path.dirname(rec_jsonl), "--data_file_paths", rec_jsonl,
            "--freeze_vision_modules", "true", "--max_prompt_length", "1024", "--num_generations", "2",
            "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1", "--logging_steps", "1",
            "--report_to", "wandb", "--gradient_checkpointing", "true", "--attn_implementation", "flash_attention_2",
            "--num_train_epochs", "2", "--run_name", "gui", "--save_steps", "1", "--save_only_model", "true",
            "--reward_funcs", "my_rewards:short", "format", "--reward_method", "iou", "--data_seed", "42",
            "--device", "cpu", "--max_completion_length", "6", "--resume_from_checkpoint", "auto"]
    first = paddle_r1(*args, "--max_steps", "1", cwd=str(tmp_path), env=offline_trackers(tmp_path))
    assert first.returncode == 0, first.stderr[-3000:]
    assert "resume_from_checkpoint auto: no complete checkpoint" in first.stdout
    second = paddle_r1(*args, "--max_steps", "2", cwd=str(tmp_path), env=offline_trackers(tmp_path))
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"resume_from_checkpoint auto: resuming from {out}/checkpoint-1" in second.stdout
    assert [json.loads(line)["step"] for line in open(out / "metrics.jsonl")] == [1, 2]


def test_a_reward_beside_the_config_is_found(tmp_path, monkeypatch):
    from paddle_r1.rewards import get_reward
    from paddle_r1.rewards.manager import RewardManager

    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "beside_config_rewards.py").write_text("def one(completions, **_):\n"
                                                     "    return [1.0] * len(completions)\n")
    (folder / "c.yaml").write_text("reward_funcs: [beside_config_rewards:one]\n")
    monkeypatch.chdir(tmp_path)  # neither sys.path nor the working folder holds it
    with pytest.raises(KeyError, match="No module named 'beside_config_rewards'"):
        get_reward("beside_config_rewards:one")
    config = load_config(GRPOConfig, str(folder / "c.yaml"))
    assert config.config_folder == str(folder)  # carried by the config, not remembered by the process
    assert RewardManager.from_config(config).score(["a"], {}).rewards.tolist() == [1.0]


def test_eval_accepts_paddlemix_attn_implementation():
    from paddle_r1.evaluation.cli import build_parser

    args = build_parser("rec").parse_args(["--model_path", "m", "--data_root", "d", "--test_datasets", "refcoco_val",
                                           "--attn_implementation", "flash_attention_2"])
    assert args.attn_implementation == "flash_attention_2"


def test_shuffle_dataset_false_draws_the_samples_in_their_order(tmp_path, tiny_model_dir, rec_samples):
    """TRL's shuffle_dataset: by default each epoch is a seeded permutation; false keeps the data's order, epoch after
    epoch (a curriculum written into the file)."""
    from paddle_r1.trainer.grpo import GRPOTrainer

    def drawn(*extra) -> list:
        config = load_config(GRPOConfig, None, ["--model_name_or_path", tiny_model_dir, "--output_dir",
                                                str(tmp_path), "--reward_funcs", "iou", "--num_generations", "2",
                                                "--per_device_train_batch_size", "2", *extra])
        trainer = GRPOTrainer(config, samples=rec_samples)
        return [rec_samples.index(sample) for _ in range(2 * len(rec_samples))
                for draw in trainer.next_samples() for sample in draw.samples]

    in_order = list(range(len(rec_samples)))
    assert drawn("--shuffle_dataset", "false") == in_order * 2
    shuffled = drawn()
    assert sorted(shuffled[:len(in_order)]) == in_order and shuffled[:len(in_order)] != in_order


def test_disable_dropout_turns_every_dropout_layer_off(tmp_path, tiny_model_dir, rec_samples):
    """TRL's disable_dropout: LoRA's lora_dropout (the Qwen-VL decoders have no other dropout layer) drops nothing,
    whatever lora_dropout says."""
    import paddle

    from paddle_r1.trainer.grpo import GRPOTrainer

    def dropout_rates(*extra) -> list:
        config = load_config(GRPOConfig, None, ["--model_name_or_path", tiny_model_dir, "--output_dir",
                                                str(tmp_path), "--reward_funcs", "iou", "--lora", "true",
                                                "--lora_dropout", "0.5", *extra])
        policy = GRPOTrainer(config, samples=rec_samples).policy
        return [layer.p for layer in policy.sublayers() if isinstance(layer, paddle.nn.Dropout)]

    rates = dropout_rates()
    assert rates and set(rates) == {0.5}
    assert set(dropout_rates("--disable_dropout", "true")) == {0.0}
