"""``paddle-r1 export CHECKPOINT DEST``: a checkpoint as the folder one uploads to a model hub or serves.

A checkpoint is already a model folder ``from_pretrained`` loads, but it also holds what only a resume reads: the
optimizer and scheduler state (``optimizer*.pdopt``: twice the weights again, in float32), ``rng_state.pkl``,
``trainer_state.json`` (the run's whole config, local paths included), ``manifest.json``, the LoRA ``adapter/``
(its merged weights are the model's), ``ref_model/`` and the ranks' files. The export keeps the model alone, as the
hub publishes one:

- the weights, merged when the run trained LoRA (the checkpoint's own weights are), in ``dtype`` (default: the
  source model's config.json's, as its publisher chose; bfloat16 for the published Qwen-VL and PaddleOCR-VL
  models), in safetensors shards of at most ``max_shard_size`` named and indexed as transformers' ``save_pretrained``
  names them (``model.safetensors``, or ``model-00001-of-0000N.safetensors`` with ``model.safetensors.index.json``);
- config.json (the source's) with the dtype written under the key the family's transformers release writes
  (``ModelFamily.dtype_key``), the generation config and the processor's files (``source_files.CARRIED_OVER``) as
  the checkpoint holds them, and the model card (``README.md``).

Given a run's output_dir instead of a checkpoint, the export takes its most recently written complete checkpoint
(the one ``--resume latest`` starts from); another one (the best held-out score in the model card's table, say) is
exported by naming its folder. The checkpoint's model files are verified against its manifest first, and every
refusal of the input (no such folder, not a checkpoint, a DEST that is not empty) comes before anything is written.
The export is written beside DEST and renamed into place when complete, so that a failure while writing (a weight
float16 cannot hold) leaves DEST as it was.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from typing import Optional

from ..config.paths import file_in_the_way
from ..models.families import family_of
from ..models.model_path import HUB_ID
from ..models.source_files import CARRIED_OVER, CONFIG, DTYPE_KEYS, hub_file, with_dtype, write_edited
from .folders import STATE_FILE, list_checkpoints, load_trainer_state, verify_checkpoint
from .manifest import CheckpointError, has_manifest
from .model_card import CARD

DTYPES = ("float32", "bfloat16", "float16")
DEFAULT_MAX_SHARD_SIZE = "5GB"  # transformers' default for save_pretrained and push_to_hub
WEIGHTS = "model.safetensors"
INDEX = "model.safetensors.index.json"
COPIED = CARRIED_OVER + (CARD,)  # as the checkpoint holds them; config.json is written with the export's dtype
FLOAT_TYPES = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}  # safetensors' names of the three
_ITEM_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "F64": 8, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
               "BOOL": 1}
# transformers' size units (``convert_file_size_to_int``): decimal KB/MB/GB/TB, binary KiB/MiB/GiB/TiB
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


class ExportError(ValueError):
    """An export refused before anything is written: the message names the argument, path or weight at fault."""


def parse_size(size: str) -> int:
    """Bytes of a size as transformers' ``max_shard_size`` takes it: ``5GB`` (10^9), ``500MiB`` (2^20), ``200KB``,
    or a number of bytes."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*", str(size), flags=re.IGNORECASE)
    if match is None or float(match.group(1)) <= 0:
        raise ExportError(f"--max_shard_size {size!r}: give a size such as 5GB, 500MB, 2GiB or a number of bytes")
    return int(float(match.group(1)) * _UNITS[(match.group(2) or "").upper()])


def export_checkpoint(path: str, dest: str, dtype: Optional[str] = None,
                      max_shard_size: str = DEFAULT_MAX_SHARD_SIZE, echo=print) -> str:
    """Write the model of the checkpoint ``path`` (or of a run's output_dir: its newest checkpoint) into the new or
    empty folder ``dest`` in ``dtype`` (None: the source model's) as shards of at most ``max_shard_size``; returns
    ``dest``. Everything is checked before anything is written (module docstring)."""
    shard_bytes = parse_size(max_shard_size)
    if dtype is not None and dtype not in DTYPES:
        raise ExportError(f"--dtype {dtype!r}: one of {', '.join(DTYPES)}")
    _check_destination(dest)
    checkpoint = choose_checkpoint(path, echo)
    verify_checkpoint(checkpoint, model_only=True, echo=echo)
    weights = weight_files(checkpoint)
    if dtype is None:
        dtype = _default_dtype(checkpoint, weights, echo)
    shards = plan_shards(weights, dtype, shard_bytes)
    dtype_key = family_of(_read_json(os.path.join(checkpoint, CONFIG))).dtype_key
    tmp = os.path.join(os.path.dirname(os.path.abspath(dest)), f".{os.path.basename(os.path.abspath(dest))}.export")
    shutil.rmtree(tmp, ignore_errors=True)  # left by an export that was killed
    os.makedirs(tmp)
    try:
        _write_weights(weights, shards, dtype, tmp)
        write_edited(os.path.join(checkpoint, CONFIG), os.path.join(tmp, CONFIG),
                     lambda config: with_dtype(config, dtype, dtype_key))
        for name in COPIED:
            if os.path.isfile(os.path.join(checkpoint, name)):
                shutil.copyfile(os.path.join(checkpoint, name), os.path.join(tmp, name))
        os.replace(tmp, dest)  # dest is absent or an empty folder
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    echo(f"exported {checkpoint} to {dest}: {dtype}, {len(shards)} weight file(s)")
    return dest


def _check_destination(dest: str) -> None:
    if os.path.isdir(dest):
        if os.listdir(dest):
            raise ExportError(f"DEST {dest} is not empty: give a new or empty folder (nothing is overwritten)")
    elif os.path.exists(dest):
        raise ExportError(f"DEST {dest} is a file: give a new or empty folder")
    blocker = file_in_the_way(os.path.dirname(os.path.abspath(dest)))
    if blocker:
        raise ExportError(f"DEST {dest}: {blocker} is a file, not a folder")


def choose_checkpoint(path: str, echo=print) -> str:
    """``path`` itself when it is a checkpoint (it holds trainer_state.json or manifest.json), else the most
    recently written complete checkpoint of the run's output_dir ``path``, said through ``echo``."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"export: {path} does not exist")
    if not os.path.isdir(path):
        raise CheckpointError(f"export: {path} is a file, not a checkpoint folder")
    if os.path.isfile(os.path.join(path, STATE_FILE)) or has_manifest(path):
        return path
    found = list_checkpoints(path)
    if found:
        echo(f"export: {found[-1]}, the most recently written checkpoint in {path} (name a checkpoint-N folder to "
             "export another)")
        return found[-1]
    if os.path.isfile(os.path.join(path, CONFIG)):
        raise CheckpointError(f"export: {path} is a model folder, not a checkpoint written by paddle-r1 train or sft "
                              f"(no {STATE_FILE}): it is published as it is")
    raise CheckpointError(f"export: {path} is neither a checkpoint ({STATE_FILE}) nor a run's output_dir "
                          "(checkpoint-N folders)")


def weight_files(checkpoint: str) -> dict[str, str]:
    """{weight name: the safetensors file holding it} of the checkpoint's model (its index's ``weight_map``, or
    the one ``model.safetensors``)."""
    index = os.path.join(checkpoint, INDEX)
    if os.path.isfile(index):
        weight_map = _read_json(index).get("weight_map") or {}
        return {name: os.path.join(checkpoint, file) for name, file in weight_map.items()}
    if os.path.isfile(os.path.join(checkpoint, WEIGHTS)):
        from safetensors import safe_open

        with safe_open(os.path.join(checkpoint, WEIGHTS), framework="np") as f:
            return {name: os.path.join(checkpoint, WEIGHTS) for name in f.keys()}
    raise CheckpointError(f"checkpoint {checkpoint}: no weights ({INDEX} or {WEIGHTS})")


def _tensor_specs(weights: dict[str, str]) -> dict[str, tuple[str, list[int]]]:
    """{weight name: (safetensors dtype, shape)}, read from the files' headers."""
    from safetensors import safe_open

    specs = {}
    for file in sorted(set(weights.values())):
        with safe_open(file, framework="np") as f:
            for name in f.keys():
                tensor = f.get_slice(name)
                specs[name] = (tensor.get_dtype(), tensor.get_shape())
    return specs


def plan_shards(weights: dict[str, str], dtype: str, shard_bytes: int) -> list[list[str]]:
    """The weight names of each output file, as huggingface_hub's ``split_state_dict_into_shards_factory`` (which
    transformers' ``save_pretrained`` calls) splits a state dict: in order, a new file when the next weight would
    take the current one past ``shard_bytes``, a weight larger than that alone in its own. Sizes in ``dtype``."""
    specs = _tensor_specs(weights)
    shards, current, current_bytes = [], [], 0
    for name in sorted(weights):
        stored, shape = specs[name]
        size = _ITEM_BYTES[dtype if stored in FLOAT_TYPES else stored] * _numel(shape)
        if size > shard_bytes:
            shards.append([name])
            continue
        if current and current_bytes + size > shard_bytes:
            shards.append(current)
            current, current_bytes = [], 0
        current.append(name)
        current_bytes += size
    return shards + ([current] if current else [])


def _numel(shape: list[int]) -> int:
    count = 1
    for n in shape:
        count *= n
    return count


def shard_names(count: int) -> list[str]:
    """transformers' names for ``count`` weight files."""
    return [WEIGHTS] if count == 1 else [f"model-{i:05d}-of-{count:05d}.safetensors" for i in range(1, count + 1)]


def _write_weights(weights: dict[str, str], shards: list[list[str]], dtype: str, folder: str) -> None:
    """Each shard's weights, read from the checkpoint one file's worth at a time and cast to ``dtype``, with the
    index when there are several (``{"metadata": {"total_parameters", "total_size"}, "weight_map"}``, keys sorted,
    as transformers 5 writes it)."""
    from safetensors import safe_open
    from safetensors.paddle import save_file

    names = shard_names(len(shards))
    weight_map, total_size, total_parameters = {}, 0, 0
    for file, shard in zip(names, shards):
        tensors = {}
        for name in shard:
            with safe_open(weights[name], framework="paddle") as f:
                tensor = f.get_tensor(name)
            tensors[name] = _cast(name, tensor, dtype)
            weight_map[name] = file
            total_parameters += _numel(tensor.shape)
            total_size += _numel(tensor.shape) * tensors[name].element_size()
        save_file(tensors, os.path.join(folder, file), metadata={"format": "pt"})  # transformers requires "pt"
        os.chmod(os.path.join(folder, file), 0o666 & ~_umask())  # safetensors creates its files private (0600)
    if len(names) > 1:
        index = {"metadata": {"total_parameters": total_parameters, "total_size": total_size},
                 "weight_map": weight_map}
        with open(os.path.join(folder, INDEX), "w", encoding="utf-8") as f:
            f.write(json.dumps(index, indent=2, sort_keys=True) + "\n")


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def _cast(name: str, tensor, dtype: str):
    """``tensor`` in ``dtype`` (floating weights; others as they are), refused when a finite value does not fit
    (float16 tops out at 65,504; bfloat16 has float32's range)."""
    import paddle

    if not tensor.is_floating_point() or str(tensor.dtype).split(".")[-1] == dtype:
        return tensor
    cast = tensor.astype(dtype)
    if bool(paddle.isinf(cast).any()) and not bool(paddle.isinf(tensor).any()):
        largest = float(tensor.astype("float32").abs().max())
        raise ExportError(f"--dtype {dtype}: weight {name} holds values up to {largest:.4g}, beyond what {dtype} "
                          "holds; export it in bfloat16 or float32")
    return cast


def _default_dtype(checkpoint: str, weights: dict[str, str], echo) -> str:
    """The dtype of the source model's config.json (the run's ``model_name_or_path``: its folder, or the hub
    repository's file in the download cache), said through ``echo``; the checkpoint's own weights' dtype when the
    source's config cannot be read or names none."""
    source = (load_trainer_state(checkpoint).get("config") or {}).get("model_name_or_path") or ""
    dtype = _config_dtype(source)
    if dtype is not None:
        echo(f"dtype {dtype}: the source model's ({source}); --dtype chooses another")
        return dtype
    dtype = next(FLOAT_TYPES[stored] for stored, _ in _tensor_specs(weights).values() if stored in FLOAT_TYPES)
    echo(f"dtype {dtype}: the checkpoint's weights' (the source model {source or '(not recorded)'} has no readable "
         "config.json saying its dtype); --dtype chooses another")
    return dtype


def _config_dtype(source: str) -> Optional[str]:
    """The dtype config.json of the model ``source`` states (top level, else its text_config), or None."""
    try:
        if os.path.isdir(source):
            path = os.path.join(source, CONFIG)
        elif HUB_ID.fullmatch(source):
            path = hub_file(source, CONFIG)
        else:
            return None
        config = _read_json(path) if path else {}
    except (OSError, ValueError):
        return None
    for settings in (config, config.get("text_config") or {}):
        for key in DTYPE_KEYS:
            if settings.get(key) in DTYPES:
                return settings[key]
    return None


def _read_json(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)
