#!/usr/bin/env bash
# GRPO on counting (CLEVR-70K, R1-V's clevr_cogen_a_train), 8 GPUs by default. Settings: scripts/common.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=${CONFIG:-configs/grpo_counting.yaml}
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2-VL-2B-Instruct}
source scripts/common.sh
default_data Counting/clevr_cogen_a_train Counting clevr_cogen_a_train ""  # images are inside the parquet shards
NUM_GENERATIONS=${NUM_GENERATIONS:-8}
PER_DEVICE_BATCH_SIZE=${PER_DEVICE_BATCH_SIZE:-$NUM_GENERATIONS}  # completions per GPU: 1 prompt x NUM_GENERATIONS
MAX_PIXELS=${MAX_PIXELS:-401408}
OUTPUT_DIR=${OUTPUT_DIR:-output/grpo_counting}
launch_grpo "$@"
