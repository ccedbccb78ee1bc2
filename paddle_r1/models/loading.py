"""Load policy, reference and processor from a local folder or a hub id.

The family comes from ``config.json``'s ``model_type``, never from the folder's name (``families.py``); each family
has its model class (Qwen2.5-VL: paddleformers' with a save fix; Qwen2-VL: written in ``qwen2_vl.py``; Qwen3-VL:
paddleformers' plain-Paddle one with dense DeepStack, ``qwen3_vl.py``; PaddleOCR-VL: paddleformers' with its
positions, tied head, sdpa mask and packing table fixed, ``paddleocr_vl.py``), whose
``config_class`` reads the published config.json (transformers 5's spelling is rewritten into it first:
``config_spelling.py``). ``fuse_rms_norm`` is set in every sub-config to whether the fused RMSNorm kernel runs here
(``rms_norm.fused_norm_runs``: registered on GPUs, missing on CPU), whatever the folder's config.json says.
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import dataclass
from typing import Optional

import paddle

from ..errors import ConfigError
from .config_spelling import published_spelling
from .families import FAMILIES, family_of, not_supported
from .model_path import check_model_path
from .precision import precision_for_this_device
from .rms_norm import fused_norm_runs

@dataclass
class LoadedModels:
    policy: paddle.nn.Layer
    reference: Optional[paddle.nn.Layer]
    processor: object
    family: str


def model_config(path: str) -> dict:
    """config.json of a local folder, or the hub's for a hub id, in the published spelling that paddleformers reads
    (``config_spelling.py``: transformers 5's spelling rewritten, unreadable rope settings refused). Cheap (no
    weights), so ``prepare_job`` calls it through ``model_family`` to refuse a wrong path, an unsupported model or
    a config that would load wrong before anything loads."""
    check_model_path(path)
    config_file = os.path.join(path, "config.json")
    if os.path.isdir(path):
        if not os.path.isfile(config_file):
            raise FileNotFoundError(f"model folder {path} has no config.json")
        try:
            with open(config_file, encoding="utf-8") as f:
                config = json.load(f)
            family = config.get("model_type")
        except (ValueError, AttributeError) as e:  # not JSON, or JSON but not an object
            raise ConfigError(f"{config_file}: not a JSON object with model_type ({e})") from None
    else:
        config = _hub_config(path)
        family = config.get("model_type")
    if family not in FAMILIES:
        raise ConfigError(f"{config_file}: {not_supported(family)}")
    for need in family_of(family).requirements:
        if not need.installed:
            raise ConfigError(f"{config_file}: {family_of(family).title} needs the {need.package} package "
                              f"({need.why}): {need.install}")
    return published_spelling(config, config_file)


def model_family(path: str) -> str:
    """``model_type`` of ``path``'s config.json, the whole config checked on the way (``model_config``)."""
    return model_config(path)["model_type"]


def _hub_config(hub_id: str) -> dict:
    """The hub's config.json for ``hub_id``, fetched by paddleformers. Its network and repository errors share no
    base class, and any of them means the same to the user: the name is no local folder and the hub could not
    give it, so the message says that instead of a network traceback."""
    from paddleformers.transformers.configuration_utils import PretrainedConfig

    try:
        return PretrainedConfig.get_config_dict(hub_id)[0]
    except Exception as e:  # noqa: BLE001 -- see the docstring
        raise FileNotFoundError(
            f"model folder not found: {hub_id}; as a hub id it could not be fetched ({type(e).__name__}: {e}). "
            "Without access to the model hub only local folders load: download the model where the hub is "
            "reachable and name its folder") from None


def default_coord_system(family: str) -> str:
    return family_of(family).coord_system


MIRROR_ROOT = os.path.join(os.path.expanduser("~"), ".cache", "paddle_r1", "model_mirrors")


@contextlib.contextmanager
def read_only_view(path: str):
    """The folder to hand paddleformers' ``from_pretrained`` for ``path``: paddleformers' flex-checkpoint loader
    writes ``flex-ckpt.auto_generated.metadata`` into the folder it loads from, which fails on a read-only mount
    (AI Studio's datasets) and leaves a stray file in the user's folder otherwise. A local folder is therefore
    loaded through a temporary mirror of symlinks to its entries under ``MIRROR_ROOT``, removed after the load
    (the weights are read by then); a hub id is passed through (paddleformers downloads it into its cache)."""
    if not os.path.isdir(path):
        yield path
        return
    source = os.path.abspath(path)
    os.makedirs(MIRROR_ROOT, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="model-", dir=MIRROR_ROOT) as mirror:
        for name in os.listdir(source):
            os.symlink(os.path.join(source, name), os.path.join(mirror, name))
        yield mirror


def load_model(path: str, dtype: str = "float32", freeze_vision: bool = False,
               gradient_checkpointing: bool = False, attn_implementation: Optional[str] = None) -> paddle.nn.Layer:
    """One model from a folder or hub id. ``gradient_checkpointing`` recomputes each decoder and vision block
    in the backward pass instead of keeping its activations (paddleformers' full, uniform recompute).
    ``attn_implementation`` ("eager" | "sdpa"; None: the device's choice, see ``precision.py``) is set on the
    text and vision configs alike: paddleformers reads ``config._attn_implementation`` in each attention layer
    (its ``from_pretrained`` takes no such argument), and the config's own default is "eager"."""
    config_dict = model_config(path)
    family = family_of(config_dict)
    cls = family.model_class.load()
    config = cls.config_class.from_dict(config_dict)
    attention = precision_for_this_device(dtype, attn_implementation).attention
    fused_norm = fused_norm_runs()
    for sub in (config, getattr(config, "text_config", None), getattr(config, "vision_config", None)):
        if sub is None:
            continue
        sub._attn_implementation = attention
        sub.fuse_rms_norm = fused_norm
        if gradient_checkpointing:
            sub.recompute_granularity, sub.recompute_method, sub.recompute_num_layers = "full", "uniform", 1
    with read_only_view(path) as folder:
        model = cls.from_pretrained(folder, config=config, dtype=dtype)
    if freeze_vision:
        vision = [getattr(model, part) for part in family.vision_parts]
        for param in (param for layer in vision for param in layer.parameters()):
            param.stop_gradient = True
    return model


def load_processor(path: str, min_pixels: Optional[int] = None, max_pixels: Optional[int] = None):
    """The folder's own processor; left padding, as batched generation needs."""
    from paddleformers.transformers import AutoProcessor

    check_model_path(path)
    kwargs = {}
    if min_pixels is not None:
        kwargs["min_pixels"] = min_pixels
    if max_pixels is not None:
        kwargs["max_pixels"] = max_pixels
    # the fast image processor, paddleformers' default, where the family has one (asking for one it has not, even by
    # default, prints a warning)
    kwargs["use_fast"] = family_of(model_family(path)).fast_image_processor
    processor = AutoProcessor.from_pretrained(path, **kwargs)
    if min_pixels is not None or max_pixels is not None:
        # the fast image processor keeps its limits in `size`; keep both spellings in step
        image_processor = processor.image_processor
        size = dict(getattr(image_processor, "size", None) or {})
        if min_pixels is not None:
            image_processor.min_pixels = size["shortest_edge"] = min_pixels
        if max_pixels is not None:
            image_processor.max_pixels = size["longest_edge"] = max_pixels
        image_processor.size = size
    processor.tokenizer.padding_side = "left"
    return processor


def load_models(path: str, beta: float, dtype: str = "float32", freeze_vision: bool = False,
                min_pixels: Optional[int] = None, max_pixels: Optional[int] = None,
                reference_path: Optional[str] = None, gradient_checkpointing: bool = False,
                attn_implementation: Optional[str] = None) -> LoadedModels:
    """Policy + processor from ``path``, and a frozen reference only when the KL term is on (beta > 0).

    ``reference_path`` (default ``path``) lets a resumed run take its policy from a checkpoint while the
    reference stays the original model (or the synced copy the checkpoint saved).
    """
    policy = load_model(path, dtype=dtype, freeze_vision=freeze_vision, gradient_checkpointing=gradient_checkpointing,
                        attn_implementation=attn_implementation)
    reference = None
    if beta > 0:
        reference = load_model(reference_path or path, dtype=dtype, attn_implementation=attn_implementation)
        reference.eval()
        for param in reference.parameters():
            param.stop_gradient = True
    processor = load_processor(path, min_pixels=min_pixels, max_pixels=max_pixels)
    return LoadedModels(policy=policy, reference=reference, processor=processor, family=policy.config.model_type)


def disable_dropout(model) -> None:
    """Every dropout layer of ``model`` set to drop nothing (TRL's ``disable_dropout``: its ``nn.Dropout`` modules'
    ``p`` to 0), so that the training forward's log-probs are those the rollout sampled from. In the families
    paddle_r1 runs these are LoRA's ``lora_dropout`` and ERNIE's ``hidden_dropout`` (PaddleOCR-VL)."""
    for layer in model.sublayers():
        if isinstance(layer, paddle.nn.Dropout):
            layer.p = 0.0
