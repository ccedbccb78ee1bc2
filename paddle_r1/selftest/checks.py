"""The checks that exercise one model in this process: each takes the ``Workspace`` and returns the one-line figure
it measured, or raises (``Skip`` when it does not apply, ``CheckFailed`` when a measurement is out of bounds).

Each runs in the machine's precision (``Machine.precision``: on a GPU what training would choose for the requested
dtype, float32 on CPU) and compares within that dtype's ``Tolerance``.
"""
from __future__ import annotations

import collections
import contextlib
import logging

import numpy as np

from ..models.families import FAMILIES, QWEN3_VL
from .tolerances import (CheckFailed, largest_change, max_abs_difference, relative_difference, relative_to_largest,
                         within)

CHUNK = 64  # log-prob chunk: the tiny rollouts' tokens in one piece
OVERFLOW = 1e6  # a loss factor whose float16 gradients overflow at GradScaler's initial scale (2^15)
ADAPTER_STD = 1.0  # LoRA B's values (paddleformers starts it at zero): adapters that visibly move the log-probs


def _as_float32(tensor) -> np.ndarray:
    return tensor.astype("float32").numpy()


def _logprobs(model, rollout, backward: bool = False):
    """(masked per-token log-probs [rows, T], {name: gradient} when ``backward``) through the trainer's log-probs."""
    from ..algorithms.logprobs import completion_logprobs

    mask = rollout.completion_mask.astype("float32")
    logp = completion_logprobs(model, rollout, CHUNK).astype("float32") * mask
    if not backward:
        return logp.numpy(), {}
    logp.sum().backward()
    return logp.numpy(), {name: _as_float32(p.grad) for name, p in model.named_parameters() if p.grad is not None}


def environment(ws) -> str:
    """Paddle's build, the GPUs and paddleformers (in the report's ``environment``), and on a GPU the precision the
    trainer would choose: ``precision_for_this_device`` reads the compute capability as training does, and must
    agree with the capability ``get_device_properties`` reports."""
    from ..models.precision import precision_for_this_device

    env, machine = ws.machine.environment, ws.machine
    paddle_build = env["paddle"]
    if machine.gpus:
        requested = env["precision"]["requested"]
        chosen = precision_for_this_device(requested)
        if chosen != machine.precision:
            raise CheckFailed(f"precision_for_this_device({requested!r}) chose {chosen}, but the capability "
                              f"get_device_properties reports gives {machine.precision}")
        kinds = collections.Counter(f"{g['name']} (sm{g['capability'].replace('.', '')}, {g['memory_gib']:g} GiB)"
                                    for g in env["gpus"])
        device = (f"CUDA {paddle_build['cuda']}, cuDNN {paddle_build['cudnn']}, "
                  + ", ".join(f"{n} x {kind}" for kind, n in kinds.items()))
    else:
        device = "CPU build" if not paddle_build["compiled_with_cuda"] else "CUDA build, no GPU visible"
    return (f"Paddle {paddle_build['version']} ({device}), paddleformers {env['paddleformers']}; "
            f"{machine.precision.reason}")


def _loss_scale(scaler) -> float:
    return float(np.asarray(scaler.state_dict()["scale"]).reshape(-1)[0])


def training_step(ws) -> str:
    """A forward (the vision tower included), backward and AdamW step through the trainer's own optimizer and update
    (``build_optimizer``, ``build_update``, ``Precision.make_grad_scaler``) in this machine's precision: bfloat16
    on sm80+, float32 weights under float16 O1 auto_cast with ``paddle.amp.GradScaler`` on sm70-75 (or ``--dtype
    float16``), float32 on CPU. Under
    float16 a first step's gradients are made to overflow (the loss times 1e6): it must be skipped, the weights left
    as they were and the loss scale lowered."""
    from ..config.jobs import GRPOConfig
    from ..algorithms.logprobs import completion_logprobs
    from ..trainer.optim import build_optimizer
    from ..parallel.sharding import build_update

    model, processor = ws.load()
    rollout = ws.rollout(model, processor)
    config = GRPOConfig(model_name_or_path=ws.tiny_model(), dtype=ws.dtype, learning_rate=1e-3)
    optimizer, _ = build_optimizer([p for p in model.parameters() if not p.stop_gradient], config, 2, clip=False)
    update = build_update("", optimizer, model, config.max_grad_norm, 1)
    scaler = update.wrap_scaler(ws.machine.precision.make_grad_scaler())
    mask = rollout.completion_mask.astype("float32")

    def weights() -> dict:
        return {name: _as_float32(p) for name, p in model.named_parameters()}

    before = weights()

    def step(loss_factor: float):
        loss = -(completion_logprobs(model, rollout, CHUNK).astype("float32") * mask).sum() / mask.sum() * loss_factor
        (scaler.scale(loss) if scaler is not None else loss).backward()
        vision = [_as_float32(p.grad) for name, p in model.named_parameters()
                  if "visual" in name and p.grad is not None]
        norm, applied = update.step(True, scaler)
        update.clear_grad()
        return float(loss), norm, applied, vision

    figure = [f"{ws.dtype}"]
    if scaler is not None:
        scale = _loss_scale(scaler)
        _, _, applied, _ = step(OVERFLOW)
        lowered = _loss_scale(scaler)
        if applied or largest_change(weights(), before) != 0:
            raise CheckFailed("a step whose float16 gradients overflowed changed the weights")
        if not lowered < scale:
            raise CheckFailed(f"the loss scale stayed {scale:g} after a step whose gradients overflowed: every "
                              "overflowing step would be skipped at the same scale")
        figure.append(f"GradScaler: overflowing step skipped, scale {scale:g} -> {lowered:g}")
    loss, norm, applied, vision = step(1.0)
    if not (applied and np.isfinite(loss)):
        raise CheckFailed(f"the step was not applied: loss {loss}, gradient norm {norm}")
    if not vision or not all(np.isfinite(g).all() for g in vision) or not any(np.abs(g).max() > 0 for g in vision):
        raise CheckFailed("the vision tower's gradients are missing, zero or not finite")
    moved = largest_change(weights(), before)
    dtypes = {str(p.dtype).split(".")[-1] for p in model.parameters()}
    if not (0 < moved and np.isfinite(moved)) or dtypes != {ws.dtype}:
        raise CheckFailed(f"after the step the weights moved by {moved} and are {sorted(dtypes)}")
    figure.append(f"loss {loss:.3f}, gradient norm {norm:.3g}, {len(vision)} vision tower gradients finite, "
                  f"weights moved up to {moved:.2g} and stay {ws.dtype}")
    return "; ".join(figure)


class _SdpaLog(logging.Handler):
    """Paddle's ``scaled_dot_product_attention`` says which kernel it picked, and why it refused the others, only in
    debug messages of its module's logger: this handler counts the picks and keeps the refusals."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.kernels = collections.Counter()
        self.refusals: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("Selected backend:"):
            self.kernels[message.split(":", 1)[1].strip()] += 1
        elif message not in self.refusals:
            self.refusals.append(message)


@contextlib.contextmanager
def sdpa_kernels():
    """Within the block, Paddle's sdpa logger reports to a ``_SdpaLog`` only (its own handler would print every
    debug line); restored after."""
    logger = logging.getLogger("paddle.nn.functional.sdpa")
    saved = logger.level, logger.handlers[:]
    log = _SdpaLog()
    logger.handlers, logger.level = [log], logging.DEBUG
    try:
        yield log
    finally:
        logger.level, logger.handlers = saved


FUSED_KERNELS = ("flash_attn", "mem_efficient")


def attention(ws) -> str:
    """``sdpa`` (Paddle's ``scaled_dot_product_attention``, on the text decoder and the vision tower) against
    ``eager`` on the same rollouts: log-probs and every gradient of two prompts of different image sizes (a
    left-padded batch: sdpa gets paddleformers' mask), and the log-probs of one prompt alone. Alone it has no padding,
    as with one prompt per device: paddleformers then drops the mask and the completions, which attend to the
    prompt's KV cache, need causality aligned bottom-right (``models/causal_mask.py``); Paddle's own ``is_causal``
    aligns it top-left. On a GPU Paddle must pick a fused kernel (flash attention on sm80+ in 16-bit,
    memory-efficient attention from sm50) for some calls; on CPU it has only its math fallback. The figure counts
    the kernels Paddle picked."""
    eager, processor = ws.load(attention="eager")
    fused, _ = ws.load(attention="sdpa")
    padded, alone = ws.rollout(eager, processor), ws.rollout(eager, processor, prompts=1)
    with sdpa_kernels() as log:
        got, got_grads = _logprobs(fused, padded, backward=True)
        got_alone = _logprobs(fused, alone)[0]
    want, want_grads = _logprobs(eager, padded, backward=True)
    picked = ", ".join(f"{kernel} x {n}" for kernel, n in log.kernels.items()) or "no call"
    if ws.machine.gpus and not any(kernel in log.kernels for kernel in FUSED_KERNELS):
        raise CheckFailed(f"Paddle ran sdpa's math fallback for every call on this GPU ({picked}); it said: "
                          + " | ".join(log.refusals[:4]))
    if sorted(got_grads) != sorted(want_grads):
        raise CheckFailed(f"sdpa and eager give gradients to different weights: "
                          f"{sorted(set(got_grads) ^ set(want_grads))[:4]}")
    limit = ws.tolerance.logprobs
    figure = [f"sdpa kernels: {picked}", within("log-probs vs eager (2 padded prompts)", max_abs_difference(got, want),
                                                limit)]
    alone_off = max_abs_difference(got_alone, _logprobs(eager, alone)[0])
    if not alone_off <= limit:
        raise CheckFailed(f"one prompt without padding (what each device holds with one prompt per device): sdpa's "
                          f"log-probs are {alone_off:.2g} nats from eager's (limit {limit:.0e}). Its completions "
                          "attend to the prompt's KV cache with the wrong causality, so under sdpa the policy's, old "
                          "policy's and reference's log-probs, and the loss, are wrong on this machine")
    names = sorted(want_grads)
    return "; ".join(figure + [within("log-probs vs eager (1 unpadded prompt)", alone_off, limit),
                               within("gradients", relative_difference([got_grads[n] for n in names],
                                                                       [want_grads[n] for n in names]),
                                      ws.tolerance.gradients)])


def _prefilled_decoders(model, prompt, generations: int, steps: int, *classes) -> list:
    """A decoder of each of ``classes`` over ``prompt`` prefilled once, each prompt's cache rows repeated for
    ``generations`` completions, with room for ``steps`` tokens (each decoder copies the cache into its own)."""
    from ..generation.rollout import prefill
    from ..models.forward import RepeatedPrompt, repeat_rows

    cache, _, next_position = prefill(model, prompt)
    mask, next_position = repeat_rows(prompt.attention_mask, generations), repeat_rows(next_position, generations)
    return [cls(model, RepeatedPrompt(cache, generations), mask, next_position, steps) for cls in classes]


def one_token_decode(ws) -> str:
    """The rollout's one-token decode step (``OneTokenDecoder``: plain tensor operations over the decoder's weights,
    as stored on a GPU, copied transposed on CPU) against the model's own layers (``LayerDecoder``), fed the same
    tokens over the same prefilled prompts: the next-token logits of every step, for the tiny model of every family
    the step runs (Qwen3-VL's query and key norms, ERNIE-4.5's separate products included; a family whose extra
    package is missing is named and left out)."""
    import paddle

    from ..generation.decoder import ONE_TOKEN_RUNS, LayerDecoder, OneTokenDecoder, supports

    generations, steps = 2, 6
    found = []
    for family in (f for f in FAMILIES.values() if f.one_token_attention is not None):
        missing = [need for need in family.requirements if not need.installed]
        if missing:
            found.append(f"{family.title} not run: {missing[0].package} is not installed ({missing[0].install})")
            continue
        model, processor = ws.load(family.model_type)
        model.eval()
        if not supports(model):
            raise CheckFailed(f"OneTokenDecoder does not take the tiny {family.title} as loaded here; it "
                              f"{ONE_TOKEN_RUNS}")
        prompt = ws.prompts(processor)
        rows = prompt.size * generations
        tokens = paddle.to_tensor(np.random.default_rng(0).integers(0, 100, [rows, steps]))
        with paddle.no_grad():
            layers, one_token = _prefilled_decoders(model, prompt, generations, steps, LayerDecoder, OneTokenDecoder)
            worst = max(relative_to_largest(_as_float32(one_token.step(tokens[:, i])),
                                            _as_float32(layers.step(tokens[:, i])))
                        for i in range(steps))
        found.append(f"{family.title}, {steps} steps x {rows} rows: "
                     + within("logits vs the layers' (relative to the largest)", worst, ws.tolerance.logits))
    return "; ".join(found)


def cuda_graph_decode(ws) -> str:
    """The one-token decode step replayed as CUDA graphs (``rollout_cuda_graphs``: ``cuda_graphs.GraphedDecoder``)
    against the same step run eagerly, fed the same tokens over the same prefilled prompts for two cache blocks and
    more (a capture per block): every step's logits, no check inside the decoder turning the graphs off, every step
    after a block's first replayed; and the milliseconds a step takes each way."""
    import time

    import paddle

    from ..generation.cuda_graphs import GraphedDecoder, graphs_off
    from ..generation.decoder import OneTokenDecoder
    from ..generation.kv_cache import GROWTH

    generations, steps = 2, 2 * GROWTH + 8
    model, processor = ws.load()
    model.eval()
    prompt = ws.prompts(processor)
    rows = prompt.size * generations
    tokens = paddle.to_tensor(np.random.default_rng(0).integers(0, 100, [rows, steps]))
    with paddle.no_grad():
        eager, graphed = _prefilled_decoders(model, prompt, generations, steps, OneTokenDecoder, OneTokenDecoder)
        graphed, worst, seconds = GraphedDecoder(graphed), 0.0, {"eager": 0.0, "graphs": 0.0}
        synchronize = paddle.device.synchronize if ws.machine.gpus else (lambda: None)
        for i in range(steps):
            got = {}
            for name, decoder in (("eager", eager), ("graphs", graphed)):
                synchronize()
                start = time.perf_counter()
                got[name] = _as_float32(decoder.step(tokens[:, i]))
                seconds[name] += time.perf_counter() - start
            worst = max(worst, relative_to_largest(got["graphs"], got["eager"]))
    if graphs_off() is not None:
        raise CheckFailed(f"the decoder turned its CUDA graphs off: {graphs_off()}")
    blocks = graphed.cache.blocks
    if graphed.replays != steps:  # each block's capture replayed once, every other step replayed
        raise CheckFailed(f"{graphed.replays} of {steps} steps replayed a graph ({blocks} cache blocks)")
    per_step = {name: 1e3 * total / steps for name, total in seconds.items()}
    return (f"{steps} steps x {rows} rows, {blocks} graphs: "
            + within("logits vs the eager step's (relative to the largest)", worst, ws.tolerance.logits)
            + f"; {per_step['graphs']:.2f} ms a step against {per_step['eager']:.2f} eager (both with the host's "
            "reads of the logits)")


def lora_merge(ws) -> str:
    """LoRA adapters (non-zero) on the decoder, then the checkpoint's model folder: the merged weights, computed on
    the host from the device's tensors (``merged_state_dict``), saved and loaded back as a plain model, give the
    adapted model's log-probs; the ``adapter/`` folder loaded into a fresh LoRA model gives them too."""
    import paddle

    from ..config.jobs import GRPOConfig
    from ..models.loading import load_model
    from ..models.lora import ADAPTER_DIR, apply_lora, load_adapter, lora_layers, write_model_folder

    rank, alpha = 4, 8.0
    adapted, processor = ws.load()
    paddle.seed(0)  # LoRA A's random start: the same figures run after run
    apply_lora(adapted, rank, alpha)
    rng = np.random.default_rng(0)
    for layer in lora_layers(adapted).values():
        values = paddle.to_tensor(rng.normal(0, ADAPTER_STD, layer.lora_B.shape).astype("float32"))
        layer.lora_B.set_value(values.astype(layer.lora_B.dtype))
    rollout = ws.rollout(adapted, processor)
    want = _logprobs(adapted, rollout)[0]
    folder = ws.path("lora-checkpoint")
    write_model_folder(adapted, folder, GRPOConfig(model_name_or_path=ws.tiny_model(), dtype=ws.dtype, lora=True,
                                                   lora_rank=rank, lora_alpha=alpha))
    merged = load_model(folder, dtype=ws.dtype, attn_implementation=ws.machine.precision.attention)
    fresh, _ = ws.load()
    base = _logprobs(fresh, rollout)[0]
    apply_lora(fresh, rank, alpha)
    load_adapter(fresh, f"{folder}/{ADAPTER_DIR}")
    effect = max_abs_difference(base, want)
    distances = {"merged folder vs adapted": max_abs_difference(_logprobs(merged, rollout)[0], want),
                 f"{ADAPTER_DIR}/ reloaded": max_abs_difference(_logprobs(fresh, rollout)[0], want)}
    if not effect > 10 * max(distances.values()):
        raise CheckFailed(f"the adapters move the log-probs by {effect:.2g}, not ten times more than the reloaded "
                          f"models differ from the adapted one: {distances}")
    return "; ".join([f"adapters move log-probs by {effect:.2g}"]
                     + [within(what, distance, ws.tolerance.logprobs) for what, distance in distances.items()])


def qwen3_vl(ws) -> str:
    """A tiny Qwen3-VL (DeepStack, 32-pixel tokens) on this device: its rollout's log-probs (DeepStack features
    through the full forward) equal the model's own forward over prompt + completion, and their backward reaches
    every vision weight, DeepStack mergers included, with finite gradients."""
    import paddle

    model, processor = ws.load(QWEN3_VL.model_type)
    rollout = ws.rollout(model, processor)
    got, grads = _logprobs(model, rollout, backward=True)
    prompt, generations = rollout.prompt, rollout.num_generations
    worst = 0.0
    with paddle.no_grad():
        for row in range(rollout.completion_ids.shape[0]):
            p = row // generations
            first_patch = int(prompt.image_grid_thw[:p].prod(axis=1).sum()) if p else 0
            patches = int(prompt.image_grid_thw[p].prod())
            completion = rollout.completion_ids[row:row + 1]
            real_prompt = prompt.input_ids[p][prompt.attention_mask[p].astype("bool")].unsqueeze(0)  # no padding
            ids = paddle.concat([real_prompt, completion], axis=1)
            model.model.rope_deltas = None
            logits = model(input_ids=ids, attention_mask=paddle.ones_like(ids),
                           pixel_values=prompt.pixel_values[first_patch:first_patch + patches],
                           image_grid_thw=prompt.image_grid_thw[p:p + 1]).logits
            logits = logits[0, real_prompt.shape[1] - 1:-1].astype("float32")
            want = paddle.take_along_axis(paddle.nn.functional.log_softmax(logits, axis=-1),
                                          completion[0].unsqueeze(-1), axis=-1).squeeze(-1).numpy()
            n = int(rollout.completion_mask[row].sum())
            worst = max(worst, max_abs_difference(got[row, :n], want[:n]))
    vision = {name: g for name, g in grads.items() if "visual" in name}
    deepstack = [name for name in vision if "deepstack" in name]
    if not deepstack or not all(np.isfinite(g).all() for g in grads.values()) \
            or not all(np.abs(g).max() > 0 for g in vision.values()):
        raise CheckFailed(f"gradients: {len(vision)} vision weights ({len(deepstack)} DeepStack), some zero or not "
                          "finite")
    return "; ".join([within("rollout log-probs vs the forward", worst, ws.tolerance.logprobs),
                      f"backward finite, all {len(vision)} vision weights reached ({len(deepstack)} DeepStack)"])
