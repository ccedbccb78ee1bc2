"""paddle_r1: GRPO reinforcement fine-tuning of Qwen-VL models on PaddlePaddle."""
__version__ = "0.1.0"
