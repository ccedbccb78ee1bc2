"""Model loading (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, PaddleOCR-VL), the Qwen2-VL model, coordinate systems and shared
forward pieces."""
