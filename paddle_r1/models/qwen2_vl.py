"""Qwen2-VL: PaddleFormers' Qwen2.5-VL text decoder under Qwen2-VL's own vision tower.

PaddleFormers 1.2.0 ships Qwen2-VL's processor but not its model. Qwen2-VL's language model is the same
M-RoPE decoder as Qwen2.5-VL's (and so are the rope index, placeholder mask and generation glue, all
inherited here). Only the vision tower is written; it differs from Qwen2.5-VL's by

- LayerNorm (eps 1e-6, with bias) instead of RMSNorm, in the blocks and in the patch merger;
- an fc1 -> QuickGELU -> fc2 MLP (``mlp_ratio`` x wide) instead of the gated SiLU MLP;
- full attention in every block, restricted to each image (video frame): no windows, no patch reordering.

Patch embedding, the 2D rotary embedding and the attention are Qwen2.5-VL's layers, reused. The text decoder is
Qwen2.5-VL's with paddle_r1's fast paths installed as there (``Qwen2_5_VLForConditionalGeneration.install_fast_paths``:
``text_attention.py``, whose sdpa branch holds causality after a KV cache, the RMSNorm, SwiGLU), so the rollout's
one-token decode step runs it too.

``config.json`` is read as published: flat text fields, and a ``vision_config`` whose ``embed_dim`` is the
tower's width and ``hidden_size`` the merger's output (the LLM width). Weights load from and save to the
published names (``visual.blocks.0.mlp.fc1.weight``, ``visual.merger.ln_q.bias``, ``model.layers.0...``,
``lm_head.weight``) through the name mappings (``_gen_aoa_config`` / ``_gen_inv_aoa_config``).
"""
from __future__ import annotations

import paddle
from paddle import nn
from paddleformers.nn.criterion.interface import CriterionLayer
from paddleformers.nn.lm_head import LMHead
from paddleformers.transformers import Qwen2_5_VLForConditionalGeneration as _PaddleFormersQwen2_5_VL
from paddleformers.transformers.activations import ACT2FN
from paddleformers.transformers.configuration_utils import PretrainedConfig
from paddleformers.transformers.qwen2_5_vl.configuration import Qwen2_5_VLTextConfig
from paddleformers.transformers.qwen2_5_vl.modeling import (
    Qwen2_5_VisionPatchEmbed,
    Qwen2_5_VisionRotaryEmbedding,
    Qwen2_5_VisionTransformerPretrainedModel,
    Qwen2_5_VLModel,
    Qwen2_5_VLTextModel,
    Qwen2_5_VLVisionAttention,
)

from .forward import recomputes_layers
from .qwen2_5_vl import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration


class Qwen2VLVisionConfig(PretrainedConfig):
    model_type = "qwen2_vl"
    base_config_key = "vision_config"
    # The inherited get_rope_index spaces video frames by second_per_grid_t * tokens_per_second.
    # Qwen2-VL advances one position per frame: that is 1 * 1, as its processor gives no second_per_grid_ts.
    tokens_per_second = 1

    def __init__(self, depth=32, embed_dim=1280, hidden_size=3584, hidden_act="quick_gelu", mlp_ratio=4,
                 num_heads=16, in_channels=3, patch_size=14, spatial_merge_size=2, temporal_patch_size=2,
                 initializer_range=0.02, **kwargs):
        in_channels = kwargs.pop("in_chans", in_channels)  # the published config.json spells it in_chans
        super().__init__(**kwargs)
        self.depth = depth
        self.embed_dim = embed_dim
        self.hidden_size = hidden_size
        self.hidden_act = hidden_act
        self.mlp_ratio = mlp_ratio
        self.num_heads = num_heads
        self.in_channels = in_channels
        self.patch_size = patch_size
        self.spatial_merge_size = spatial_merge_size
        self.temporal_patch_size = temporal_patch_size
        self.initializer_range = initializer_range


class Qwen2VLConfig(Qwen2_5_VLConfig):
    """Qwen2.5-VL's config (flat text fields become ``text_config``, saved flat again) with Qwen2-VL's vision
    config."""

    model_type = "qwen2_vl"
    sub_configs = {"vision_config": Qwen2VLVisionConfig, "text_config": Qwen2_5_VLTextConfig}


class Qwen2VLVisionAttention(Qwen2_5_VLVisionAttention):
    """Qwen2.5-VL's vision attention (forward inherited), sized by ``embed_dim``, the vision width here."""

    def __init__(self, config: Qwen2VLVisionConfig) -> None:
        nn.Layer.__init__(self)  # the parent sizes its layers by config.hidden_size, the LLM width in Qwen2-VL
        self.config = config
        self.dim = config.embed_dim
        self.num_heads = config.num_heads
        self.head_dim = self.dim // self.num_heads
        self.num_key_value_groups = 1
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = 0.0
        self.is_causal = False
        self.qkv = nn.Linear(self.dim, 3 * self.dim)
        self.proj = nn.Linear(self.dim, self.dim)


class Qwen2VLVisionMLP(nn.Layer):
    def __init__(self, dim: int, hidden_dim: int, hidden_act: str) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden_dim)
        self.act = ACT2FN[hidden_act]
        self.fc2 = nn.Linear(hidden_dim, dim)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class Qwen2VLVisionBlock(nn.Layer):
    def __init__(self, config: Qwen2VLVisionConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(config.embed_dim, epsilon=1e-6)
        self.norm2 = nn.LayerNorm(config.embed_dim, epsilon=1e-6)
        self.attn = Qwen2VLVisionAttention(config)
        self.mlp = Qwen2VLVisionMLP(config.embed_dim, int(config.embed_dim * config.mlp_ratio), config.hidden_act)

    # positional order as Qwen2.5-VL's blocks: the inherited recompute helper calls blocks that way
    def forward(self, hidden_states, cu_seqlens, rotary_pos_emb=None, position_embeddings=None, **kwargs):
        hidden_states = hidden_states + self.attn(
            self.norm1(hidden_states), cu_seqlens=cu_seqlens, position_embeddings=position_embeddings, **kwargs
        )
        return hidden_states + self.mlp(self.norm2(hidden_states))


class Qwen2VLPatchMerger(nn.Layer):
    """LayerNorm, then each group of merge x merge neighbouring patches concatenated and projected to the LLM width."""

    def __init__(self, dim: int, context_dim: int, spatial_merge_size: int) -> None:
        super().__init__()
        self.hidden_size = context_dim * spatial_merge_size**2
        self.ln_q = nn.LayerNorm(context_dim, epsilon=1e-6)
        self.mlp = nn.Sequential(nn.Linear(self.hidden_size, self.hidden_size), nn.GELU(),
                                 nn.Linear(self.hidden_size, dim))

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return self.mlp(self.ln_q(x).reshape([-1, self.hidden_size]))


class Qwen2VisionTransformer(Qwen2_5_VisionTransformerPretrainedModel):
    """Qwen2-VL's vision tower; ``rot_pos_emb`` and ``recompute_training_full`` are Qwen2.5-VL's."""

    config_class = Qwen2VLVisionConfig
    _no_split_modules = ["Qwen2VLVisionBlock"]

    def __init__(self, config: Qwen2VLVisionConfig) -> None:
        # skip Qwen2.5-VL's __init__ (it builds Qwen2.5-VL's blocks); initialise as a plain PretrainedModel
        super(Qwen2_5_VisionTransformerPretrainedModel, self).__init__(config)
        self.spatial_merge_size = config.spatial_merge_size
        self.patch_embed = Qwen2_5_VisionPatchEmbed(
            patch_size=config.patch_size, temporal_patch_size=config.temporal_patch_size,
            in_channels=config.in_channels, embed_dim=config.embed_dim,
        )
        self.rotary_pos_emb = Qwen2_5_VisionRotaryEmbedding(config.embed_dim // config.num_heads // 2)
        self.blocks = nn.LayerList([Qwen2VLVisionBlock(config) for _ in range(config.depth)])
        self.merger = Qwen2VLPatchMerger(config.hidden_size, config.embed_dim, config.spatial_merge_size)

    def forward(self, hidden_states: paddle.Tensor, grid_thw: paddle.Tensor) -> paddle.Tensor:
        hidden_states = self.patch_embed(hidden_states)
        angles = self.rot_pos_emb(grid_thw)
        angles = paddle.concat([angles, angles], axis=-1)
        position_embeddings = (angles.cos(), angles.sin())
        # patches attend only within their own image (video frame): cu_seqlens are the frames' bounds
        frame_sizes = paddle.repeat_interleave(grid_thw[:, 1] * grid_thw[:, 2], grid_thw[:, 0])
        cu_seqlens = paddle.concat([paddle.zeros([1], "int32"), frame_sizes.cumsum(axis=0).astype("int32")])
        for block in self.blocks:
            if self._recompute_blocks(hidden_states):
                hidden_states = self.recompute_training_full(block, hidden_states, cu_seqlens, None,
                                                             position_embeddings)
            else:
                hidden_states = block(hidden_states, cu_seqlens=cu_seqlens, position_embeddings=position_embeddings)
        return self.merger(hidden_states)

    def _recompute_blocks(self, hidden_states: paddle.Tensor) -> bool:
        """Full recompute per block, under the same config switches as Qwen2.5-VL's tower."""
        return not hidden_states.stop_gradient and recomputes_layers(self.config)


class Qwen2VLModel(Qwen2_5_VLModel):
    config_class = Qwen2VLConfig

    def __init__(self, config: Qwen2VLConfig) -> None:
        # skip Qwen2_5_VLModel.__init__ (it builds Qwen2.5-VL's vision tower); same attributes otherwise
        super(Qwen2_5_VLModel, self).__init__(config)
        self.visual = Qwen2VisionTransformer._from_config(config.vision_config)
        self.language_model = Qwen2_5_VLTextModel._from_config(config.text_config)
        self.rope_deltas = None


# published vision weight names, and whether each is a Linear weight (stored [out, in], Paddle keeps [in, out])
_VISION_WEIGHTS = [("patch_embed.proj.weight", False)] + [
    (f"blocks.$LAYER_ID.{layer}.{kind}", kind == "weight" and not layer.startswith("norm"))
    for layer in ("norm1", "norm2", "attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2")
    for kind in ("weight", "bias")
] + [
    (f"merger.{layer}.{kind}", kind == "weight" and layer != "ln_q")
    for layer in ("ln_q", "mlp.0", "mlp.2")
    for kind in ("weight", "bias")
]


class Qwen2VLForConditionalGeneration(Qwen2_5_VLForConditionalGeneration):
    config_class = Qwen2VLConfig

    def __init__(self, config: Qwen2VLConfig) -> None:
        # skip paddleformers' __init__ (it builds a Qwen2_5_VLModel); same parts, with Qwen2VLModel inside
        super(_PaddleFormersQwen2_5_VL, self).__init__(config)
        self.model = Qwen2VLModel(config)
        self.lm_head = LMHead(config.text_config)
        self.criterion = CriterionLayer(config.text_config)
        self.tie_weights()
        self.install_fast_paths()

    @classmethod
    def _gen_aoa_config(cls, config):
        """Published names -> Paddle names: the text part as Qwen2.5-VL's, the vision part Qwen2-VL's."""
        aoa = super()._gen_aoa_config(config)
        text = [s for s in aoa["aoa_statements"] if not s.startswith("visual.")]
        vision = [f"visual.{name}{'^T' if linear else ''} -> model.visual.{name}" for name, linear in _VISION_WEIGHTS]
        aoa["aoa_statements"] = text + vision
        return aoa

    @classmethod
    def _gen_inv_aoa_config(cls, config):
        """Paddle names -> published names, for save_pretrained."""
        aoa = super()._gen_inv_aoa_config(config)
        text = [s for s in aoa["aoa_statements"] if not s.startswith("model.visual.")]
        vision = [f"model.visual.{name}{'^T' if linear else ''} -> visual.{name}" for name, linear in _VISION_WEIGHTS]
        aoa["aoa_statements"] = text + vision
        return aoa
