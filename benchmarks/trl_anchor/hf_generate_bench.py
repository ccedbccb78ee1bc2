"""Rollout speed, Hugging Face side: transformers' greedy ``generate`` (KV cache) on a Qwen2.5-VL checkpoint, from
prompts handed over in an .npz file (input_ids, attention_mask, pixel_values, image_grid_thw, images_per_prompt,
written by ``benchmarks/rollout.py`` from paddle_r1's processor), each prompt's row repeated G times. Exactly
NEW_TOKENS tokens per row: EOS neither stops a row nor is suppressed (as paddle_r1's side, whose EOS list is empty).
transformers 5.3.0's image positions are corrected first (``reference_image_positions``). Prints one json line:
per-run seconds after a warm-up, their median, and the completion ids of the last run. ``--bf16``: the model in
bfloat16 (every op, as transformers runs a bf16 checkpoint), else float32.
Run it in a torch + transformers venv.

    python hf_generate_bench.py CKPT_DIR INPUTS.npz G NEW_TOKENS RUNS [--bf16]
"""
import json
import statistics
import sys
import time
import warnings

import numpy as np
import torch
import transformers
from transformers import Qwen2_5_VLForConditionalGeneration

warnings.filterwarnings("ignore")
transformers.logging.set_verbosity_error()


def repeated_inputs(arrays, g: int, config) -> dict:
    """Each prompt's row, image patches and image grids repeated g times, rows grouped prompt by prompt; and
    ``mm_token_type_ids`` (1 on image tokens), which transformers 5.3 needs for Qwen2.5-VL's 3D (M-RoPE) positions:
    without it the model silently puts every token at text positions (its processor returns it)."""
    grids = arrays["image_grid_thw"]
    image_at = np.concatenate([[0], np.cumsum(arrays["images_per_prompt"])])  # prompt p: images image_at[p]:[p+1]
    patch_at = np.concatenate([[0], np.cumsum(grids.prod(axis=1))])  # image i: patches patch_at[i]:[i+1]
    pixels, grid_rows = [], []
    for first, last in zip(image_at[:-1], image_at[1:]):
        pixels += [arrays["pixel_values"][patch_at[first]:patch_at[last]]] * g
        grid_rows += [grids[first:last]] * g
    input_ids = np.repeat(arrays["input_ids"], g, 0)
    token_types = np.where(input_ids == config.image_token_id, 1, np.where(input_ids == config.video_token_id, 2, 0))
    return dict(input_ids=torch.from_numpy(input_ids), mm_token_type_ids=torch.from_numpy(token_types.astype("int32")),
                attention_mask=torch.from_numpy(np.repeat(arrays["attention_mask"], g, 0)),
                pixel_values=torch.from_numpy(np.concatenate(pixels)),
                image_grid_thw=torch.from_numpy(np.concatenate(grid_rows)))


def reference_image_positions(model) -> bool:
    """transformers 5.3.0 multiplies an image's start position by ``tokens_per_second`` in Qwen2.5-VL's 3D (M-RoPE)
    positions (huggingface/transformers#45325, fixed after 5.3): an image after 6 text tokens gets temporal
    position 12, not 6. paddleformers, like Qwen's original code, uses start + t x interval. If the probe shows the
    bug, the reference positions are patched in, so that both sides run the same model. Returns whether it patched."""
    inner = model.model
    if int(inner.get_vision_position_ids(3, torch.tensor([1, 2, 2]), 1, 1, 2)[0, 0]) == 3:
        return False

    def get_vision_position_ids(start_position, grid_thw, temp_merge_size=1, spatial_merge_size=1, time_interval=1,
                                device=None):
        t, h, w = (int(grid_thw[0]) // temp_merge_size, int(grid_thw[1]) // spatial_merge_size,
                   int(grid_thw[2]) // spatial_merge_size)
        temporal = (torch.arange(t, device=device) * time_interval).repeat_interleave(h * w)
        height = torch.arange(h, device=device).repeat_interleave(w).repeat(t)
        width = torch.arange(w, device=device).repeat(h * t)
        return torch.stack([temporal, height, width]) + start_position

    inner.get_vision_position_ids = get_vision_position_ids
    return True


def main() -> None:
    folder, inputs_file, g, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    runs = int(sys.argv[5]) if len(sys.argv) > 5 else 3
    dtype = torch.bfloat16 if "--bf16" in sys.argv[6:] else torch.float32
    penalty = next((float(a.split("=", 1)[1]) for a in sys.argv[6:] if a.startswith("--repetition-penalty=")), 1.0)
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(folder, dtype=dtype).eval()
    patched = reference_image_positions(model)
    with np.load(inputs_file) as arrays:
        inputs = repeated_inputs(arrays, g, model.config)
    prompt_len = inputs["input_ids"].shape[1]

    def generate():
        with torch.inference_mode():
            return model.generate(**inputs, do_sample=False, max_new_tokens=n, min_new_tokens=n, use_cache=True,
                                  eos_token_id=None, repetition_penalty=penalty)

    generate()  # warm-up
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        out = generate()
        seconds.append(time.perf_counter() - start)
    completion = out[:, prompt_len:]
    assert completion.shape == (inputs["input_ids"].shape[0], n), completion.shape
    print(json.dumps({"seconds": seconds, "median_s": statistics.median(seconds), "threads": torch.get_num_threads(),
                      "patched_image_positions": patched, "torch": torch.__version__, "dtype": str(dtype),
                      "transformers": transformers.__version__, "completion_ids": completion.tolist()}))


if __name__ == "__main__":
    main()
