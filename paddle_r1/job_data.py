"""The samples a job config names: a built-in synthetic set (``dataset_name``) or the records of ``data_path`` with
its options. Training, SFT and ``paddle-r1 check-data`` read their samples here."""
from __future__ import annotations

import os

from .data.images import set_max_image_pixels
from .data.loader import DataReport, load_samples
from .data.samples import DataError
from .data.video import VideoSampling
from .models.resize import resizer_for
from .synthetic import BUILTIN_DATASETS, make_synthetic_rec, make_synthetic_zoom


def load_from_config(config, decode_threads: int = 0) -> tuple[list[dict], DataReport]:
    """The samples a job config names: a built-in synthetic set, or ``data_path`` with its options
    (``decode_threads``: see ``data.loader.load_source``)."""
    set_max_image_pixels(config.max_image_pixels)
    if config.dataset_name == "synthetic_rec":
        return load_samples(make_synthetic_rec(os.path.join(config.output_dir, "synthetic_rec"), seed=config.seed),
                            decode_threads=decode_threads)
    if config.dataset_name == "synthetic_zoom":  # its episodes' crop boxes are in this model's coordinates
        return load_samples(make_synthetic_zoom(os.path.join(config.output_dir, "synthetic_zoom"), seed=config.seed,
                                                coord_system=config.coord_system, resizer=model_resizer(config)),
                            decode_threads=decode_threads)
    if config.dataset_name is not None:
        raise DataError(f"config key 'dataset_name': unknown dataset {config.dataset_name!r} "
                        f"(known: {', '.join(BUILTIN_DATASETS)})")
    if not config.data_path:
        raise DataError(f"config key 'data_path' is required (or dataset_name: {' or '.join(BUILTIN_DATASETS)})")
    return load_samples(config.data_path, image_root=config.image_root, data_format=config.data_format,
                        strict=config.strict_data, seed=config.seed, image_columns=config.image_columns,
                        image_cache_dir=config.image_cache_dir, image_placement=config.image_placement,
                        video=VideoSampling.from_config(config), decode_threads=decode_threads)


def model_resizer(config):
    """The resize the config's model folder will apply (its preprocessor_config.json, the config's ``min_pixels``
    and ``max_pixels`` over it)."""
    if not os.path.isfile(os.path.join(config.model_name_or_path or "", "preprocessor_config.json")):
        raise DataError(f"config key 'dataset_name': synthetic_zoom writes crop boxes in the model's coordinates and "
                        f"needs a local model folder with a preprocessor_config.json; model_name_or_path is "
                        f"{config.model_name_or_path!r}")
    resizer = resizer_for(config.model_name_or_path)
    resizer.min_pixels = config.min_pixels or resizer.min_pixels
    resizer.max_pixels = config.max_pixels or resizer.max_pixels
    return resizer
