"""The model sizes of paddle_r1's side of the speed anchor, defined once for the benchmarks that build it.

``ANCHOR_SIZE`` is the anchor's model (``grpo_step.py``): a 6.9M-parameter Qwen2.5-VL, hidden 256, 4 layers, vocab
4096, vision depth 2, the sizes ``trl_anchor/make_hf_tiny.py`` writes with transformers by default (that script runs
in the torch environment and keeps its own). ``decoder_size`` is the tiny model with a decoder of another width and
depth, for the benchmarks that take ``--hidden`` and ``--layers`` (``rollout.py``, ``episodes.py``, ``sharding.py``).
"""
from __future__ import annotations

from paddle_r1.testing.parts import TinySize

ANCHOR_SIZE = TinySize(hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=4,
                       num_key_value_heads=2, vision_hidden_size=128, vision_intermediate_size=256, vision_depth=2,
                       vocab_size=4096)


def decoder_size(hidden: int, layers: int) -> TinySize:
    """A decoder ``hidden`` wide and ``layers`` deep: MLP 4 x hidden, one query head per 32 of the width, 2 KV heads;
    the tiny model's default vision tower and vocabulary."""
    return TinySize(hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
                    num_attention_heads=hidden // 64 * 2, num_key_value_heads=2)
