"""Which dtype, attention kernel and loss scaling a device can run, decided once at start-up.

bfloat16 is native from compute capability 8.0 (A100, H100); before that (V100 is 7.0, T4 7.5) Paddle
emulates it slowly, and its flash-attention kernel needs 8.0 too. Those GPUs train in float16, and float16 training
(chosen for them, or asked for with ``dtype: float16`` on any GPU) is Paddle's own mixed-precision recipe, not
float16 weights: the weights stay float32 and the forward passes run under ``paddle.amp.auto_cast(level="O1",
dtype="float16")``, which casts only Paddle's white-listed products (matmul, linear, conv, flash attention) to float16
and keeps the numerically dangerous operations (exp, log, softmax, reductions, rsqrt: ``paddle/amp/amp_lists.py``) in
float32; gradients go through a dynamic loss scaler (``paddle.amp.GradScaler``: float16's small exponent range
underflows small gradients). That is PaddleFormers' ``Trainer`` default for ``fp16`` (``fp16_opt_level`` "O1"). The
reason not to hold the weights in float16 (level O2): the Qwen2 family's residual stream holds activations in the
thousands, whose squares and sums overflow float16's 65,504 (NaN losses, then sampling from NaN logits); under O1 the
residual adds and norms see a float32 operand and run in float32. The cost: float32 weights take twice the memory
(``paddle-r1 estimate-memory`` counts them). On CPU Paddle's ``auto_cast`` casts nothing, so this recipe has only run
where a user's ``paddle-r1 selftest`` ran it. GPUs older than 7.0 have no float16 tensor cores: float32.

Attention: paddleformers picks the kernel by ``config._attn_implementation`` ("eager" builds the full
[B, H, L, L] scores and a float32 softmax; "sdpa" calls ``paddle.nn.functional.scaled_dot_product_attention``,
which on GPU runs flash attention (sm80+, fp16/bf16) or memory-efficient attention (sm50+, any float dtype)
and only falls back to the same full-matrix math when neither applies). On CPU Paddle has no fused kernel:
"sdpa" runs that math fallback, equal to eager (tested), so the default there stays "eager", the path the
transformers parity fixtures were checked on.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Optional

ATTENTION_IMPLEMENTATIONS = ("eager", "sdpa")
BF16_MIN_CAPABILITY = (8, 0)
FP16_MIN_CAPABILITY = (7, 0)


@dataclass(frozen=True)
class Precision:
    dtype: str  # the weights'
    attention: str
    grad_scaler: bool  # float16 training needs a loss scaler: paddle.amp.GradScaler
    reason: str  # one line for the start-up log
    autocast: Optional[str] = None  # "float16": the forward passes under Paddle's O1 auto_cast (module docstring)

    def compute(self):
        """The context the forward passes (rollout, log-probs, loss) run in: Paddle's O1 auto_cast for float16
        training, else nothing. Backward and the optimizer step run outside it, as in Paddle's AMP examples. Entering
        it also records float16 as Paddle's amp dtype, which ``GradScaler.scale`` reads: it switches dynamic loss
        scaling off for any other amp dtype (Paddle 3.3.1), so the scaler works because the forward ran in here."""
        if self.autocast is None:
            return contextlib.nullcontext()
        import paddle

        return paddle.amp.auto_cast(enable=True, dtype=self.autocast, level="O1")

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
    mixed = (f"float32 weights, float16 products (Paddle's O1 auto_cast) and a dynamic loss scaler; {attention} "
             "attention")
    if requested_dtype == "bfloat16" and tuple(capability) < BF16_MIN_CAPABILITY:
        if tuple(capability) >= FP16_MIN_CAPABILITY:
            return Precision("float32", attention, True, f"{name} has no native bfloat16: {mixed} (flash attention "
                             "needs sm80)", autocast="float16")
        return Precision("float32", attention, False,
                         f"{name} has neither bfloat16 nor float16 tensor cores: float32; {attention} attention")
    if requested_dtype == "float16":
        return Precision("float32", attention, True, f"{name}: float16 asked for: {mixed}", autocast="float16")
    return Precision(requested_dtype, attention, False, f"{name}: {requested_dtype}, {attention} attention")


def device_capability() -> Optional[tuple]:
    """(major, minor) of the current GPU, None when running on CPU."""
    import paddle

    if not paddle.get_device().startswith("gpu"):
        return None
    return tuple(paddle.device.cuda.get_device_capability())


def precision_for_this_device(requested_dtype: str, attention: Optional[str] = None) -> Precision:
    return choose_precision(requested_dtype, device_capability(), attention)


def check_dtype_runs_here(requested_dtype: str) -> None:
    """A run's ``dtype`` refused before any model loads where Paddle cannot run it: on CPU, 16-bit floats stop at the
    vision tower's patch embedding (no bfloat16 or float16 conv3d kernel; conv2d in PaddleOCR-VL), which would
    otherwise fail at the first rollout, after the model loaded."""
    if requested_dtype != "float32" and device_capability() is None:
        from ..errors import ConfigError

        raise ConfigError(f"config key 'dtype': {requested_dtype} does not run on a CPU: Paddle's CPU build has no "
                          f"{requested_dtype} convolution for the vision tower's patch embedding; use dtype float32 "
                          "on a CPU (bfloat16 and float16 are for GPUs)", keys=("dtype",))
