"""Hidden grade cells, written from the grader so the notebook and the grader agree.

Every graded part of a unit has one grade cell in the solution notebook, with the
nbgrader id `grade_<part>`. `python3 course.py build` writes its source (a call into
and its points (the sum of the part's checks). A grade cell runs nothing: its output is
written after the kernel has run the notebook, by the trusted run of the hidden pytest
graders (`autograder/tests/test_<unit>.py`; see `nbgrader/grades.py`). The HIDDEN TESTS
section only tells the instructor which test fills the cell; the release never shows it.
"""

from __future__ import annotations

import nbformat

from ..engine.report import fmt
from ..trust.submission import is_grade_cell, nbgrader_meta
from ..units import get_unit


def grade_cell_id(part: str) -> str:
    return f"grade_{part}"


def grade_cell_source(unit: str, part: str, points: float) -> str:
    # The one line of code runs only under `nbgrader validate` (coursekit.feedback.validate_part):
    # it fails this cell when the part is unfinished or wrong, so Validate never says "passes"
    # for it. While autograding it does nothing; the grade is written from outside.
    return (
        f"# Hidden tests for `{part}` ({fmt(points)} points) run here when your notebook is graded.\n"
        "# They compare your function with the reference on inputs you have not seen.\n"
        "# When you click Validate, this cell reports your visible checks and, where\n"
        "# they can be asked, the hidden graders' verdict.\n"
        "from coursekit.feedback import validate_part\n\n"
        f'validate_part("{unit}", "{part}")\n'
        "### BEGIN HIDDEN TESTS\n"
        f"# Filled in by autograder/tests/test_{unit}.py::test_{part}, run outside this notebook.\n"
        "### END HIDDEN TESTS"
    )


def feedback_cell_id(part: str | None) -> str:
    return f"feedback_{part or 'all'}"


def feedback_cell_source(unit: str, part: str | None) -> str:
    if part is None:
        return ("# Ask the hidden graders about the whole notebook: save first (Ctrl-S), they grade the saved file.\n"
                f'from coursekit.feedback import ask_graders\n\nask_graders("{unit}")')
    return (f"# Ask the hidden graders about `{part}` now: save first (Ctrl-S), they grade the saved file.\n"
            f'from coursekit.feedback import ask_graders\n\nask_graders("{unit}", "{part}")')


FEEDBACK_INTRO = ("## Before you submit\n\nSave the notebook, then run the line below: the hidden graders "
                  "grade every part of the saved file, as they will when your work is graded, and say "
                  "which common mistake an answer looks like.")


def _locked_cell(grade_id: str, source: str):
    cell = nbformat.v4.new_code_cell(source)
    cell.id = grade_id
    cell.metadata["nbgrader"] = {"grade": False, "grade_id": grade_id, "locked": True,
                                 "schema_version": 3, "solution": False, "task": False}
    cell.metadata["deletable"] = False
    cell.metadata["editable"] = False
    return cell


def sync_feedback_cells(nb, unit: str) -> None:
    """A check line after every grade cell (`feedback_<part>`), and one for the whole notebook
    at the end (`feedback_all`, under a short heading). Existing cells keep their ids."""
    spec = get_unit(unit)
    existing = {nbgrader_meta(c).get("grade_id"): c for c in nb.cells
                if str(nbgrader_meta(c).get("grade_id", "")).startswith("feedback_")}
    intro = next((c for c in nb.cells if c.metadata.get("feedback") == "intro"), None)
    cells = [c for c in nb.cells if c is not intro and c not in existing.values()]
    out = []
    for cell in cells:
        out.append(cell)
        grade_id = nbgrader_meta(cell).get("grade_id")
        part = next((p.name for p in spec.parts if grade_id == grade_cell_id(p.name)), None)
        if part is not None and is_grade_cell(cell):
            line = existing.get(feedback_cell_id(part)) or _locked_cell(feedback_cell_id(part), "")
            line.source = feedback_cell_source(unit, part)
            out.append(line)
    if intro is None:
        intro = nbformat.v4.new_markdown_cell()
        intro.id = "feedback_intro"
        intro.metadata["feedback"] = "intro"
    intro.source = FEEDBACK_INTRO
    last = existing.get(feedback_cell_id(None)) or _locked_cell(feedback_cell_id(None), "")
    last.source = feedback_cell_source(unit, None)
    nb.cells = [*out, intro, last]


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
