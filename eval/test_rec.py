"""REC evaluation (RefCOCO/+/g, RefGTA): accuracy = IoU > 0.5 after coordinate conversion.

    python eval/test_rec.py --model_path output/grpo_rec/checkpoint-500 --data_root data/rec_jsons_processed \
        --image_root data/coco --test_datasets refcoco_val refcocop_val refcocog_val --batch_size 32 \
        --sample_num 500 --seed 42
"""
import sys

from paddle_r1.evaluation.cli import main

if __name__ == "__main__":
    sys.exit(main("rec"))
