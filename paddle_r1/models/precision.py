"""Which dtype, attention kernel and loss scaling a device can run, decided once at start-up.

bfloat16 is native from compute capability 8.0 (A100, H100); before that (V100 is 7.0, T4 7.5) Paddle
emulates it slowly, and its flash-attention kernel needs 8.0 too. Those GPUs get float16 with a dynamic
loss scaler (``paddle.amp.GradScaler``) instead: float16 has bfloat16's width but a small exponent range,
so small gradients underflow without scaling. GPUs older than 7.0 have no float16 tensor cores: float32.

Attention: paddleformers picks the kernel by ``config._attn_implementation`` ("eager" builds the full
[B, H, L, L] scores and a float32 softmax; "sdpa" calls ``paddle.nn.functional.scaled_dot_product_attention``,
which on GPU runs flash attention (sm80+, fp16/bf16) or memory-efficient attention (sm50+, any float dtype)
and only falls back to the same full-matrix math when neither applies). On CPU Paddle has no fused kernel:
"sdpa" runs that math fallback, equal to eager (tested), so the default there stays "eager", the path the
transformers parity fixtures were checked on.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

ATTENTION_IMPLEMENTATIONS = ("eager", "sdpa")
BF16_MIN_CAPABILITY = (8, 0)
FP16_MIN_CAPABILITY = (7, 0)


@dataclass(frozen=True)
class Precision:
    dtype: str
    attention: str
    grad_scaler: bool  # float16 training needs a loss scaler: paddle.amp.GradScaler
    reason: str  # one line for the start-up log

    def make_grad_scaler(self):
        """``paddle.amp.GradScaler`` for float16 (dynamic scaling, steps with inf/NaN gradients skipped), else None."""
        if not self.grad_scaler:
            return None
        import paddle

        return paddle.amp.GradScaler(init_loss_scaling=2.0**15)


def choose_precision(requested_dtype: str, capability: Optional[tuple], attention: Optional[str] = None) -> Precision:
    """The dtype, attention and loss scaling for a device. ``capability`` is the GPU's (major, minor) compute
    capability, None for CPU; ``attention`` is the config's ``attn_implementation`` (None: chosen here)."""
    if attention is not None and attention not in ATTENTION_IMPLEMENTATIONS:
        from ..errors import ConfigError

        raise ConfigError(f"config key 'attn_implementation': {attention!r} is not one of "
                          f"{', '.join(ATTENTION_IMPLEMENTATIONS)}")
    if capability is None:
        return Precision(requested_dtype, attention or "eager", False,
                         f"CPU: {requested_dtype}, {attention or 'eager'} attention (Paddle has no fused CPU kernel)")
    attention = attention or "sdpa"
    name = f"GPU sm{capability[0]}{capability[1]}"
    if requested_dtype == "bfloat16" and tuple(capability) < BF16_MIN_CAPABILITY:
        if tuple(capability) >= FP16_MIN_CAPABILITY:
            return Precision("float16", attention, True, f"{name} has no native bfloat16: float16 with a dynamic "
                             f"loss scaler instead; {attention} attention (flash attention needs sm80)")
        return Precision("float32", attention, False,
                         f"{name} has neither bfloat16 nor float16 tensor cores: float32; {attention} attention")
    return Precision(requested_dtype, attention, requested_dtype == "float16",
                     f"{name}: {requested_dtype}{' with a dynamic loss scaler' if requested_dtype == 'float16' else ''}"
                     f", {attention} attention")


def device_capability() -> Optional[tuple]:
    """(major, minor) of the current GPU, None when running on CPU."""
    import paddle

    if not paddle.get_device().startswith("gpu"):
        return None
    return tuple(paddle.device.cuda.get_device_capability())


def precision_for_this_device(requested_dtype: str, attention: Optional[str] = None) -> Precision:
    return choose_precision(requested_dtype, device_capability(), attention)
