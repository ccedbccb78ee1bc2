"""Model loading (Qwen2-VL, Qwen2.5-VL), the Qwen2-VL model, tiny checkpoints, coordinate systems and shared
forward pieces."""
