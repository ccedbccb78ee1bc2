#!/usr/bin/env bash
# GRPO on referring expression comprehension (RefCOCO/+/g), 8 GPUs by default. Settings: scripts/common.sh.
#   bash scripts/run_grpo_rec.sh
#   MODEL_PATH=/models/Qwen2.5-VL-7B-Instruct OUTPUT_DIR=output/rec7b bash scripts/run_grpo_rec.sh --sharding stage1 --learning_rate 2e-6
#   GPUS=1 bash scripts/run_grpo_rec.sh --lora true     # one 40 GB GPU (AI Studio)
#   paddle-r1 estimate-memory --config configs/grpo_rec.yaml --gpus 8 --gpu_memory 80   # what fits, before launching
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=${CONFIG:-configs/grpo_rec.yaml}
MODEL_PATH=${MODEL_PATH:-Qwen/Qwen2.5-VL-3B-Instruct}
source scripts/common.sh
default_data REC/rec_jsons_processed/refcoco_train.json REC rec_jsons_processed/refcoco_train.json coco
NUM_GENERATIONS=${NUM_GENERATIONS:-8}
PER_DEVICE_BATCH_SIZE=${PER_DEVICE_BATCH_SIZE:-$NUM_GENERATIONS}  # completions per GPU: 1 prompt x NUM_GENERATIONS
MAX_PIXELS=${MAX_PIXELS:-1003520}  # 1280 image tokens; COCO images are smaller, so none is resized
OUTPUT_DIR=${OUTPUT_DIR:-output/grpo_rec}
launch_grpo "$@"
