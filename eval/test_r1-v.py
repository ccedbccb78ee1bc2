"""R1-V evaluation: SuperCLEVR counting (exact integer) and GeoQA (math-verify).

    python eval/test_r1-v.py --model_path output/grpo_counting --data_root data/ --image_root data/superclevr_200/ \
        --test_datasets superclevr_test200_counting_problems --batch_size 32 --seed 42 [--protocol published]

--protocol paddle_r1 (default) scores with the training rewards; --protocol published scores counting the way
R1-V's and VLM-R1's eval scripts do (only <answer>\s*(\d+)\s*</answer> is read).
"""
import sys

from paddle_r1.evaluation.cli import main

if __name__ == "__main__":
    sys.exit(main("r1v"))
