"""R1-V evaluation: SuperCLEVR counting (exact integer) and GeoQA (math-verify).

    python eval/test_r1-v.py --model_path output/grpo_counting --data_root data/ --image_root data/superclevr_200/ \
        --test_datasets superclevr_test200_counting_problems --batch_size 32 --seed 42
"""
import sys

from paddle_r1.evaluation.cli import main

if __name__ == "__main__":
    sys.exit(main("r1v"))
