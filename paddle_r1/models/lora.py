"""LoRA through ``paddleformers.peft``: adapters on the language model's linear layers.

paddleformers replaces the targeted ``nn.Linear`` layers in place with ``LoRALinear`` (W frozen, trainable
A [in, r] and B [r, out], output += x A B * alpha / r). paddle_r1 keeps using the model object itself and
adds what a GRPO run needs around it:

- the reference policy is the same model with its adapters switched off (``adapters_disabled``): no second
  copy of the weights when beta > 0;
- checkpoints hold the merged full model (W + A B * alpha / r under the published names, loadable with
  ``from_pretrained``) and the adapter alone (``adapter/``) for resuming.
"""
from __future__ import annotations

import contextlib
import json
import os

import paddle

from ..errors import ConfigError
from .families import family_of
from .source_files import write_source_files

ADAPTER_DIR = "adapter"


def apply_lora(model, rank: int, alpha: float, dropout: float = 0.0, target_modules=None):
    """Put adapters on ``model`` in place; afterwards only adapter weights are trainable. ``target_modules``:
    regexes over layer names, by default the family's (``ModelFamily.lora_targets``: the text decoder's
    projections)."""
    from paddleformers.peft import LoRAConfig, LoRAModel

    targets = target_modules or family_of(model).lora_targets
    # the model's tensor-parallel size, which LoRAModel would otherwise copy over with a warning on every run
    config = LoRAConfig(target_modules=list(targets), r=rank, lora_alpha=alpha, lora_dropout=dropout,
                        merge_weights=False, dtype=_dtype_name(model),
                        tensor_model_parallel_size=model.config.tensor_model_parallel_size)
    wrapper = LoRAModel(model, config)  # replaces the layers inside `model` and freezes everything else
    if not lora_layers(model):
        raise ConfigError(f"config key 'lora_target_modules': {config.target_modules} matched no linear layer",
                          keys=("lora_target_modules",))
    return wrapper


def lora_layers(model) -> dict:
    from paddleformers.peft.lora.lora_layers import LoRALinear

    return {name: layer for name, layer in model.named_sublayers() if isinstance(layer, LoRALinear)}


@contextlib.contextmanager
def adapters_disabled(model):
    """The base model, for reference log-probs: every adapter switched off for the duration."""
    layers = list(lora_layers(model).values())
    for layer in layers:
        layer.disable_lora = True
    try:
        yield model
    finally:
        for layer in layers:
            layer.disable_lora = False


def adapter_state(model) -> dict:
    return {name: param for name, param in model.named_parameters() if "lora_" in name.rsplit(".", 1)[-1]}


@contextlib.contextmanager
@paddle.no_grad()
def adapter_values(model, values: dict):
    """The model with its adapters set to ``values`` (name -> tensor, as ``adapter_state`` names them) for the
    duration: a reference that is the base model plus its own (synced or EMA) adapters, without a second model."""
    params = adapter_state(model)
    saved = {name: params[name].clone() for name in values}
    for name, value in values.items():
        params[name].set_value(value)
    try:
        yield model
    finally:
        for name, value in saved.items():
            params[name].set_value(value)


@paddle.no_grad()
def merged_state_dict(model) -> dict:
    """The base model's state on the host, in the model's own dtype, with each adapted weight replaced by
    W + A B * scaling (computed in float32 on the host, rounded once; the model is untouched).

    Host, because a merged copy beside the policy on the GPU is a second full model; float32 arithmetic,
    because Paddle's CPU has no bfloat16 matmul."""
    layers = lora_layers(model)
    merged = {}
    for name, tensor in model.state_dict().items():
        owner, _, leaf = name.rpartition(".")
        if leaf.startswith("lora_"):
            continue
        tensor = tensor.cpu()
        if leaf == "weight" and owner in layers:
            layer = layers[owner]
            delta = (layer.lora_A.cpu().astype("float32") @ layer.lora_B.cpu().astype("float32")) * layer.scaling
            tensor = (tensor.astype("float32") + delta).astype(tensor.dtype)
        merged[name] = tensor
    return merged


def save_adapter(model, folder: str, settings: dict) -> None:
    from safetensors.numpy import save_file

    os.makedirs(folder, exist_ok=True)
    save_file({k: v.numpy() for k, v in adapter_state(model).items()}, os.path.join(folder, "adapter.safetensors"))
    with open(os.path.join(folder, "adapter_config.json"), "w", encoding="utf-8") as f:
        json.dump(settings, f, indent=2)


@paddle.no_grad()
def load_adapter(model, folder: str) -> None:
    from safetensors.numpy import load_file

    saved = load_file(os.path.join(folder, "adapter.safetensors"))
    params = adapter_state(model)
    missing = sorted(set(params) - set(saved))
    if missing:
        raise ValueError(f"{folder}: adapter weights missing for {missing[:3]}")
    for name, param in params.items():
        param.set_value(paddle.to_tensor(saved[name], dtype=param.dtype))


def write_model_folder(model, folder: str, config) -> None:
    """The trained model as a folder ``from_pretrained`` loads as it is: with ``config.lora`` the merged weights
    plus ``adapter/`` (the adapter alone, with the settings that made it, for resuming); config.json, the generation
    config and the processor's files taken from the source model (``source_files.py``), with the run's pixel
    limits."""
    if config.lora:
        save_merged(model, folder)
        save_adapter(model, os.path.join(folder, ADAPTER_DIR),
                     {"base_model": config.model_name_or_path, "rank": config.lora_rank, "alpha": config.lora_alpha,
                      "target_modules": config.lora_target_modules})
    else:
        model.save_pretrained(folder)
    write_source_files(config.model_name_or_path, folder, dtype=_dtype_name(model),
                       min_pixels=config.min_pixels, max_pixels=config.max_pixels)


def _dtype_name(model) -> str:
    """The weights' dtype as config.json spells it (``bfloat16``, ``float32``)."""
    return str(model.parameters()[0].dtype).split(".")[-1]


def save_merged(model, folder: str) -> None:
    """A plain model folder (published layout) holding the merged weights, written from a host copy of the base
    model in the policy's dtype (built without random initialisation): the GPU holds no second model."""
    from paddleformers.transformers.model_utils import dtype_guard, no_init_weights
    from paddleformers.utils import device_guard

    from .families import family_of

    state = merged_state_dict(model)
    with device_guard("cpu"), dtype_guard(_dtype_name(model)), no_init_weights():
        base = family_of(model).model_class.load()(model.config)
        base.set_state_dict(state)
        base.save_pretrained(folder)
