"""Video evaluation: temporal grounding (Charades-STA layout: R1@0.3 / 0.5 / 0.7 and mIoU) and video QA (Video-R1's
eval json: accuracy, and the mean video_r1_accuracy per problem type), greedy batched decoding.

    python eval/test_video.py --model_path output/grpo_charades --data_root data/ --image_root data/Charades_v1 \
        --test_datasets charades_sta_test --batch_size 8 [--video_max_frames 32] [--task grounding|video_qa]

Each dataset is DATA_ROOT/NAME.json (or .jsonl): Charades-STA rows ({video, duration, timestamp, sentence}) or
Video-R1's eval rows ({problem, data_type, problem_type, options, solution, path}); the task comes from the file's
fields unless --task says. Clips are sampled with the checkpoint's training settings unless the --video_* options
say; a model not trained here is asked with Video-R1's eval prompt (video QA) or the training default (grounding).
"""
import sys

from paddle_r1.evaluation.cli import main

if __name__ == "__main__":
    sys.exit(main("video"))
