"""Qwen2-VL's and Qwen2.5-VL's patch embedding as one matrix product on the CPU.

paddleformers' ``Qwen2_5_VisionPatchEmbed`` runs a bias-free ``conv3d`` whose kernel is its stride and the whole
patch (channels x 2 frames x 14 x 14): each output is one patch's row of pixels times one filter, i.e. rows
[patches, 1176] x weight [embed, 1176]^T. Paddle's CPU ``conv3d`` took 2.7 ms for the speed anchor's 128 patches
(a sixth of its vision tower's forward, which runs three times a GRPO step), the product a tenth of that. Values and
gradients equal the convolution's up to float32 summation order (tests/test_patch_embed.py). On a GPU the module
keeps paddleformers' convolution."""
from __future__ import annotations

import math

import paddle
from paddleformers.transformers.qwen2_5_vl.modeling import Qwen2_5_VisionPatchEmbed


class ProductPatchEmbed(Qwen2_5_VisionPatchEmbed):
    def forward(self, hidden_states: paddle.Tensor) -> paddle.Tensor:
        if not hidden_states.place.is_cpu_place():
            return super().forward(hidden_states)
        weight = self.proj.weight  # [embed, channels, frames, patch, patch]
        rows = hidden_states.astype(weight.dtype).reshape([-1, math.prod(weight.shape[1:])])
        return paddle.matmul(rows, weight.reshape([weight.shape[0], -1]), transpose_y=True)


def install_product_patch_embed(vision_tower) -> None:
    """Swap the tower's patch embedding class (same parameters) where it is paddleformers' Qwen2.5-VL one."""
    if type(vision_tower.patch_embed) is Qwen2_5_VisionPatchEmbed:
        vision_tower.patch_embed.__class__ = ProductPatchEmbed
