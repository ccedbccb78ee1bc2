#!/usr/bin/env bash
# GRPO on REC (RefCOCO/+/g). Settings are variables the environment can override:
#   MODEL_PATH=/models/Qwen2.5-VL-7B-Instruct OUTPUT_DIR=output/rec7b bash scripts/run_grpo_rec.sh
# Single device for now: multi-GPU data parallel (paddle.distributed.launch) is not wired in yet.
set -euo pipefail
cd "$(dirname "$0")/.."

CONFIG=${CONFIG:-configs/grpo_rec.yaml}
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-VL-3B-Instruct}
DATA_PATH=${DATA_PATH:-data/rec_jsons_processed/refcoco_train.jsonl}
IMAGE_ROOT=${IMAGE_ROOT:-data/coco}
BATCH_SIZE=${BATCH_SIZE:-1}
NUM_GENERATIONS=${NUM_GENERATIONS:-8}
MAX_PIXELS=${MAX_PIXELS:-12845056}
OUTPUT_DIR=${OUTPUT_DIR:-output/grpo_rec}

mkdir -p "$OUTPUT_DIR"
paddle-r1 train --config "$CONFIG" \
    --model_name_or_path "$MODEL_PATH" \
    --data_path "$DATA_PATH" \
    --image_root "$IMAGE_ROOT" \
    --per_device_train_batch_size "$BATCH_SIZE" \
    --num_generations "$NUM_GENERATIONS" \
    --max_pixels "$MAX_PIXELS" \
    --output_dir "$OUTPUT_DIR" \
    "$@" 2>&1 | tee -a "$OUTPUT_DIR/train.log"
