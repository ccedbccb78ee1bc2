"""A checkpoint folder keeps what training does not change: the source model's generation config, byte for byte
(``models/source_files.py``), for a plain and a LoRA-merged model."""
import json
import os
import shutil

import pytest

from paddle_r1.config import GRPOConfig
from paddle_r1.trainer.grpo import GRPOTrainer

# as Qwen2.5-VL-3B-Instruct publishes it (its token ids moved into the tiny vocabulary): two end tokens and the
# sampling defaults serving engines read
SOURCE_GENERATION_CONFIG = {"bos_token_id": 0, "pad_token_id": 0, "do_sample": True, "eos_token_id": [2, 0],
                            "repetition_penalty": 1.05, "temperature": 0.1, "top_p": 0.001, "top_k": 1,
                            "transformers_version": "4.49.0"}


@pytest.mark.parametrize("lora", [False, True])
def test_the_sources_generation_config_is_carried_over(tiny_model_dir, rec_samples, tmp_path, lora):
    source = str(tmp_path / "source")
    shutil.copytree(tiny_model_dir, source)
    with open(os.path.join(source, "generation_config.json"), "w", encoding="utf-8") as f:
        json.dump(SOURCE_GENERATION_CONFIG, f, indent=1)
    config = GRPOConfig(model_name_or_path=source, output_dir=str(tmp_path / "out"), num_generations=2,
                        per_device_train_batch_size=2, max_completion_length=4, max_steps=1, save_steps=1, beta=0.0,
                        lora=lora, use_visualdl=False, disable_tqdm=True)
    GRPOTrainer(config, samples=rec_samples).train()
    checkpoint = tmp_path / "out" / "checkpoint-1"
    with open(os.path.join(source, "generation_config.json"), "rb") as f:
        assert (checkpoint / "generation_config.json").read_bytes() == f.read()
    from paddleformers.generation import GenerationConfig

    loaded = GenerationConfig.from_pretrained(str(checkpoint))
    assert loaded.eos_token_id == [2, 0] and loaded.top_k == 1 and loaded.do_sample
