"""Turning a notebook or a `.py` file into a namespace of functions to grade.

The same loader reads a student's submission (for `python -m autograder check`) and the
solution notebook (the reference: see `reference.py`), so there is one way code gets
out of a notebook.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from .sandbox import TimeLimitExceeded, quiet, time_limit

CELL_SECONDS = 30.0  # nbgrader's own default per-cell timeout


@dataclass
class Loaded:
    namespace: dict
    notes: list[str] = field(default_factory=list)  # what went wrong while loading, for people


def nbgrader_meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def is_grade_cell(cell) -> bool:
    """Test cells (visible or hidden): they check code, they do not define it."""
    meta = nbgrader_meta(cell)
    return bool(meta.get("grade")) and not meta.get("solution")


def is_quiz_cell(cell) -> bool:
    return "quiz" in cell.get("metadata", {})


def is_reference_cell(cell) -> bool:
    """The cells that make up the reference: solution cells and the `setup` (imports) cell."""
    meta = nbgrader_meta(cell)
    return bool(meta.get("solution")) or str(meta.get("grade_id", "")).startswith("setup")


def without_magics(source: str) -> str:
    # `%matplotlib inline` or `!pip ...` mean nothing outside IPython; drop them.
    return "\n".join(
        "" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()
    )


def code_from_notebook(path: Path, reference_only: bool = False) -> list[tuple[str, str]]:
    """(label, source) for each code cell worth running, in order."""
    nb = nbformat.read(path, as_version=4)
    chunks = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or is_grade_cell(cell) or is_quiz_cell(cell):
            continue
        if reference_only and not is_reference_cell(cell):
            continue
        label = nbgrader_meta(cell).get("grade_id") or f"cell {index + 1}"
        chunks.append((label, without_magics(cell.source)))
    return chunks


def load_file(path: str | Path, reference_only: bool = False) -> Loaded:
    """Execute a notebook's code cells (or a .py file) into a fresh namespace.

    Each cell runs quietly under a time limit; a cell that raises or loops is noted and
    skipped, the way a Jupyter kernel moves on to the next cell.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    if path.suffix == ".ipynb":
        chunks = code_from_notebook(path, reference_only)
    elif path.suffix == ".py":
        chunks = [(path.name, path.read_text(encoding="utf-8"))]
    else:
        raise ValueError(f"can only grade .ipynb or .py files, not {path.name}")
    loaded = Loaded(namespace={"__name__": "__submission__"})
    for label, source in chunks:
        try:
            code = compile(source, f"<{path.name}: {label}>", "exec")
            with quiet(), time_limit(CELL_SECONDS):
                exec(code, loaded.namespace)
        except TimeLimitExceeded:
            loaded.notes.append(f"{label} was still running after {CELL_SECONDS:g} s; stopped it.")
        except BaseException as err:  # noqa: BLE001 - a student's cell may raise anything
            loaded.notes.append(f"{label} raised {type(err).__name__}: {err}")
    return loaded
