"""Qwen3-VL: why paddle_r1 does not load it yet (no paddle import here: tiny.py shares the message).

Tried on paddlepaddle 3.3.1 (CPU) + paddleformers 1.2.0 with a tiny Qwen3-VL config:

- ``Qwen3VLForConditionalGeneration`` (what paddleformers' auto classes pick for ``qwen3_vl``) is built on
  ``paddlefleet``, which paddleformers 1.2.0 does not install; the import fails.
- ``Qwen3VLForConditionalGenerationDeprecated`` (plain Paddle) runs forward and ``generate`` on CPU, but its
  vision tower returns DeepStack features besides the image embeddings, and the decoder adds them to the
  image positions of its first layers. The rollout and log-prob code computes input embeddings once
  (``forward.embed_inputs``) and then calls the model with ``inputs_embeds`` only, so the DeepStack
  features would be silently dropped. Supporting Qwen3-VL needs ``embed_inputs`` to carry
  ``visual_pos_masks`` and ``deepstack_visual_embeds`` through rollout (repeated per completion) and
  log-probs, and a reference to check it against (transformers 4.51 has no Qwen3-VL).
"""

QWEN3_VL_NOT_SUPPORTED = (
    "qwen3_vl is not supported yet: paddleformers 1.2.0's Qwen3VLForConditionalGeneration needs paddlefleet, "
    "and its plain-Paddle variant feeds DeepStack vision features into the first decoder layers, which "
    "paddle_r1's rollout and log-prob path (input embeddings computed once, then inputs_embeds) does not carry"
)
