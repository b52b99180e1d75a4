"""Every lab notebook runs from top to bottom, and is committed without outputs."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
ANSWERS = sorted((ROOT / "notebooks" / "answers").glob("*.ipynb"))  # the labs' answer keys


def test_there_are_six_labs():
    assert [p.name[:2] for p in NOTEBOOKS] == ["01", "02", "03", "04", "05", "06"]


def test_every_answer_key_answers_a_lab():
    assert ANSWERS and {p.name for p in ANSWERS} <= {p.name for p in NOTEBOOKS}


@pytest.mark.parametrize("path", NOTEBOOKS + ANSWERS, ids=lambda p: p.parent.name + "/" + p.stem)
def test_notebook_is_committed_without_outputs(path):
    book = nbformat.read(path, as_version=4)
    for cell in book.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None


# the labs and keys take 5 to 50 s each on two cores: CI runs them, -m "not slow" not
@pytest.mark.parametrize(
    "path",
    [pytest.param(p, marks=pytest.mark.slow) for p in NOTEBOOKS + ANSWERS],
    ids=lambda p: p.parent.name + "/" + p.stem,
)
def test_notebook_runs(path):
    book = nbformat.read(path, as_version=4)
    client = NotebookClient(
        book, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
    )
    client.execute()  # raises CellExecutionError with the failing cell
    images = [
        o
        for c in book.cells
        if c.cell_type == "code"
        for o in c.outputs
        if "image/png" in o.get("data", {})
    ]
    assert images, "each lab draws at least one plot"
