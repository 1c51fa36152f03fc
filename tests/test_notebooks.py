"""Every notebook runs top to bottom on small settings (``IBFLOW_SMALL=1``).

The notebooks are jupytext percent-format sources (``notebooks/NN_name.py``); each is converted to
an ``.ipynb`` in memory and executed by a fresh kernel, as a reader running it in Jupyter would.
"""

from pathlib import Path

import jupytext
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("[0-9][0-9]_*.py"))


def test_notebooks_found():
    assert [p.stem[:2] for p in NOTEBOOKS] == ["01", "02", "03", "04", "05", "06", "07"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_source_documents_small_switch(path):
    nb = jupytext.read(path)
    assert nb.cells[0].cell_type == "markdown" and "IBFLOW_SMALL=1" in nb.cells[0].source
    assert sum(c.cell_type == "code" for c in nb.cells) >= 2


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path, monkeypatch):
    monkeypatch.setenv("IBFLOW_SMALL", "1")
    monkeypatch.setenv("IBFLOW_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = jupytext.read(path)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    errors = [o for c in code for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    assert all(c.get("execution_count") for c in code)  # every cell ran
