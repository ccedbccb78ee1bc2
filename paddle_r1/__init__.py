"""paddle_r1: GRPO reinforcement fine-tuning of Qwen-VL models on PaddlePaddle."""
from .cpu_math import choose_mkl_kernels, keep_large_blocks_on_the_heap

choose_mkl_kernels()  # before Paddle's first matrix product: see cpu_math.py
keep_large_blocks_on_the_heap()
__version__ = "0.1.0"
