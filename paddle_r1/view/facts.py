"""What the rewards knew about a prompt's images, recovered for rows that do not carry it.

The rewards convert a predicted box with the prompt's ``image_sizes`` (originals), ``input_sizes`` (the
processor's ``smart_resize`` of each) and ``coord_system``. Trainer rows that hold these are used as they are;
otherwise the original size is read from the image file, the input size is recomputed with the processor's own
``smart_resize`` and the limits of the run's ``preprocessor_config.json``, and the coordinate system is the model
family's default (``config.json``'s ``model_type``), all taken from the run's newest checkpoint (or ``--model``).
"""
from __future__ import annotations

import os
from typing import Optional

from ..models.resize import Resizer

MISSING_FACTS_NOTE = (
    "completions.jsonl rows carry no image_sizes / input_sizes / coord_system; boxes were converted with sizes "
    "recomputed here ({source}). The trainer should add to each row what the rewards saw: "
    '"image_sizes": [[w, h], ...], "input_sizes": [[w, h], ...], "coord_system": "...".')


def find_model_dir(run_dir: str) -> Optional[str]:
    """The run's newest complete checkpoint (a model folder), else None."""
    from ..checkpoints.folders import list_checkpoints

    found = [c for c in list_checkpoints(run_dir) if os.path.isfile(os.path.join(c, "preprocessor_config.json"))]
    return found[-1] if found else None


def prompt_facts(facts: dict, image_sizes: list, resizer: Optional[Resizer], coord_system: Optional[str]) -> dict:
    """``image_sizes`` / ``input_sizes`` / ``coord_system`` for one prompt: the row's own where it has them, else
    recomputed (``image_sizes``: the opened images' sizes); a value that cannot be known is None."""
    sizes = facts.get("image_sizes") or image_sizes
    inputs = facts.get("input_sizes")
    if inputs is None and resizer is not None:
        inputs = [resizer.input_size(s) for s in sizes]
    system = facts.get("coord_system") or coord_system or (resizer.coord_system if resizer else None)
    return {"image_sizes": [tuple(s) for s in sizes], "input_sizes": inputs, "coord_system": system}
