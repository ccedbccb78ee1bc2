"""The family table (``paddle_r1/models/families.py``): every entry complete, and the only place outside
``paddle_r1/models/`` learns what differs between families."""
import ast
import dataclasses
import os
import re
import subprocess
import sys

import paddle
import pytest

import paddle_r1
from paddle_r1.synthetic import SYNTHETIC_TASKS
from paddle_r1.errors import ConfigError
from paddle_r1.memory import VISION_TOWERS
from paddle_r1.models.coords import COORD_SYSTEMS
from paddle_r1.models.families import FAMILIES, REFUSED, MemoryLayout, Ref, Requirement, family_of

PACKAGE = os.path.dirname(paddle_r1.__file__)
MODELS = os.path.join(PACKAGE, "models")
# fields an entry may leave empty: the model itself owns get_rope_index (PaddleOCR-VL), nothing extra to install, no
# attention the one-token decode step reproduces (PaddleOCR-VL)
MAY_BE_EMPTY = {"rope_index_at", "requirements", "one_token_attention"}


def _filled(value) -> bool:
    return value is not None and value != "" and value != ()


@pytest.mark.parametrize("model_type", FAMILIES)
def test_every_field_of_every_family_is_filled(model_type):
    family = FAMILIES[model_type]
    assert family.model_type == model_type and family_of(model_type) is family
    for field in dataclasses.fields(family):
        if field.name not in MAY_BE_EMPTY:
            assert _filled(getattr(family, field.name)), f"{model_type}: {field.name} is empty"
    for field in dataclasses.fields(MemoryLayout):
        assert _filled(getattr(family.memory, field.name)), f"{model_type}: memory.{field.name} is empty"
    assert family.coord_system in COORD_SYSTEMS and family.demo_task in SYNTHETIC_TASKS
    assert family.memory.vision_tower in VISION_TOWERS
    assert family.memory.vision_mlp in ("mlp_ratio", "intermediate_size")
    assert all(isinstance(need, Requirement) and need.package and need.install for need in family.requirements)
    for path in (family.rope_index_at, family.text_decoder_at, family.vision_parts):
        assert all(isinstance(part, str) and part for part in path)
    # every Ref names something that exists: the class the family loads, its embedding and its tiny builder
    assert family.model_class.load().__name__ == family.model_class.name
    assert hasattr(family.model_class.load(), "config_class")
    assert callable(family.embed_prompt.load()) and callable(family.tiny_builder.load())
    if family.one_token_attention is not None:
        assert issubclass(family.one_token_attention.load(), paddle.nn.Layer)


def test_family_of_reads_model_type_from_a_model_a_config_a_dict_or_a_name():
    class Config:
        model_type = "qwen3_vl"

    class Model:
        config = Config()

    family = FAMILIES["qwen3_vl"]
    assert family_of(Model()) is family_of(Config()) is family_of({"model_type": "qwen3_vl"}) is family
    with pytest.raises(ConfigError, match="not supported yet.*supported: qwen2_vl"):
        family_of("llava")
    with pytest.raises(ConfigError, match="paddlefleet"):
        family_of({"model_type": "qwen3_vl_moe"})


def test_ref_imports_nothing_until_loaded():
    """Importing the table, the package, the CLI's parser module and the memory estimate stays cheap: no paddle."""
    code = ("import sys, paddle_r1, paddle_r1.models.families, paddle_r1.memory, paddle_r1.cli; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('paddle', 'paddleformers')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": os.path.dirname(PACKAGE)}).stdout
    assert out.strip() == "[]"
    assert Ref("os.path", "join").load() is os.path.join


# ---- nothing outside paddle_r1/models/ tells families apart ----------------------------------------------------

FAMILY_NAME = re.compile(r"\b(" + "|".join(map(re.escape, [*FAMILIES, *REFUSED])) + r")\b")
# the attributes families differ by, from the table itself: probing a model for one is telling families apart
FAMILY_ATTRIBUTES = {"embed_prompt", "get_rope_index"} | {
    part for family in FAMILIES.values()
    for part in (*family.rope_index_at, *family.text_decoder_at[1:], *family.vision_parts)}
MODEL_LIKE = re.compile(r"model|policy|inner|reference|decoder|visual")


def family_branches(source: str) -> list[str]:
    """What in ``source`` tells model families apart: a string naming a family, ``hasattr`` on a model (or for an
    attribute families differ by), ``getattr`` with a default for such an attribute."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and FAMILY_NAME.search(node.value):
            found.append(f"line {node.lineno}: names {FAMILY_NAME.search(node.value).group(0)!r}")
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) >= 2):
            continue
        attribute = node.args[1].value if isinstance(node.args[1], ast.Constant) else None
        probes_model = node.func.id == "hasattr" and MODEL_LIKE.search(ast.unparse(node.args[0]))
        probes_family = (node.func.id == "hasattr" or (node.func.id == "getattr" and len(node.args) == 3)) \
            and attribute in FAMILY_ATTRIBUTES
        if probes_model or probes_family:
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_the_check_finds_family_branches():
    source = ('def f(model, config):\n'
              '    if hasattr(model, "embed_prompt"): pass\n'
              '    if hasattr(model.model, "anything"): pass\n'
              '    inner = getattr(model, "language_model", model)\n'
              '    return config.model_type == "paddleocr_vl" or f"{config}" == "qwen3_vl_moe"\n')
    assert len(family_branches(source)) == 5
    assert family_branches('import signal\nok = hasattr(signal, "alarm") and "qwen2_vl_like_name"\n') == []


def test_no_module_outside_models_tells_families_apart():
    """Families differ only through ``families.FAMILIES``: outside ``paddle_r1/models/`` code reads a field of
    ``family_of(...)`` instead of naming a family or probing a model for its attributes."""
    offenders = []
    for folder, _, names in os.walk(PACKAGE):
        if os.path.commonpath([folder, MODELS]) == MODELS:
            continue
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    offenders += [f"{os.path.relpath(path, PACKAGE)} {found}" for found in family_branches(f.read())]
    assert offenders == []
