"""Multi-turn tool rollouts: turn 2 over the carried KV cache (``generation/episodes.py``: only the tool segment is
prefilled, on top of the cache turn 1 left) against re-prefilling each whole episode (prompt, turn 1, tool message,
every image through the vision tower again) and decoding turn 2 from that.

    python benchmarks/episodes.py [--hidden 256 --layers 4 --prompts 2 --generations 4 --new-tokens 32 --runs 3]

The checkpoint is paddle_r1's tiny model (``--hidden``, ``--layers``), the prompts synthetic grounding samples; every
row's first turn is given (a crop call, the same text for all rows) and turn 2 is greedy. Rows:

- ``turn 1 only``: ``sample_episodes`` with ``max_turns`` 1: the prompts' prefill and the given turn fed through
  the decode step;
- ``carried, turns 1-2``: ``sample_episodes`` with ``max_turns`` 2; minus the row above, the cost of turn 2: the crop
  run, the tool message processed and prefilled on the carried cache, turn 2 decoded; of it, the segment's prefill
  (``episodes.prefill_segment``, timed where it is called);
- ``re-prefill turn 2``: the episodes up to turn 2 (token ids and images as the carried run built them) as one
  left-padded batch prefilled from scratch (``rollout.sample_completions``, one completion each), turn 2 decoded.
  The crop run and the processor's work on the tool images are not counted here, so this side is favoured; of it,
  the prefill (``rollout.prefill`` of the same batch).

Seconds are the median of ``--runs`` runs after a warm-up; turn 2's tokens of the two ways are compared (greedy
paths agree up to float rounding).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings

import numpy as np
import paddle

warnings.filterwarnings("ignore")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rollout import _median_seconds  # noqa: E402  (a warm-up call, then the median of the runs)

CALL = '<tool_call>{"name": "crop", "arguments": {"bbox_2d": [0, 0, 60, 60]}}</tool_call>'


def _episodes_until_turn_two(rollout, images_per_row: list[int]):
    """The carried run's episodes up to the first token of turn 2, as a left-padded prompt batch with all their
    images, and where turn 2 starts in each row's episode."""
    from paddle_r1.generation.rollout import PromptBatch
    from paddle_r1.models.forward import image_spans

    g, own = rollout.num_generations, rollout.completion_mask.numpy()
    rows, starts = [], []
    for r in range(own.shape[0]):
        prompt = rollout.prompt.input_ids[r // g][rollout.prompt.attention_mask[r // g] == 1].numpy()
        start = int(np.flatnonzero(np.diff(own[r]) == 1)[0]) + 1
        rows.append(np.concatenate([prompt, rollout.completion_ids[r, :start].numpy()]))
        starts.append(start)
    width = max(len(r) for r in rows)
    ids = np.zeros((len(rows), width), dtype="int64")
    mask = np.zeros((len(rows), width), dtype="int64")
    for i, row in enumerate(rows):
        ids[i, width - len(row):], mask[i, width - len(row):] = row, 1
    spans = image_spans(rollout.episode_image_grid_thw, images_per_row)
    assert spans[-1][1] == rollout.episode_pixel_values.shape[0]
    batch = PromptBatch(paddle.to_tensor(ids), paddle.to_tensor(mask), rollout.episode_pixel_values,
                        rollout.episode_image_grid_thw)
    return batch, starts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=96,
                        help="tokens per turn (at most; at least the given first turn's)")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    from paddle_r1.cpu_math import tune_cpu_math
    from paddle_r1.data.loader import load_samples
    from paddle_r1.synthetic import make_synthetic_rec
    from paddle_r1.generation import episodes as episodes_module
    from paddle_r1.generation.episodes import sample_episodes
    from paddle_r1.generation.generator import build_prompt_batch, eos_token_ids, load_sample_images
    from paddle_r1.generation.rollout import SamplingParams, prefill, sample_completions
    from paddle_r1.models.loading import load_model, load_processor
    from paddle_r1.quiet import quiet_libraries
    from anchor import decoder_size  # beside this file
    from paddle_r1.testing.tiny import make_tiny_model
    from paddle_r1.tools.builtins import ToolContext
    from paddle_r1.tools.toolbox import Toolbox

    quiet_libraries()
    tune_cpu_math()
    work = tempfile.mkdtemp(prefix="episodes_bench_")
    size = decoder_size(args.hidden, args.layers)
    model_dir = make_tiny_model(os.path.join(work, "model"), size=size)
    model, processor = load_model(model_dir), load_processor(model_dir)
    samples = load_samples(make_synthetic_rec(os.path.join(work, "data"), args.prompts))[0]
    images = [load_sample_images(s) for s in samples]
    prompt, facts = build_prompt_batch(samples, processor, "{Question}", images=images)
    contexts = [ToolContext(opened, sizes, inputs, "abs_resized")
                for opened, sizes, inputs in zip(images, facts.image_sizes, facts.input_sizes)]
    tokenizer = processor.tokenizer
    call_tokens = len(tokenizer(CALL, add_special_tokens=False)["input_ids"]) + 1
    params = SamplingParams(max_new_tokens=max(args.new_tokens, call_tokens), temperature=0.0)
    eos, pad, g = eos_token_ids(tokenizer), tokenizer.pad_token_id, args.generations
    first_turns = [CALL] * (args.prompts * g)

    def episodes(max_turns: int):
        return sample_episodes(model, processor, prompt, contexts, g, params, eos, pad, Toolbox(["crop"]), max_turns,
                               first_turns=first_turns)

    segment_seconds = []  # each call's, timed where episodes.py calls it
    prefill_segment = episodes_module.prefill_segment

    def timed_prefill_segment(*call):
        start = time.perf_counter()
        out = prefill_segment(*call)
        segment_seconds.append(time.perf_counter() - start)
        return out

    episodes_module.prefill_segment = timed_prefill_segment
    turn_one, _ = _median_seconds(lambda: episodes(1), args.runs)
    carried, result = _median_seconds(lambda: episodes(2), args.runs)
    rollout = result.rollout
    batch, starts = _episodes_until_turn_two(rollout, rollout.episode_images_per_row)
    reprefilled, fresh = _median_seconds(lambda: sample_completions(model, batch, 1, params, eos, pad), args.runs)
    full_prefill, _ = _median_seconds(lambda: prefill(model, batch), args.runs)

    own, fresh_ids = rollout.completion_mask.numpy(), fresh.completion_ids.numpy()
    lengths = [int(own[r, start:].sum()) for r, start in enumerate(starts)]
    same = sum(np.array_equal(rollout.completion_ids[r, start:start + n].numpy(), fresh_ids[r, :n])
               for r, (start, n) in enumerate(zip(starts, lengths)))
    print(f"tiny qwen2_5_vl, hidden {args.hidden}, {args.layers} layers; {args.prompts} prompts x {g} episodes; "
          f"episode length at turn 2: {batch.input_ids.shape[1]} tokens (of them prompt "
          f"{prompt.input_ids.shape[1]}); turn 2: {np.mean(lengths):.0f} greedy tokens on average (at most "
          f"{params.max_new_tokens}); median of {args.runs} runs")
    print(f"{'':28}{'seconds':>10}")
    print(f"{'turn 1 only':28}{turn_one:>10.3f}")
    print(f"{'carried, turns 1-2':28}{carried:>10.3f}")
    print(f"{'  of it turn 2 (difference)':28}{carried - turn_one:>10.3f}")
    print(f"{'  of it the segment prefill':28}{statistics.median(segment_seconds):>10.3f}")
    print(f"{'re-prefill turn 2':28}{reprefilled:>10.3f}")
    print(f"{'  of it the prefill':28}{full_prefill:>10.3f}")
    print(f"turn 2 tokens identical in {same}/{len(starts)} rows")


if __name__ == "__main__":
    main()
