"""models/patch_embed.py: the patch embedding as one product equals paddleformers' conv3d, value and gradient."""
import numpy as np
import paddle
from paddleformers.transformers.qwen2_5_vl.modeling import Qwen2_5_VisionPatchEmbed

from paddle_r1.models.patch_embed import ProductPatchEmbed


def test_installed_and_equal_to_the_convolution(tiny):
    model, _ = tiny
    embed = model.model.visual.patch_embed
    assert type(embed) is ProductPatchEmbed
    rng = np.random.default_rng(0)
    pixels = paddle.to_tensor(rng.standard_normal([12, embed.in_channels * embed.temporal_patch_size
                                                   * embed.patch_size ** 2]).astype("float32"))
    weights = paddle.to_tensor(rng.standard_normal([12, embed.embed_dim]).astype("float32"))
    results = []
    for forward in (ProductPatchEmbed.forward, Qwen2_5_VisionPatchEmbed.forward):
        out = forward(embed, pixels)
        (out * weights).sum().backward()
        results.append((out.numpy(), embed.proj.weight.grad.numpy().copy()))
        embed.proj.weight.clear_gradient()
    (product, product_grad), (conv, conv_grad) = results
    assert product.shape == conv.shape == (12, embed.embed_dim)
    np.testing.assert_allclose(product, conv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(product_grad, conv_grad, rtol=1e-5, atol=1e-4)
