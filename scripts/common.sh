# Shared by run_grpo_*.sh: settings the environment can override, the launch line, logs to OUTPUT_DIR.
#   GPUS=8                 GPUs per node; GPUS=0 (or no GPU on the machine) runs a CPU smoke run on a tiny model
#   CPU_RANKS=1            processes of the CPU smoke run (2: data parallel over gloo, e.g. with --sharding stage1)
#   NNODES=1 NODE_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500   multi-node, as paddle.distributed.launch takes them
#   MODEL_PATH DATA_PATH IMAGE_ROOT NUM_GENERATIONS MAX_PIXELS OUTPUT_DIR   the job
#   PER_DEVICE_BATCH_SIZE  completions per GPU and micro-step, TRL's per_device_train_batch_size: a multiple of
#                          NUM_GENERATIONS (prompts per GPU = PER_DEVICE_BATCH_SIZE / NUM_GENERATIONS), or a divisor
#                          (a group on NUM_GENERATIONS / PER_DEVICE_BATCH_SIZE consecutive GPUs, as PaddleMIX's 2 of 8)
#   BATCH_SIZE             completions per optimizer step over all GPUs, as in PaddleMIX's scripts: sets
#                          gradient_accumulation_steps = BATCH_SIZE / (PER_DEVICE_BATCH_SIZE x GPUS x NNODES);
#                          unset: the config's gradient_accumulation_steps
#   DATA_DIR=data          where the data was unpacked: PaddleMIX's tarballs (data/REC, data/Counting, data/GEO) or
#                          seed 001's separate downloads (data/coco, data/rec_jsons_processed, data/clevr_cogen_a_train)
#   SELFTEST=1             run `paddle-r1 selftest` first (a few minutes, on GPUS ranks; report in
#                          OUTPUT_DIR/selftest.json) and train only if no check fails; SELFTEST_ARGS adds its options
# Extra arguments are passed to `paddle-r1 train` (--key value overrides any config key).

GPUS=${GPUS:-8}
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
MASTER_PORT=${MASTER_PORT:-29500}
CPU_RANKS=${CPU_RANKS:-1}
PYTHON=${PYTHON:-python}

DATA_DIR=${DATA_DIR:-data}

# require_count NAME MIN [MAX [WHAT]]: NAME holds a whole number in [MIN, MAX], else one line naming it (and WHAT it
# counts) and exit 2: bash arithmetic reads CPU_RANKS=two as 0 and gives $((GPUS - 1)) = 0 for GPUS=0,1 (one GPU)
require_count() {
    local name=$1 min=$2 max=${3:-} value=${!1}
    if ! [[ "$value" =~ ^[0-9]+$ ]] || [ "$value" -lt "$min" ] || { [ -n "$max" ] && [ "$value" -gt "$max" ]; }; then
        echo "$name=$value: give a whole number from $min${max:+ to $max}${4:+ ($4)}" >&2
        exit 2
    fi
}
require_count GPUS 0 "" "GPUs per node, e.g. GPUS=4; CUDA_VISIBLE_DEVICES picks which"
require_count NNODES 1
require_count NODE_RANK 0 $((NNODES - 1))
require_count MASTER_PORT 1 65535
require_count CPU_RANKS 1 "" "processes of the CPU smoke run"
[ -z "${BATCH_SIZE:-}" ] || require_count BATCH_SIZE 1 "" "completions per optimizer step over all GPUs"

# default_data PATH ROOT [PATH ROOT]...: set DATA_PATH and IMAGE_ROOT (unless the environment did) to the first pair
# whose PATH exists under DATA_DIR (ROOT "" is DATA_DIR itself): PaddleMIX's unpacked tarball first, then the separate
# downloads. When none exists, the first pair, so that the error names the tarball's layout.
default_data() {
    local path=$1 root=$2
    while [ $# -ge 2 ]; do
        if [ -e "$DATA_DIR/$1" ]; then path=$1 root=$2; break; fi
        shift 2
    done
    DATA_PATH=${DATA_PATH:-$DATA_DIR/$path}
    IMAGE_ROOT=${IMAGE_ROOT:-$DATA_DIR${root:+/$root}}
}

has_gpu() {
    [ "$GPUS" != "0" ] && "$PYTHON" -c "import paddle, sys; sys.exit(0 if paddle.device.cuda.device_count() > 0 else 1)" 2>/dev/null
}

# --gradient_accumulation_steps for a global BATCH_SIZE (PaddleMIX's meaning), or nothing when it is unset.
accumulation_for_batch_size() {
    [ -z "${BATCH_SIZE:-}" ] && return 0
    local per_step=$((PER_DEVICE_BATCH_SIZE * GPUS * NNODES))
    if [ $((BATCH_SIZE % per_step)) -ne 0 ]; then
        echo "BATCH_SIZE=$BATCH_SIZE (completions per optimizer step) is not a multiple of PER_DEVICE_BATCH_SIZE x GPUS x NNODES = $per_step" >&2
        return 1
    fi
    echo "--gradient_accumulation_steps $((BATCH_SIZE / per_step))"
}

# SELFTEST=1: this machine's GPU paths on tiny models before the job; a failed check stops here, naming the report.
run_selftest() {
    [ "${SELFTEST:-0}" = "1" ] || return 0
    local ranks=2
    has_gpu && ranks=$GPUS
    echo "selftest before training (SELFTEST=1), $ranks ranks: report in $OUTPUT_DIR/selftest.json"
    if ! "$PYTHON" scripts/grpo_entry.py selftest --output "$OUTPUT_DIR/selftest.json" --nproc "$ranks" \
            ${SELFTEST_ARGS:-} 2>&1 | tee -a "$OUTPUT_DIR/train.log"; then
        echo "selftest failed: not training. Each FAIL line above says what to do; send $OUTPUT_DIR/selftest.json" \
            "with a bug report" >&2
        exit 1
    fi
}

launch_grpo() {
    mkdir -p "$OUTPUT_DIR"
    run_selftest
    local job=(--config "$CONFIG" --output_dir "$OUTPUT_DIR")
    if has_gpu; then
        local accumulation
        accumulation=$(accumulation_for_batch_size) || exit 2
        local launch=(--devices "$(seq -s, 0 $((GPUS - 1)))" --log_dir "$OUTPUT_DIR/launch_logs")
        if [ "$NNODES" -gt 1 ]; then
            launch+=(--nnodes "$NNODES" --rank "$NODE_RANK" --master "$MASTER_ADDR:$MASTER_PORT")
        fi
        echo "GRPO on $NNODES node(s) x $GPUS GPU(s), $PER_DEVICE_BATCH_SIZE completions per GPU (groups of $NUM_GENERATIONS): $CONFIG on $DATA_PATH (images: $IMAGE_ROOT) -> $OUTPUT_DIR"
        "$PYTHON" -m paddle.distributed.launch "${launch[@]}" scripts/grpo_entry.py train "${job[@]}" \
            --model_name_or_path "$MODEL_PATH" --data_path "$DATA_PATH" --image_root "$IMAGE_ROOT" \
            --per_device_train_batch_size "$PER_DEVICE_BATCH_SIZE" --num_generations "$NUM_GENERATIONS" $accumulation \
            --max_pixels "$MAX_PIXELS" "$@" 2>&1 | tee -a "$OUTPUT_DIR/train.log"
    else
        local ranks=$CPU_RANKS runner=("$PYTHON")
        [ "$ranks" -gt 1 ] && runner+=(-m paddle.distributed.launch --nproc_per_node "$ranks" --log_dir "$OUTPUT_DIR/launch_logs")
        echo "no GPU (GPUS=$GPUS): CPU smoke run of $CONFIG on a tiny model, $ranks process(es) -> $OUTPUT_DIR"
        echo "(synthetic data in place of $DATA_PATH, images: $IMAGE_ROOT)"
        local tiny="$OUTPUT_DIR/tiny-model"
        [ -f "$tiny/config.json" ] || "$PYTHON" scripts/grpo_entry.py make-tiny-model "$tiny" > /dev/null
        "${runner[@]}" scripts/grpo_entry.py train "${job[@]}" --model_name_or_path "$tiny" \
            --dataset_name synthetic_rec --data_path null --image_root null --reward_funcs "[format, iou]" \
            --reward_weights null --reward_kwargs "{}" --device cpu --dtype float32 --max_steps 2 \
            --per_device_train_batch_size 2 --num_generations 2 --max_completion_length 16 --max_pixels 12544 \
            --min_pixels 3136 --save_steps 2 --use_visualdl false "$@" 2>&1 | tee -a "$OUTPUT_DIR/train.log"
    fi
}
