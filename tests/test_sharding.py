"""The single-process parts of sharding: clipping by a global norm, and the stages a config may name.
(2-process stage-1 training is in test_distributed.py.)"""
import numpy as np
import paddle
import pytest

from paddle_r1.config import GRPOConfig
from paddle_r1.errors import ConfigError
from paddle_r1.trainer.sharding import clip_by_global_norm


def _layer_with_grads(seed: int):
    paddle.seed(seed)
    layer = paddle.nn.Sequential(paddle.nn.Linear(6, 5), paddle.nn.Linear(5, 3))
    x = paddle.to_tensor(np.random.default_rng(seed).normal(size=(4, 6)).astype("float32"))
    (layer(x) ** 2).sum().backward()
    return layer


@pytest.mark.parametrize("max_norm", [0.05, 1e6])
def test_clip_by_global_norm_is_paddles_clip(max_norm):
    ours, theirs = _layer_with_grads(3), _layer_with_grads(3)
    expected_norm = np.sqrt(sum(float((p.grad ** 2).sum()) for p in theirs.parameters()))
    norm = clip_by_global_norm(ours.parameters(), max_norm)
    assert norm == pytest.approx(expected_norm, rel=1e-6)
    paddle.optimizer.SGD(learning_rate=1.0, parameters=ours.parameters()).step()
    paddle.optimizer.SGD(learning_rate=1.0, parameters=theirs.parameters(),
                         grad_clip=paddle.nn.ClipGradByGlobalNorm(max_norm)).step()
    for a, b in zip(ours.parameters(), theirs.parameters()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-7)


def test_unknown_stage_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match="'sharding'.*stage3"):
        GRPOConfig(model_name_or_path="m", sharding="stage3")


def test_stage2_on_cpu_is_refused_before_loading(rec_jsonl):
    from paddle_r1.trainer.grpo import GRPOTrainer

    config = GRPOConfig(model_name_or_path="/nonexistent/model", data_path=rec_jsonl, device="cpu", sharding="stage2")
    with pytest.raises(ConfigError, match="stage2.*GPU/XPU only; on CPU use stage1"):
        GRPOTrainer(config)


def test_gradients_are_reduced_in_bounded_buckets_of_one_dtype():
    import paddle

    from paddle_r1.trainer.distributed import gradient_buckets

    grads = [paddle.zeros([256], dtype="float32"), paddle.zeros([256], dtype="float32"),
             paddle.zeros([1024], dtype="float32"), paddle.zeros([8], dtype="bfloat16"), paddle.zeros([8])]
    buckets = gradient_buckets(grads, bucket_bytes=2048)
    assert buckets == [[0, 1], [2], [3], [4]]
    assert [grads[b[0]].dtype for b in buckets][2:] == [paddle.bfloat16, paddle.float32]
