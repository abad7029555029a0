"""Every reading chapter runs top to bottom without an error (their run time is printed,
not asserted: see the -rA output or README's figures)."""

from __future__ import annotations

import time

import nbformat
import pytest
from nbclient import NotebookClient

from autograder.paths import COURSE_UNITS, chapter_notebook

CHAPTERS = [u for u in COURSE_UNITS if chapter_notebook(u).exists()]


@pytest.mark.parametrize("unit", CHAPTERS)
def test_chapter_executes(unit, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")
    path = chapter_notebook(unit)
    nb = nbformat.read(path, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "commit chapters without outputs"
    started = time.perf_counter()
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    print(f"{path.name} ran in {time.perf_counter() - started:.1f} s")
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
