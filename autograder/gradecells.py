"""Hidden grade cells, written from the grader so the notebook and the grader agree.

Every graded part of a unit has one grade cell in the solution notebook, with the
nbgrader id `grade_<part>`. `python3 course.py build` writes its source (a call into
and its points (the sum of the part's checks). A grade cell runs nothing: its output is
written after the kernel has run the notebook, by the trusted run of the hidden pytest
graders (`autograder/tests/test_<unit>.py`; see `nbgrader_grades.py`). The HIDDEN TESTS
section only tells the instructor which test fills the cell; the release never shows it.
"""

from __future__ import annotations

from .report import fmt
from .submission import nbgrader_meta
from .units import get_unit


def grade_cell_id(part: str) -> str:
    return f"grade_{part}"


def grade_cell_source(unit: str, part: str, points: float) -> str:
    return (
        f"# Hidden tests for `{part}` ({fmt(points)} points) run here when your notebook is graded.\n"
        "# They compare your function with the reference on inputs you have not seen.\n"
        "### BEGIN HIDDEN TESTS\n"
        f"# Filled in by autograder/tests/test_{unit}.py::test_{part}, run outside this notebook.\n"
        "### END HIDDEN TESTS"
    )


def sync_grade_cells(nb, unit: str, where: str) -> None:
    spec = get_unit(unit)
    by_id = {
        nbgrader_meta(cell).get("grade_id"): cell
        for cell in nb.cells
        if nbgrader_meta(cell).get("grade") and not nbgrader_meta(cell).get("solution")
    }
    wanted = {grade_cell_id(p.name): p for p in spec.parts}
    missing = sorted(set(wanted) - set(by_id))
    if missing:
        raise KeyError(f"{where}: no grade cell with id {', '.join(missing)}")
    for grade_id, part in wanted.items():
        cell = by_id[grade_id]
        cell.source = grade_cell_source(unit, part.name, part.points)
        meta = cell.metadata["nbgrader"]
        meta.update(grade=True, solution=False, locked=True, points=part.points)
