"""OCR evaluation (PaddleOCR-VL and the other families): exact-match accuracy and the mean 1 - NED (text lines; with
--task table: TEDS accuracy and mean TEDS), greedy batched decoding.

    python eval/test_ocr.py --model_path output/grpo_ocr --data_root data/ --test_datasets ocr_val \
        --batch_size 32 [--task ocr|table] [--sample_num 500]

Each dataset is DATA_ROOT/NAME.jsonl (or .json) in any format the loader reads, e.g. ERNIEKit / PaddleFormers VL-SFT
jsonl ({image_info: [{image_url}], text_info: [{text: "OCR:", tag: mask}, {text: answer, tag: no_mask}]}). The task
comes from the dataset's name ("table" in it: tables) unless --task says; a model not trained here is asked the
prompt as it stands.
"""
import sys

from paddle_r1.evaluation.cli import main

if __name__ == "__main__":
    sys.exit(main("ocr"))
