"""Reading a notebook or a `.py` file into the code cells that define a submission.

This only reads: nothing here runs a submission's code. The grader hands the cells to a
sandboxed worker (`student.py`); the reference solution's cells, which are the course's
own, run in the grader (`reference.py`).
"""

from __future__ import annotations

import json
from pathlib import Path


def nbgrader_meta(cell) -> dict:
    metadata = cell.get("metadata", {})
    meta = metadata.get("nbgrader", {}) if isinstance(metadata, dict) else {}
    return meta if isinstance(meta, dict) else {}


def is_grade_cell(cell) -> bool:
    """Test cells (visible or hidden): they check code, they do not define it."""
    meta = nbgrader_meta(cell)
    return bool(meta.get("grade")) and not meta.get("solution")


def is_quiz_cell(cell) -> bool:
    metadata = cell.get("metadata", {})
    return isinstance(metadata, dict) and "quiz" in metadata


# Locked cells are the instructor's, and nbgrader restores their text from the gradebook
# before grading. Those named `setup*` define what the answers build on (imports, given
# functions). The others only test or show the answers: visible checks, figures, demos, and
# the check lines that ask the hidden graders (`feedback_*`, coursekit.feedback).
# `course.py build` refuses a locked cell named any other way.
SETUP_PREFIX = "setup"
SHOWS_ONLY_PREFIXES = ("check_", "figure_", "demo_", "feedback_")


def is_shows_only_cell(cell) -> bool:
    """A locked visible check, figure or demo: the grader's worker does not run it (it defines
    nothing a graded function needs, and the kernel runs it for the feedback page anyway)."""
    meta = nbgrader_meta(cell)
    return (bool(meta.get("locked")) and not meta.get("grade") and not meta.get("solution")
            and str(meta.get("grade_id", "")).startswith(SHOWS_ONLY_PREFIXES))


def is_reference_cell(cell) -> bool:
    """The cells that make up the reference: solution cells and the `setup` (imports) cell."""
    meta = nbgrader_meta(cell)
    return bool(meta.get("solution")) or str(meta.get("grade_id", "")).startswith(SETUP_PREFIX)


def without_magics(source: str) -> str:
    # `%matplotlib inline` or `!pip ...` mean nothing outside IPython; drop them.
    return "\n".join(
        "" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()
    )


class Unreadable(ValueError):
    """A submission that cannot be graded at all: missing, not a notebook, invalid JSON."""


def code_cells(path: str | Path, reference_only: bool = False) -> list[tuple[str, str]]:
    """(label, source) for each code cell worth running, in order. Reads, never runs."""
    path = Path(path)
    if not path.is_file():
        raise Unreadable(f"no such file: {path}")
    if path.suffix == ".py":
        try:
            return [(path.name, path.read_text(encoding="utf-8"))]
        except (OSError, UnicodeDecodeError) as err:
            raise Unreadable(f"{path.name} cannot be read: {err}") from None
    if path.suffix != ".ipynb":
        raise Unreadable(f"can only grade .ipynb or .py files, not {path.name}")
    # Plain JSON, not nbformat: reading needs no schema validation (a submission is checked
    # cell by cell below), and importing nbformat costs the grader a second per notebook.
    try:
        nb = json.loads(path.read_bytes())
        cells = nb["cells"] if isinstance(nb, dict) and nb.get("nbformat") == 4 else None
        if not isinstance(cells, list):
            raise ValueError("not an nbformat 4 notebook")
    except (OSError, ValueError, KeyError, RecursionError) as err:
        raise Unreadable(f"{path.name} is not a readable notebook ({type(err).__name__})") from None
    chunks = []
    for index, cell in enumerate(cells):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        if is_grade_cell(cell) or is_quiz_cell(cell) or is_shows_only_cell(cell):
            continue
        if reference_only and not is_reference_cell(cell):
            continue
        label = str(nbgrader_meta(cell).get("grade_id") or f"cell {index + 1}")[:80]
        source = cell.get("source", "")
        source = "".join(str(line) for line in source) if isinstance(source, list) else str(source)
        chunks.append((label, without_magics(source)))
    return chunks
