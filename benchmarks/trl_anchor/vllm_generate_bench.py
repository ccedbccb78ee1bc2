"""Rollout speed, vLLM side: vLLM's offline ``LLM.generate`` (its CPU build, ``benchmarks/vllm_setup.sh``) on a
Qwen2.5-VL checkpoint, from prompts handed over in a json file by ``benchmarks/rollout.py``: per prompt its token ids
(paddle_r1's processor and chat template, one image token per image: vLLM's processor expands it) and its image
files. Run it in vLLM's venv:

    python vllm_generate_bench.py CKPT_DIR PROMPTS.json G NEW_TOKENS RUNS THREADS [--eager] [--auto-bind]

How vLLM runs here:
- rows: G copies of each prompt, prompt by prompt (vLLM refuses ``n > 1`` with greedy sampling); greedy
  (temperature 0), exactly NEW_TOKENS tokens a row (``ignore_eos``), token ids only (``detokenize=False``: paddle_r1's
  rollout returns ids too); float32, ``--max-model-len 1024``, seed 0; compiled (vLLM's default) unless ``--eager``.
- threads: vLLM's CPU build runs a process tree (the ``LLM`` front end, the engine core with its scheduler, the
  worker). The whole tree is confined to the first THREADS cores this process may use (its affinity, which the
  children inherit), and the worker's OpenMP threads are bound to those cores (``VLLM_CPU_OMP_THREADS_BIND``), so
  the scheduler and the front end share the worker's cores instead of taking another one. ``--auto-bind`` leaves
  the binding to vLLM (``auto``: on x86 it reserves one of the cores for the scheduler's process and binds the
  worker to the others, so THREADS cores give the worker THREADS - 1 threads).
- timing: each run is one ``generate`` call over all rows: the vision tower, prefill and decode, as on paddle_r1's
  side. Before each run (not timed) the prefix cache and the encoder cache are emptied, so no run reuses the
  previous run's prompts or image features (within a run the G copies may share them: vLLM's own prefix caching);
  the image preprocessing cache is kept (paddle_r1's side preprocesses before its clock too).
- protocol: after loading and one warm-up ``generate`` it prints a json line (``ready``, versions, the prompts'
  token ids as vLLM kept them); then for each line read from standard input it times RUNS runs after a warm-up
  run and prints a json line (per-run seconds, their median, the last run's completion ids); it exits at the end of its input. Everything
  else vLLM prints goes to standard error.
"""
import json
import os
import statistics
import sys
import time


def confine(threads: int) -> str:
    """Restricts this process (and the processes it starts) to its first ``threads`` allowed cores; returns them
    as vLLM's bind list ("0", "0,1")."""
    cores = sorted(os.sched_getaffinity(0))[:threads]
    if len(cores) < threads:
        raise SystemExit(f"{threads} threads asked, {len(cores)} cores allowed")
    os.sched_setaffinity(0, cores)
    return ",".join(map(str, cores))


def main() -> None:
    folder, prompts_file = sys.argv[1], sys.argv[2]
    g, n, runs, threads = (int(x) for x in sys.argv[3:7])
    eager, auto_bind, bf16 = ("--eager" in sys.argv[7:], "--auto-bind" in sys.argv[7:], "--bf16" in sys.argv[7:])
    penalty = next((float(a.split("=", 1)[1]) for a in sys.argv[7:] if a.startswith("--repetition-penalty=")), 1.0)
    protocol = os.fdopen(os.dup(1), "w", buffering=1)  # json lines only; vLLM's own output goes to stderr
    os.dup2(2, 1)
    cores = confine(threads)
    os.environ.update(VLLM_CPU_OMP_THREADS_BIND="auto" if auto_bind else cores,
                      VLLM_CPU_KVCACHE_SPACE="1")  # GiB; without it vLLM takes most of the memory

    import torch
    import vllm
    from PIL import Image
    from vllm import LLM, SamplingParams

    with open(prompts_file) as f:
        prompts = json.load(f)
    requests = [{"prompt_token_ids": p["input_ids"],
                 "multi_modal_data": {"image": [Image.open(path).convert("RGB") for path in p["images"]]}}
                for p in prompts for _ in range(g)]
    images = [image for request in requests for image in request["multi_modal_data"]["image"]]
    # vLLM sizes its memory with dummy images of this size (else of its processor's largest, 12.8M pixels)
    largest = {"count": max(len(p["images"]) for p in prompts), "width": max(image.width for image in images),
               "height": max(image.height for image in images)}
    llm = LLM(model=folder, dtype="bfloat16" if bf16 else "float32", max_model_len=1024, seed=0, enforce_eager=eager,
              limit_mm_per_prompt={"image": largest}, max_num_seqs=max(len(requests), 16))
    params = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True, detokenize=False, repetition_penalty=penalty)

    def generate():
        llm.reset_prefix_cache()
        llm.llm_engine.reset_encoder_cache()
        start = time.perf_counter()
        outputs = llm.generate(requests, params, use_tqdm=False)
        return time.perf_counter() - start, outputs

    _, outputs = generate()  # warm-up
    protocol.write(json.dumps({"ready": True, "vllm": vllm.__version__, "torch": torch.__version__, "cores": cores,
                               "bind": os.environ["VLLM_CPU_OMP_THREADS_BIND"], "compiled": not eager,
                               "prompt_token_ids": [list(o.prompt_token_ids) for o in outputs[::g]]}) + "\n")
    for _ in sys.stdin:
        generate()  # a warm-up in each round, as on paddle_r1's side
        seconds = []
        for _ in range(runs):
            elapsed, outputs = generate()
            seconds.append(elapsed)
        completion = [list(o.outputs[0].token_ids) for o in outputs]
        assert all(len(row) == n for row in completion), [len(row) for row in completion]
        protocol.write(json.dumps({"seconds": seconds, "median_s": statistics.median(seconds),
                                   "completion_ids": completion}) + "\n")


if __name__ == "__main__":
    main()
