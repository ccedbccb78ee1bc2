"""Rollout speed: paddle_r1's KV-cached decode against paddleformers' ``generate`` (which re-runs the prefix at
every step) and, with ``--hf PY``, Hugging Face transformers' ``generate``, with ``--vllm PY``, vLLM's (its CPU
build), on the same checkpoint.

    python benchmarks/rollout.py [--hidden 256 --layers 4 --prompts 4 --generations 4 --new-tokens 32]
    python benchmarks/rollout.py --family qwen3_vl --engines one_token,layers [--no-paddleformers]
    python benchmarks/rollout.py --hf PY [--model FOLDER] [--runs 3 --rounds 3] [--threads 2] [--paddleformers]
    python benchmarks/rollout.py --vllm PY [--hidden 1024 --layers 8] [--threads 2] [--vllm-eager]

``--hf``'s ``PY`` is the path of a Python interpreter that has torch and transformers 5.3 installed (another virtual
environment's ``bin/python``); ``--vllm``'s one of a venv with vLLM's CPU build (``benchmarks/vllm_setup.sh``).

Without ``--hf`` or ``--vllm`` the checkpoint is paddle_r1's tiny model of ``--family`` (``--hidden``, ``--layers``)
and the prompts synthetic grounding samples. ``--engines`` times paddle_r1's decode steps (config key
``rollout_engine``) side by side, the first compared with the others. With ``--hf`` or ``--vllm``, the sizes default
to the GRPO speed anchor's rollout (``grpo_step.py``): the checkpoint is the one ``trl_anchor/make_hf_tiny.py
--weights`` writes with transformers in that interpreter (``--hf``'s if given; hidden 256, 4 layers, vocab 4096, heads
of 64; ``--hidden``/``--layers`` change the decoder, ``--model FOLDER`` reuses one), 2 prompts x 8 completions x 64
tokens, one 112x112 image per prompt. The prompts are
encoded once, by paddle_r1's processor and chat template, and handed over: to ``trl_anchor/hf_generate_bench.py`` in
an .npz file (token ids and pixels; transformers 5.3.0's image M-RoPE positions are corrected there:
huggingface/transformers#45325), to ``trl_anchor/vllm_generate_bench.py`` as token ids, one image token per image,
and image files (vLLM's processor makes the pixels and expands the image tokens; the expanded ids must equal
paddle_r1's, which is checked). That script says how vLLM runs: G copies of each prompt, its whole process tree on
the cores of ``--threads`` (its worker's threads on all of them, or ``--vllm-auto-bind``: as vLLM binds them), caches
emptied between runs; it is started once and kept between rounds (loading and compiling take minutes).

Every engine decodes exactly ``--new-tokens`` greedy tokens per row (no EOS stop), G rows per prompt; seconds are
the median of ``--runs`` runs after a warm-up, and include the prefill (vision tower and prompt); tokens/s is
rows x new tokens / seconds. The engines alternate ``--rounds`` times (a busy spell slows both); the table gives the
median over rounds and the ratio is the median of the ratios within each round. Every engine runs its CPU kernels
on ``--threads`` threads (default 1; ``import paddle`` sets OMP_NUM_THREADS=1, Paddle's count is set with
``paddle.base.core.set_num_threads``), and this process, and so every engine's, is confined to the first
``--threads`` cores it may use. Greedy paths may part after a while from float differences between frameworks, so
agreement with paddle_r1's tokens is reported (identical tokens by position, identical rows), not asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
import paddle

warnings.filterwarnings("ignore")
HERE = os.path.dirname(os.path.abspath(__file__))
ANCHOR_SIZES = dict(prompts=2, generations=8, new_tokens=64)  # grpo_step.py's rollout
SMALL_SIZES = dict(prompts=4, generations=4, new_tokens=32)


def _median_seconds(fn, runs: int):
    """The median seconds of ``runs`` calls after a warm-up call, and the last call's result."""
    fn()
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        result = fn()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), result


def _agreement(ids: np.ndarray, reference: np.ndarray) -> str:
    same = ids == reference
    prefix = np.where(same.all(1), same.shape[1], (~same).argmax(1))  # tokens before the first difference
    return (f"{same.mean():.0%} of tokens, {int(same.all(1).sum())}/{len(same)} rows identical "
            f"(mean common prefix {prefix.mean():.1f} of {same.shape[1]} tokens)")


def _checkpoint(args, work: str) -> str:
    if args.model:
        return args.model
    if args.hf or args.vllm:
        folder = os.path.join(work, "model")
        subprocess.run([args.hf or args.vllm, os.path.join(HERE, "trl_anchor", "make_hf_tiny.py"), folder, "--weights",
                        "--hidden", str(args.hidden), "--layers", str(args.layers)],
                       check=True, stdout=subprocess.DEVNULL)
        return folder
    from anchor import decoder_size  # beside this file
    from paddle_r1.testing.tiny import make_tiny_model

    size = decoder_size(args.hidden, args.layers)
    return make_tiny_model(os.path.join(work, "model"), family=args.family, size=size)


def _samples(args, work: str) -> list[dict]:
    if args.hf or args.vllm:
        sys.path.insert(0, HERE)
        from grpo_step import _write_samples  # the anchor's prompts: a red square on white, 112x112

        return _write_samples(os.path.join(work, "images"), args.prompts)
    from paddle_r1.data.loader import load_samples
    from paddle_r1.synthetic import make_synthetic_rec

    return load_samples(make_synthetic_rec(os.path.join(work, "data"), args.prompts))[0]


def _hf_generate(args, model_dir: str, prompt, work: str) -> dict:
    """transformers' generate in the torch interpreter, from this side's encoded prompts."""
    input_ids, grids = prompt.input_ids.numpy(), prompt.image_grid_thw.numpy()
    images_per_prompt = (input_ids == _vision_start_id(model_dir)).sum(1)  # one <|vision_start|> per image
    assert images_per_prompt.sum() == len(grids), (images_per_prompt, grids)
    inputs_file = os.path.join(work, "prompts.npz")
    np.savez(inputs_file, input_ids=input_ids, attention_mask=prompt.attention_mask.numpy(),
             pixel_values=prompt.pixel_values.numpy(), image_grid_thw=grids, images_per_prompt=images_per_prompt)
    script = os.path.join(HERE, "trl_anchor", "hf_generate_bench.py")
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    options = ["--bf16"] * args.bf16 + [f"--repetition-penalty={args.repetition_penalty}"]
    result = subprocess.run([args.hf, script, model_dir, inputs_file, str(args.generations), str(args.new_tokens),
                             str(args.runs)] + options, check=True, capture_output=True, text=True, env=env)
    return json.loads(result.stdout.strip().splitlines()[-1])


class VllmSide:
    """``trl_anchor/vllm_generate_bench.py`` in vLLM's interpreter, started once (it loads and warms up) and asked
    for ``runs`` timed runs per round; its log goes to a file, whose end is shown if it fails."""

    def __init__(self, args, model_dir: str, prompt, samples: list[dict], work: str):
        mask = prompt.attention_mask.numpy().astype(bool)
        self.input_ids = [row[keep].tolist() for row, keep in zip(prompt.input_ids.numpy(), mask)]  # unpadded
        image_token = _config(model_dir)["image_token_id"]
        # vLLM's processor expands each image's placeholder itself: it gets one image token per image
        handed = [[t for i, t in enumerate(ids) if t != image_token or ids[i - 1] != image_token]
                  for ids in self.input_ids]
        prompts_file = os.path.join(work, "vllm_prompts.json")
        with open(prompts_file, "w") as f:
            json.dump([{"input_ids": ids, "images": s["images"]} for ids, s in zip(handed, samples)], f)
        self.log = open(os.path.join(work, "vllm.log"), "w+")
        command = [args.vllm, os.path.join(HERE, "trl_anchor", "vllm_generate_bench.py"), model_dir, prompts_file,
                   str(args.generations), str(args.new_tokens), str(args.runs), str(args.threads)]
        options = (["--eager"] * args.vllm_eager + ["--auto-bind"] * args.vllm_auto_bind + ["--bf16"] * args.bf16
                   + [f"--repetition-penalty={args.repetition_penalty}"])
        self.process = subprocess.Popen(command + options, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.info = self._answer()
        if self.info["prompt_token_ids"] != self.input_ids:
            raise SystemExit("vLLM's prompt token ids, its image tokens expanded, differ from paddle_r1's")

    def _answer(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            self.log.seek(0)
            raise SystemExit("vLLM's side stopped; the end of its log:\n" + "".join(self.log.readlines()[-15:]))
        time.sleep(2)  # vLLM's worker polls for its next step for 1 s after its last one, on the cores shared
        return json.loads(line)

    def round(self) -> dict:
        self.process.stdin.write("run\n")
        self.process.stdin.flush()
        return self._answer()

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()
        self.log.close()


def _config(model_dir: str) -> dict:
    with open(os.path.join(model_dir, "config.json")) as f:
        return json.load(f)


def _vision_start_id(model_dir: str) -> int:
    return _config(model_dir)["vision_start_token_id"]


def _describe(model_dir: str, model) -> str:
    from paddle_r1.models.families import family_of

    config = _config(model_dir)
    text = {**config, **config.get("text_config", {})}
    parameters = sum(int(p.size) for p in model.parameters())
    head_dim = text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]
    depth = config["vision_config"][family_of(config).memory.vision_depth]
    return (f"{config['model_type']} ({parameters / 1e6:.1f}M parameters: hidden {text['hidden_size']}, "
            f"{text['num_hidden_layers']} layers, {text['num_attention_heads']} heads of {head_dim}, vocab "
            f"{text['vocab_size']}, vision depth {depth})")


def _paddleformers_generate(model, prompt, g: int, n: int, runs: int):
    """paddleformers' generate over the G-times repeated rows (one image per prompt)."""
    inputs = dict(input_ids=paddle.repeat_interleave(prompt.input_ids, g, 0),
                  attention_mask=paddle.repeat_interleave(prompt.attention_mask, g, 0),
                  image_grid_thw=paddle.repeat_interleave(prompt.image_grid_thw, g, 0))
    inputs["pixel_values"] = paddle.concat([p for p in paddle.split(prompt.pixel_values, [
        int(x) for x in prompt.image_grid_thw.prod(axis=1)]) for _ in range(g)])

    def generate():
        with paddle.no_grad():
            out = model.generate(**inputs, max_new_tokens=n, min_new_tokens=n, decode_strategy="greedy_search")
        return out[0] if isinstance(out, (tuple, list)) else out

    seconds, generated = _median_seconds(generate, runs)
    return seconds, generated[:, -n:].numpy()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hf", metavar="PY", help="a torch + transformers interpreter: adds its generate")
    parser.add_argument("--vllm", metavar="PY", help="an interpreter with vLLM's CPU build: adds its generate")
    parser.add_argument("--vllm-eager", action="store_true", help="vLLM without compiling (enforce_eager)")
    parser.add_argument("--vllm-auto-bind", action="store_true",
                        help="vLLM's own thread binding on the --threads cores: one for its scheduler, the rest for "
                             "its worker (default: its worker's threads on all of them, the scheduler beside)")
    parser.add_argument("--bf16", action="store_true",
                        help="bfloat16 on every side: paddle_r1's rollout_bf16_products (its decode step's products "
                             "by bf16 weights, the rest float32), transformers' and vLLM's models wholly in bf16; "
                             "greedy tokens then differ between the sides")
    parser.add_argument("--repetition-penalty", type=float, default=1.0,
                        help="greedy decoding with this repetition penalty on every side (config key "
                             "repetition_penalty; transformers' and vLLM's of that name; default 1: none)")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads, and cores, of every engine (default 1)")
    parser.add_argument("--model", help="an existing Qwen2.5-VL checkpoint folder (default: built here)")
    parser.add_argument("--family", default="qwen2_5_vl",
                        help="the family of paddle_r1's tiny model, without --hf and --vllm (default qwen2_5_vl)")
    parser.add_argument("--engines", default="auto",
                        help="paddle_r1's decode steps to time, comma-separated (rollout_engine: auto, one_token, "
                             "layers; default auto)")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--prompts", type=int, help="default 2 with --hf (the anchor's), else 4")
    parser.add_argument("--generations", type=int, help="default 8 with --hf, else 4")
    parser.add_argument("--new-tokens", type=int, help="default 64 with --hf, else 32")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per engine and round, after one warm-up")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, alternating the engines (default 3)")
    parser.add_argument("--paddleformers", action=argparse.BooleanOptionalAction,
                        help="time paddleformers' generate too (default: without --hf or --vllm only; ~30 s a run at "
                             "their sizes)")
    args = parser.parse_args()
    if args.paddleformers and args.repetition_penalty != 1.0:
        parser.error("--repetition-penalty is not passed to paddleformers' generate: leave out --paddleformers")
    for key, value in (ANCHOR_SIZES if args.hf or args.vllm else SMALL_SIZES).items():
        if getattr(args, key) is None:
            setattr(args, key, value)

    from paddle_r1.cpu_math import tune_cpu_math
    from paddle_r1.quiet import quiet_libraries

    quiet_libraries("ERROR")
    tune_cpu_math()  # what a CPU job does before its first matrix product
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:args.threads])  # inherited by the other engines
    paddle.base.core.set_num_threads(args.threads)
    from paddle_r1.models.loading import load_model, load_processor
    from paddle_r1.generation.generator import build_prompt_batch
    from paddle_r1.generation.rollout import SamplingParams, sample_completions

    work = tempfile.mkdtemp()
    model_dir = _checkpoint(args, work)
    model, processor = load_model(model_dir), load_processor(model_dir)
    model.eval()
    samples = _samples(args, work)
    prompt, _ = build_prompt_batch(samples, processor, "{Question}")
    g, n = args.generations, args.new_tokens
    rows = prompt.size * g
    no_eos = [-1]  # every row generates all n tokens

    def paddle_r1(engine: str):
        # as the others: no log-probs; the weights packed before the first token, as in the trainer's rollout
        params = SamplingParams(max_new_tokens=n, temperature=0.0, logprobs=False, pack_after=0, engine=engine,
                                bf16_products=args.bf16, repetition_penalty=args.repetition_penalty)
        return sample_completions(model, prompt, g, params, no_eos, processor.tokenizer.pad_token_id)

    # rounds alternate the sides, so a machine busy for a while slows both; each side's seconds per round are the
    # median of --runs runs after a warm-up, and the ratios are taken within a round
    vllm = VllmSide(args, model_dir, prompt, samples, work) if args.vllm else None
    engine_names = args.engines.split(",")
    rounds = []  # per round: [(name, seconds, completion ids [rows, n]), ...], paddle_r1's engines first
    for _ in range(args.rounds):
        engines = []
        for engine in engine_names:
            seconds, rollout = _median_seconds(lambda: paddle_r1(engine), args.runs)
            products = ", rollout_bf16_products" if args.bf16 else ""
            engines.append((f"paddle_r1 `sample_completions` (KV cache, rollout_engine {engine}{products})", seconds,
                            rollout.completion_ids.numpy()))
        if args.hf:
            hf = _hf_generate(args, model_dir, prompt, work)
            fixed = ", image positions fixed: transformers#45325" if hf["patched_image_positions"] else ""
            engines.append((f"transformers {hf['transformers']} `generate` (torch {hf['torch']}, {hf['dtype']}, "
                            "KV cache, "
                            f"{hf['threads']} thread(s){fixed})", hf["median_s"], np.asarray(hf["completion_ids"])))
        if vllm:
            answer, info = vllm.round(), vllm.info
            engines.append((f"vLLM {info['vllm']} `LLM.generate` (CPU build, torch {info['torch']}, "
                            f"{'bfloat16' if args.bf16 else 'float32'}, "
                            f"{'compiled' if info['compiled'] else 'eager'}, process tree on core(s) {info['cores']}, "
                            f"worker threads bound: {info['bind']})",
                            answer["median_s"], np.asarray(answer["completion_ids"])))
        penalised = args.repetition_penalty != 1.0  # paddleformers' generate is not given the penalty
        if args.paddleformers if args.paddleformers is not None else not (args.hf or args.vllm or penalised):
            import paddleformers

            seconds, ids = _paddleformers_generate(model, prompt, g, n, args.runs)
            engines.append((f"paddleformers {paddleformers.__version__} `generate` (re-runs the prefix)", seconds, ids))
        rounds.append(engines)
    if vllm:
        vllm.close()

    penalty_note = f", repetition_penalty {args.repetition_penalty}" if args.repetition_penalty != 1.0 else ""
    print(f"{_describe(model_dir, model)}: {prompt.size} prompts x {g} completions x {n} new tokens "
          f"(greedy{penalty_note}, {rows} rows), {args.threads} thread(s); per round the median of {args.runs} runs "
          "after a "
          f"warm-up, {args.rounds} round(s) alternating the engines; the table holds the median over rounds")
    print("| engine | seconds | decode tokens/s | seconds per round |\n|---|---|---|---|")
    for index, (name, _, _) in enumerate(rounds[0]):
        per_round = [engines[index][1] for engines in rounds]
        seconds = statistics.median(per_round)
        print(f"| {name} | {seconds:.3f} | {rows * n / seconds:.0f} | {', '.join(f'{s:.3f}' for s in per_round)} |")
    reference = rounds[-1][0][2]
    first = "paddle_r1" if len(engine_names) == 1 else f"paddle_r1 (rollout_engine {engine_names[0]})"
    for index, (name, _, ids) in enumerate(rounds[-1][1:], start=1):
        ratios = [engines[index][1] / engines[0][1] for engines in rounds]
        label = name.split(" `")[0] if index >= len(engine_names) else f"rollout_engine {engine_names[index]}"
        print(f"{label}: {first} is {statistics.median(ratios):.2f}x its tokens/s (median of the "
              f"rounds' ratios: {', '.join(f'{r:.2f}' for r in ratios)}); greedy tokens equal to paddle_r1's: "
              f"{_agreement(ids, reference)}")

if __name__ == "__main__":
    main()
