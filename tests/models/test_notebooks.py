"""Every notebook in notebooks/ executes without error: a fresh kernel runs a copy of it in
a temporary working folder (files it writes stay there), on the test backend. The saved
notebooks carry their outputs and agree with their sources in notebooks/src/ (rebuild with
``python tools/build_notebooks.py``)."""
from __future__ import annotations

import os
import shutil

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from helpers import load_tool, TEST_BACKEND

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NB_DIR = os.path.join(ROOT, "notebooks")
NOTEBOOKS = sorted(f for f in os.listdir(NB_DIR) if f.endswith(".ipynb"))
CELL_TIMEOUT = 240  # seconds


def _builder():
    return load_tool('build_notebooks')


# 06_federated runs Flower's Simulation Engine (Ray, 8 simulated phones): ~50 s here, so it
# is slow, and it needs the extra rlxjax[flower]. 02, 04, 05 and 07 take 10-36 s each (92 s
# of the default suite's 10 minutes): they run under -m slow, and the default suite keeps
# the quickstart and the on-device training notebook (01, 03). Every notebook's saved
# outputs are checked against its source below in every run.
SLOW = {"02_grads_and_norms.ipynb", "04_dit_block.ipynb", "05_finetune.ipynb",
        "06_federated.ipynb", "07_llm_on_device.ipynb"}
NEEDS = {"06_federated.ipynb": ("flwr", "ray", "flwr_datasets", "sklearn")}


def _marked(names):
    return [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in names]


def test_all_the_notebooks_exist():
    assert [n[:2] for n in NOTEBOOKS] == ["01", "02", "03", "04", "05", "06", "07"], NOTEBOOKS


@pytest.mark.parametrize("name", _marked(NOTEBOOKS))
def test_notebook_executes(name, tmp_path):
    for module in NEEDS.get(name, ()):
        pytest.importorskip(module)
    shutil.copy(os.path.join(NB_DIR, name), tmp_path / name)
    nb = nbformat.read(str(tmp_path / name), as_version=4)
    # Programs whose backend is left to rlxjax (backend=None) run on the test backend:
    # the reference interpreter here, Core ML under RLXJAX_TEST_BACKEND=coreml on macOS.
    pin = nbformat.v4.new_code_cell(
        "import rlxjax.coreml.backends as _backends\n"
        f"_backends.default_backend = lambda: {TEST_BACKEND!r}")
    pin.id = "test-pin-backend"
    nb.cells.insert(0, pin)
    client = NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    try:
        client.execute()
    except CellExecutionError as e:  # the failing cell and its traceback
        pytest.fail(f"{name} failed:\n{e}", pytrace=False)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "error"]
    assert not errors, errors


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_saved_notebook_matches_source_and_has_outputs(name):
    build = _builder()
    src = os.path.join(NB_DIR, "src", name[:-len(".ipynb")] + ".py")
    assert os.path.isfile(src), f"{name} has no source {src}"
    with open(src, encoding="utf-8") as f:
        want = build.parse_cells(f.read())
    nb = nbformat.read(os.path.join(NB_DIR, name), as_version=4)
    got = [(c.cell_type, c.source) for c in nb.cells]
    assert got == want, (f"notebooks/{name} is stale: rebuild it with "
                         f"python tools/build_notebooks.py {name[:2]}")
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code), f"{name} was saved without running every cell"
    kinds = {o.output_type for c in code for o in c.outputs}
    assert "error" not in kinds
    if not name.startswith("01"):
        pngs = [o for c in code for o in c.outputs if "image/png" in o.get("data", {})]
        assert pngs, f"{name} has no plot among its saved outputs"
