"""The architecture fields of the published Qwen-VL checkpoints' config.json, by hub id.

They let ``paddle-r1 estimate-memory`` size a run offline, before anything is downloaded; a local model folder's
own config.json always wins. Values as in the published files (Qwen2.5-VL's vision ``hidden_size`` is the tower
width, Qwen2-VL's is the merger output and ``embed_dim`` the width).
"""
from __future__ import annotations

_QWEN2_5_VL_VISION = {"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16, "in_chans": 3,
                      "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "window_size": 112,
                      "fullatt_block_indexes": [7, 15, 23, 31], "hidden_act": "silu", "tokens_per_second": 2}
_QWEN2_VL_VISION = {"depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16, "in_chans": 3,
                    "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "hidden_act": "quick_gelu"}


def _config(model_type, hidden, intermediate, layers, heads, kv_heads, vocab, tied, vision):
    return {"model_type": model_type, "hidden_size": hidden, "intermediate_size": intermediate,
            "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv_heads,
            "vocab_size": vocab, "tie_word_embeddings": tied, "vision_config": vision}


# PaddlePaddle/PaddleOCR-VL's config.json (flat, as Qwen2/2.5-VL's): ERNIE-4.5-0.3B with 128-wide heads, SigLIP tower
_PADDLEOCR_VL = {"model_type": "paddleocr_vl", "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 18,
                 "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 128, "vocab_size": 103424,
                 "tie_word_embeddings": False,
                 "vision_config": {"hidden_size": 1152, "intermediate_size": 4304, "num_hidden_layers": 27,
                                   "num_attention_heads": 16, "image_size": 384, "patch_size": 14,
                                   "spatial_merge_size": 2, "temporal_patch_size": 1}}

PUBLISHED_CONFIGS = {
    "PaddlePaddle/PaddleOCR-VL": _PADDLEOCR_VL,
    "Qwen/Qwen2.5-VL-3B-Instruct": _config("qwen2_5_vl", 2048, 11008, 36, 16, 2, 151936, True,
                                           {**_QWEN2_5_VL_VISION, "out_hidden_size": 2048}),
    "Qwen/Qwen2.5-VL-7B-Instruct": _config("qwen2_5_vl", 3584, 18944, 28, 28, 4, 152064, False,
                                           {**_QWEN2_5_VL_VISION, "out_hidden_size": 3584}),
    "Qwen/Qwen2-VL-2B-Instruct": _config("qwen2_vl", 1536, 8960, 28, 12, 2, 151936, True,
                                         {**_QWEN2_VL_VISION, "hidden_size": 1536}),
    "Qwen/Qwen2-VL-7B-Instruct": _config("qwen2_vl", 3584, 18944, 28, 28, 4, 152064, False,
                                         {**_QWEN2_VL_VISION, "hidden_size": 3584}),
}
