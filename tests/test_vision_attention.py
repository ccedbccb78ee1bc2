"""models/vision_attention.py: the CPU vision attention computes what paddleformers' forward does, value and
gradient, over several images of different sizes (block-diagonal: each image's patches attend to their own)."""
import numpy as np
import paddle
from paddleformers.transformers.qwen2_5_vl.modeling import Qwen2_5_VLVisionAttention

from paddle_r1.models.vision_attention import FastVisionAttention


def test_installed_and_equal_to_paddleformers(tiny):
    model, _ = tiny
    visual = model.model.visual
    attention = visual.blocks[0].attn
    assert all(type(block.attn) is FastVisionAttention for block in visual.blocks)
    rng = np.random.default_rng(0)
    lengths = [16, 4, 36]  # three images' patches
    patches = sum(lengths)
    cu_seqlens = paddle.to_tensor(np.cumsum([0] + lengths), dtype="int32")
    hidden = paddle.to_tensor(rng.standard_normal([patches, attention.dim]).astype("float32"), stop_gradient=False)
    angles = rng.uniform(0, 20, [patches, attention.head_dim // 2]).astype("float32")
    angles = paddle.to_tensor(np.concatenate([angles, angles], axis=-1))
    weights = paddle.to_tensor(rng.standard_normal([patches, attention.dim]).astype("float32"))
    results = []
    for forward in (FastVisionAttention.forward, Qwen2_5_VLVisionAttention.forward):
        out = forward(attention, hidden, cu_seqlens, position_embeddings=(angles.cos(), angles.sin()))
        (out * weights).sum().backward()
        results.append((out.numpy(), hidden.grad.numpy().copy(), attention.qkv.weight.grad.numpy().copy()))
        hidden.clear_gradient()
        attention.clear_gradients()
    for fast, own in zip(*results):
        np.testing.assert_allclose(fast, own, rtol=1e-4, atol=1e-5)
    # each image attends to its own patches only: a change in the last image leaves the first's outputs alone
    changed = hidden.detach().clone()
    changed[-1] = changed[-1] + 1.0
    tables = (angles.cos(), angles.sin())
    moved = FastVisionAttention.forward(attention, changed, cu_seqlens, position_embeddings=tables)
    np.testing.assert_array_equal(moved.numpy()[:16], results[0][0][:16])
    assert not np.allclose(moved.numpy()[-36:], results[0][0][-36:])
