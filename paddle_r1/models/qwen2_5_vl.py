"""Qwen2.5-VL from paddleformers, with its published-layout save fixed.

paddleformers 1.2.0 loads published checkpoints (``model.layers.N.self_attn.q_proj.bias``) but its
inverse mapping, used by ``save_pretrained``, leaves the q/k/v biases under
``model.language_model.layers.N...``: the saved folder then fails to load. This subclass adds the
missing renames so every checkpoint paddle_r1 writes loads with ``from_pretrained`` as it is.
"""
from paddleformers.transformers import Qwen2_5_VLForConditionalGeneration as _PaddleFormersQwen2_5_VL


class Qwen2_5_VLForConditionalGeneration(_PaddleFormersQwen2_5_VL):
    @classmethod
    def _gen_inv_aoa_config(cls, config):
        aoa = super()._gen_inv_aoa_config(config)
        aoa["aoa_statements"] += [
            f"model.language_model.layers.{i}.self_attn.{x}_proj.bias -> model.layers.{i}.self_attn.{x}_proj.bias"
            for i in range(config.text_config.num_hidden_layers)
            for x in "qkv"
        ]
        return aoa
