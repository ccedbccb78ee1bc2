"""paddle_r1: GRPO reinforcement fine-tuning of Qwen-VL models on PaddlePaddle."""
from .cpu_math import choose_mkl_kernels

choose_mkl_kernels()  # before Paddle's first matrix product: see cpu_math.py
__version__ = "0.1.0"
