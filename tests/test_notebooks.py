"""Every notebook in notebooks/ runs top to bottom (nbclient) with the tiny model and a few steps.

The kernel is this interpreter's (a kernel spec written for it into a temporary JUPYTER_PATH), with its bin folder
first on PATH so that the notebooks' ``!paddle-r1`` and ``!python`` are this environment's; each notebook runs in
its own temporary working folder, so nothing is written into the repository. Parameters are injected after the
cell tagged "parameters", as papermill does. A ``!command`` that exits non-zero fails its cell (IPython itself
only records the status in ``_exit_code``).
"""
import glob
import os
import sys

import nbformat
import pytest
from ipykernel.kernelspec import write_kernel_spec
from nbclient import NotebookClient

from test_cli import LIBRARY_NOTICES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))
KERNEL = "paddle_r1_test"
# what a cell must not show: the commands' library notices, and the warnings importing Paddle raises in the kernel
NOTICES = LIBRARY_NOTICES + ("No ccache found", "Setuptools is replacing distutils")

# the smallest run that still goes through every cell: no SFT warm start, 2 GRPO steps, 2 x 2 completions
CI_PARAMETERS = {"SFT_STEPS": 0, "STEPS": 2, "SAVE_STEPS": 1, "NUM_TRAIN": 8, "NUM_TEST": 4, "NUM_GENERATIONS": 2,
                 "BATCH_SIZE": 4, "MAX_COMPLETION_LENGTH": 8}


CHECKED_COMMANDS = """\
_shell = get_ipython()
_system = _shell.system


def _checked_system(command):
    _system(command)
    if _shell.user_ns.get("_exit_code"):
        raise RuntimeError(f"!{command} exited with status {_shell.user_ns['_exit_code']}")


_shell.system = _checked_system
"""


def inject_parameters(nb, values: dict) -> None:
    """A cell after the one tagged "parameters" setting those of ``values`` that the notebook declares."""
    index = next(i for i, cell in enumerate(nb.cells) if "parameters" in cell.metadata.get("tags", []))
    source = nb.cells[index].source
    lines = [f"{name} = {value!r}" for name, value in values.items() if f"\n{name} = " in "\n" + source]
    nb.cells.insert(index + 1, nbformat.v4.new_code_cell("\n".join(lines), metadata={"tags": ["injected-parameters"]}))


@pytest.fixture(scope="module")
def kernel_env(tmp_path_factory):
    """JUPYTER_PATH holding a kernel spec for this interpreter, and PATH starting with its bin folder."""
    jupyter_path = tmp_path_factory.mktemp("jupyter")
    write_kernel_spec(str(jupyter_path / "kernels" / KERNEL))
    saved = {key: os.environ.get(key) for key in ("JUPYTER_PATH", "PATH", "PYTHONPATH")}
    os.environ["JUPYTER_PATH"] = str(jupyter_path)
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    os.environ["PYTHONPATH"] = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 4


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_runs_top_to_bottom(path, kernel_env, tmp_path):
    nb = nbformat.read(path, as_version=4)
    inject_parameters(nb, CI_PARAMETERS)
    nb.cells.insert(0, nbformat.v4.new_code_cell(CHECKED_COMMANDS))
    before = repository_entries()
    # raises CellExecutionError naming the cell and its traceback on any cell error (also a failing !command's
    # exit status, which the notebooks check)
    NotebookClient(nb, kernel_name=KERNEL, timeout=300, resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert repository_entries() == before, "a notebook wrote into the repository"
    shown = [(index, line) for index, cell in enumerate(nb.cells) for output in cell.get("outputs", [])
             if output.get("output_type") == "stream" for line in output.get("text", "").splitlines()]
    assert not [(index, line) for index, line in shown if any(notice in line for notice in NOTICES)], shown


def repository_entries() -> set:
    return {os.path.join(folder, name) for folder in (ROOT, os.path.join(ROOT, "notebooks"))
            for name in os.listdir(folder)}
