"""A checkpoint's model folder is its source's, but for the weights and what the run changed
(``models/source_files.py``): config.json, the generation config and the processor's files byte for byte, the run's
pixel limits in the source's own spelling; and a model card made from the run (``checkpoints/model_card.py``). For a
plain and a LoRA-merged model. What transformers makes of such folders: tests/test_checkpoint_goldens.py."""
import json
import os
import shutil

import pytest
import yaml

from paddle_r1.config.jobs import GRPOConfig
from paddle_r1.evaluation.heldout import heldout_for
from paddle_r1.models.loading import load_processor
from paddle_r1.models.source_files import CARRIED_OVER, write_source_files
from paddle_r1.trainer.grpo import GRPOTrainer
from paddle_r1.checkpoints.model_card import write_model_card

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
# as Qwen2.5-VL-3B-Instruct publishes it (its token ids moved into the tiny vocabulary): two end tokens and the
# sampling defaults serving engines read
SOURCE_GENERATION_CONFIG = {"bos_token_id": 0, "pad_token_id": 0, "do_sample": True, "eos_token_id": [2, 0],
                            "repetition_penalty": 1.05, "temperature": 0.1, "top_p": 0.001, "top_k": 1,
                            "transformers_version": "4.49.0"}
# keys paddleformers' save_pretrained adds to config.json that transformers does not know
PADDLE_ONLY_KEYS = ("paddleformers_version", "fuse_rms_norm", "rope_parameters", "weight_share_add_bias")


def _train(source, out, samples, **settings) -> str:
    config = GRPOConfig(model_name_or_path=source, output_dir=str(out), num_generations=2,
                        per_device_train_batch_size=2, max_completion_length=4, max_steps=1, save_steps=1, beta=0.0,
                        use_visualdl=False, disable_tqdm=True, **settings)
    GRPOTrainer(config, samples=samples, heldout=heldout_for(config)).train()
    return os.path.join(str(out), "checkpoint-1")


def _read(folder, name):
    with open(os.path.join(folder, name), encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.parametrize("lora", [False, True])
def test_the_sources_files_are_carried_over(tiny_model_dir, rec_samples, tmp_path, lora):
    source = str(tmp_path / "source")
    shutil.copytree(tiny_model_dir, source)
    with open(os.path.join(source, "generation_config.json"), "w", encoding="utf-8") as f:
        json.dump(SOURCE_GENERATION_CONFIG, f, indent=1)
    checkpoint = _train(source, tmp_path / "out", rec_samples, lora=lora)
    carried = [name for name in ("config.json",) + CARRIED_OVER if os.path.isfile(os.path.join(source, name))]
    assert len(carried) == 6  # config, generation config, preprocessor config, tokenizer (2), chat template
    for name in carried:
        with open(os.path.join(source, name), "rb") as f:
            assert (tmp_path / "out" / "checkpoint-1" / name).read_bytes() == f.read(), name
    # and nothing paddleformers would have written beside them
    assert not {"chat_template.jinja", "video_preprocessor_config.json"} & set(os.listdir(checkpoint))
    assert not set(PADDLE_ONLY_KEYS) & set(_read(checkpoint, "config.json"))
    from paddleformers.generation import GenerationConfig

    loaded = GenerationConfig.from_pretrained(checkpoint)
    assert loaded.eos_token_id == [2, 0] and loaded.top_k == 1 and loaded.do_sample


def test_the_runs_pixel_limits_are_recorded_in_the_sources_spelling(tiny_model_dir, rec_samples, tmp_path):
    checkpoint = _train(tiny_model_dir, tmp_path / "out", rec_samples, min_pixels=28 * 28, max_pixels=56 * 84)
    source = _read(tiny_model_dir, "preprocessor_config.json")
    written = _read(checkpoint, "preprocessor_config.json")
    assert written == {**source, "min_pixels": 28 * 28, "max_pixels": 56 * 84}
    assert list(written) == list(source)  # the source's key order
    processor = load_processor(checkpoint)  # what a resume or an eval of the checkpoint reads
    assert (processor.image_processor.min_pixels, processor.image_processor.max_pixels) == (28 * 28, 56 * 84)


def test_every_spelling_of_the_limits_and_the_dtype_is_changed(tmp_path):
    """transformers 5.3's files (PaddleOCR-VL: ``processor_config.json`` nesting the image processor, limits both at
    the top and in ``size``; config.json's ``dtype``) and paddleformers' ``size = {min_pixels, max_pixels}``."""
    source, folder = tmp_path / "source", tmp_path / "checkpoint"
    shutil.copytree(os.path.join(FIXTURES, "transformers5", "paddleocr_vl"), source)
    preprocessor = {"size": {"min_pixels": 3136, "max_pixels": 12544}, "patch_size": 14}  # paddleformers' spelling
    (source / "preprocessor_config.json").write_text(json.dumps(preprocessor))
    folder.mkdir()
    write_source_files(str(source), str(folder), dtype="bfloat16", max_pixels=4704)
    image_processor = _read(folder, "processor_config.json")["image_processor"]
    assert (image_processor["max_pixels"], image_processor["size"]) == (4704, {"longest_edge": 4704,
                                                                               "shortest_edge": 3136})
    assert _read(folder, "preprocessor_config.json") == {"size": {"min_pixels": 3136, "max_pixels": 4704},
                                                         "patch_size": 14}
    config = _read(folder, "config.json")
    assert config["dtype"] == "bfloat16" and "torch_dtype" not in config
    assert (folder / "tokenizer.json").read_bytes() == (source / "tokenizer.json").read_bytes()


def test_the_model_card_names_the_base_model_data_rewards_settings_and_scores(tiny_model_dir, rec_samples, rec_jsonl,
                                                                            tmp_path):
    checkpoint = _train(tiny_model_dir, tmp_path / "out", rec_samples, reward_funcs=["iou", "format"],
                        reward_weights=[2.0, 0.5], eval_steps=1, eval_data_path=rec_jsonl, eval_sample_num=2)
    card = open(os.path.join(checkpoint, "README.md"), encoding="utf-8").read()
    _, front, body = card.split("---\n", 2)
    assert yaml.safe_load(front) == {"library_name": "transformers", "pipeline_tag": "image-text-to-text",
                                     "tags": ["paddle_r1", "grpo", "qwen2_5_vl"]}  # a local folder: no hub id
    scores = [json.loads(line)["eval/score"] for line in open(tmp_path / "out" / "metrics.jsonl")
              if "eval/score" in line]
    assert len(scores) == 2  # before the first step and after the last
    for words in (f"the local model folder `{tiny_model_dir}`", "`iou`, weight 2", "`format`, weight 0.5",
                  f"held out: `{rec_jsonl}`, scored by `iou_accuracy`", "`loss_type`: ", "`beta`: 0.0",
                  "`num_generations`: 2", f"| 0 | {scores[0]:.4f} |", f"| 1 | {scores[1]:.4f} |"):
        assert words in body, words


def test_a_hub_id_is_the_cards_base_model(tmp_path):
    config = GRPOConfig(model_name_or_path="Qwen/Qwen2.5-VL-3B-Instruct", output_dir=str(tmp_path),
                        reward_funcs=["iou"])
    write_model_card(str(tmp_path), config, "GRPO", "qwen2_5_vl", 5, 10, str(tmp_path / "metrics.jsonl"))
    _, front, body = (tmp_path / "README.md").read_text().split("---\n", 2)
    assert yaml.safe_load(front)["base_model"] == "Qwen/Qwen2.5-VL-3B-Instruct"
    assert "trained with paddle_r1 for 5 of 10 steps" in body
    assert "None logged up to this step (no eval_data_path was given)." in body
