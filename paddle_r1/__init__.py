"""paddle_r1: GRPO reinforcement fine-tuning of Qwen-VL models on PaddlePaddle.

Importing it changes nothing in the process: the CPU settings (``cpu_math.tune_cpu_math``), the libraries' log
levels (``quiet``) and the reward workers are made by the commands and jobs that need them."""
__version__ = "0.1.0"
