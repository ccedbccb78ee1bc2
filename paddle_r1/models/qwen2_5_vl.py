"""Qwen2.5-VL from paddleformers, with its published-layout save fixed.

paddleformers 1.2.0 loads published checkpoints (``model.layers.N.self_attn.q_proj.bias``) but its
inverse mapping, used by ``save_pretrained``, leaves the q/k/v biases under
``model.language_model.layers.N...``: the saved folder then fails to load. This subclass adds the
missing renames so every checkpoint paddle_r1 writes loads with ``from_pretrained`` as it is.
It also writes config.json flat, as published: a nested ``text_config`` does not load in transformers 4.51.
Its text attention runs ``text_attention.py``'s forward (M-RoPE tables merged once per forward, grouped heads), its
unfused RMSNorms ``rms_norm.py``'s, its gated MLPs Paddle's ``swiglu`` kernel (``swiglu.py``), its patch embedding one
product on the CPU (``patch_embed.py``), its vision attention ``vision_attention.py``'s on the CPU.
"""
from paddleformers.transformers import Qwen2_5_VLConfig as _PaddleFormersQwen2_5_VLConfig
from paddleformers.transformers import Qwen2_5_VLForConditionalGeneration as _PaddleFormersQwen2_5_VL

from .patch_embed import install_product_patch_embed
from .rms_norm import install_fast_rms_norm
from .swiglu import install_fused_swiglu
from .text_attention import install_fast_text_attention
from .vision_attention import install_fast_vision_attention


class Qwen2_5_VLConfig(_PaddleFormersQwen2_5_VLConfig):
    def to_dict(self, saving_file=False):
        """When saving, the published flat layout: the text fields at the top level, no ``text_config``.
        text_config's values win: the top-level copies from construction are not updated when a text field
        is set later."""
        output = super().to_dict(saving_file=saving_file)
        if saving_file and isinstance(output.get("text_config"), dict):
            text = output.pop("text_config")
            text.pop("model_type", None)
            output.update(text)
        return output


class Qwen2_5_VLForConditionalGeneration(_PaddleFormersQwen2_5_VL):
    config_class = Qwen2_5_VLConfig

    def __init__(self, config):
        super().__init__(config)
        self.install_fast_paths()

    def install_fast_paths(self) -> None:
        """paddle_r1's text attention, RMSNorm, SwiGLU, patch embedding and vision attention over paddleformers' (same
        parameters): Qwen2-VL's decoder, patch embedding and vision attention are these and take them too."""
        install_fast_text_attention(self.model.language_model)
        install_fast_rms_norm(self)
        install_fused_swiglu(self)
        install_product_patch_embed(self.model.visual)
        install_fast_vision_attention(self.model.visual)

    @classmethod
    def _gen_inv_aoa_config(cls, config):
        aoa = super()._gen_inv_aoa_config(config)
        aoa["aoa_statements"] += [
            f"model.language_model.layers.{i}.self_attn.{x}_proj.bias -> model.layers.{i}.self_attn.{x}_proj.bias"
            for i in range(config.text_config.num_hidden_layers)
            for x in "qkv"
        ]
        return aoa
