#!/usr/bin/env bash
# Every speed figure of docs/performance.md's comparison tables, measured on this machine in one run, one benchmark
# at a time, into one Markdown file headed by the CPU it ran on (a figure from one CPU says nothing of another):
#
#     bash benchmarks/cpu_report.sh --trl PY --vllm VLLM_PY [--out cpu-report.md] [--quick]
#
# PY: an interpreter with torch, transformers 5.3 and TRL 1.16 (the GRPO step against TRL, the rollout against
# transformers' generate); VLLM_PY: one with vLLM's CPU build (bash benchmarks/vllm_setup.sh VENV). Either may be
# left out: its rows are skipped. --quick runs fewer rounds and no scaling grid (a check that everything runs, not
# figures to publish). Run it on a quiet machine: the full report takes about an hour on a 2-core AMD EPYC, most of
# it the scaling grid.
set -euo pipefail

trl="" vllm="" out="cpu-report.md" quick=0
while [ $# -gt 0 ]; do
    case "$1" in
        --trl) trl=$2; shift 2 ;;
        --vllm) vllm=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --quick) quick=1; shift ;;
        *) echo "cpu_report.sh: unknown argument $1 (--trl PY, --vllm PY, --out FILE, --quick)" >&2; exit 2 ;;
    esac
done
python=${PYTHON:-python}
here=$(cd "$(dirname "$0")" && pwd)
step_rounds=3 rollout_rounds=5 steps=4
if [ "$quick" = 1 ]; then step_rounds=1 rollout_rounds=1 steps=2; fi

{
    echo "# paddle_r1 on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
    echo
    flags=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|amx_bf16)$' | xargs)
    commit=$(git -C "$here/.." rev-parse --short HEAD 2>/dev/null || echo "not a git checkout")
    echo "$(nproc) cores, flags: ${flags:-none of avx2 avx512f avx512_bf16 amx_bf16}; $(date -u '+%Y-%m-%d %H:%M UTC');" \
         "paddle_r1 $commit"
    echo
} > "$out"

run() {  # run TITLE COMMAND...: the command's output under its title and command line
    local title=$1; shift
    echo "running: $title" >&2
    { echo "## $title"; echo; echo "\`$*\`"; echo; echo '```'; } >> "$out"
    local status=0
    "$@" >> "$out" 2>&1 || status=$?
    { echo '```'; echo; } >> "$out"
    [ "$status" = 0 ] || echo "  failed (exit $status): its output is in $out" >&2
}

# which MKL each side runs, and its products at the anchor's shapes under each kernel set: where the step's gap to
# TRL comes from on a new CPU (a minute)
torch_side=()
[ -n "$trl" ] && torch_side=(--torch "$trl")
run "matrix products: Paddle's MKL under each kernel set, and torch's in PY, one thread" \
    "$python" "$here/experiments/mkl_kernels.py" --rounds "$step_rounds" "${torch_side[@]}"
# bf16 products where the CPU has bf16 instructions (AVX-512 BF16, AMX): the kernel oneDNN picks and its speed
run "the decode step's products in bfloat16 (oneDNN) against MKL's float32, 135M sizes, one thread" \
    "$python" "$here/experiments/bf16_products.py"
if [ -n "$trl" ]; then
    for threads in 1 2; do
        run "GRPO step against TRL 1.16, $threads thread(s)" \
            "$python" "$here/grpo_step.py" --trl "$trl" --steps "$steps" --rounds "$step_rounds" --threads "$threads"
    done
    run "rollout against transformers' generate, 6.9M model" \
        "$python" "$here/rollout.py" --hf "$trl" --rounds "$rollout_rounds"
    run "rollout against transformers' generate, 135M model" \
        "$python" "$here/rollout.py" --hf "$trl" --hidden 1024 --layers 8 --rounds "$step_rounds"
    run "rollout against transformers' generate, bf16 on both sides (rollout_bf16_products), 135M model" \
        "$python" "$here/rollout.py" --hf "$trl" --bf16 --hidden 1024 --layers 8 --rounds "$step_rounds"
fi
if [ -n "$vllm" ]; then
    for model in 6.9M 135M; do
        size=""
        [ "$model" = 135M ] && size="--hidden 1024 --layers 8"
        for threads in 1 2; do
            # shellcheck disable=SC2086  # the size's two options split on purpose
            run "rollout against vLLM's CPU build, $model model, $threads thread(s)" \
                "$python" "$here/rollout.py" --vllm "$vllm" $size --threads "$threads" --rounds "$rollout_rounds"
        done
    done
    run "rollout against vLLM's CPU build, bf16 on both sides (rollout_bf16_products), 135M model, one thread" \
        "$python" "$here/rollout.py" --vllm "$vllm" --bf16 --hidden 1024 --layers 8 --rounds "$step_rounds"
fi
if [ -n "$trl" ] && [ "$quick" = 0 ]; then
    run "the scaling grid against TRL 1.16 (length, G, image)" \
        "$python" "$here/grpo_step.py" --trl "$trl" --scaling --steps 3 --rounds 3
fi
echo "report: $out" >&2
