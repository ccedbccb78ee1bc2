#!/usr/bin/env bash
# GRPO on geometry reasoning (R1-V's GEOQA_R1V_Train_8K), 8 GPUs by default. Settings: scripts/common.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=${CONFIG:-configs/grpo_geometry.yaml}
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2-VL-2B-Instruct}
source scripts/common.sh
default_data GEO/GEOQA_R1V_Train_8K GEO GEOQA_R1V_Train_8K ""  # images are inside the parquet shards
NUM_GENERATIONS=${NUM_GENERATIONS:-8}
PER_DEVICE_BATCH_SIZE=${PER_DEVICE_BATCH_SIZE:-$NUM_GENERATIONS}  # completions per GPU: 1 prompt x NUM_GENERATIONS
MAX_PIXELS=${MAX_PIXELS:-401408}
OUTPUT_DIR=${OUTPUT_DIR:-output/grpo_geometry}
launch_grpo "$@"
