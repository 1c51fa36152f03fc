"""Every notebook runs top to bottom on small settings (``IBFLOW_SMALL=1``).

The notebooks are jupytext percent-format sources (``notebooks/NN_name.py``) whose header names
their kernel (``python3``), so ``jupytext --to ipynb`` + ``jupyter execute`` need no
``--kernel_name``; here each is converted in memory and executed by a fresh kernel in a temporary
folder, as a reader running it in Jupyter would, and no ``.ipynb`` is left in ``notebooks/``.
"""

from pathlib import Path

import jupytext
import pytest
from nbclient import NotebookClient

FOLDER = Path(__file__).parent.parent / "notebooks"
NOTEBOOKS = sorted(FOLDER.glob("[0-9][0-9]_*.py"))


def test_notebooks_found():
    assert [p.stem[:2] for p in NOTEBOOKS] == ["01", "02", "03", "04", "05", "06", "07"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_source_documents_small_switch(path):
    nb = jupytext.read(path)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert nb.cells[0].cell_type == "markdown" and "IBFLOW_SMALL=1" in nb.cells[0].source
    assert sum(c.cell_type == "code" for c in nb.cells) >= 2


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path, monkeypatch):
    monkeypatch.setenv("IBFLOW_SMALL", "1")
    monkeypatch.setenv("IBFLOW_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    before = set(FOLDER.glob("*.ipynb"))
    nb = jupytext.read(path)
    NotebookClient(nb, timeout=600, resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert set(FOLDER.glob("*.ipynb")) == before  # converted in memory, run in tmp_path
    code = [c for c in nb.cells if c.cell_type == "code"]
    errors = [o for c in code for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    assert all(c.get("execution_count") for c in code)  # every cell ran
