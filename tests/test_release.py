"""The student release: generated from solutions/, up to date, and free of anything
instructor-only (solution code, hidden tests, graders, answer keys)."""

from __future__ import annotations

import nbformat
import pytest
import yaml

from autograder.paths import EXERCISES, QUIZZES, release_notebook, solution_notebook
from autograder.release.build import build, check_locked_cells
from autograder.trust.submission import nbgrader_meta
from autograder.units import UNITS

GRADED = [u for u in UNITS if solution_notebook(u).exists()]


def test_generated_files_are_up_to_date():
    stale = build(check=True)
    assert stale == [], f"stale (run `python3 course.py build`): {stale}"


def test_release_holds_notebooks_only():
    files = [p for p in EXERCISES.rglob("*") if p.is_file()]
    assert files, "exercises/ is empty"
    assert all(p.suffix == ".ipynb" for p in files), [str(p) for p in files]
    assert {p.parent.name for p in files} == set(GRADED)


def solution_lines(unit: str) -> set[str]:
    """The reference's own lines: everything between the solution markers."""
    lines, inside = set(), False
    for cell in nbformat.read(solution_notebook(unit), as_version=4).cells:
        for line in cell.source.splitlines():
            if "BEGIN SOLUTION" in line:
                inside = True
            elif "END SOLUTION" in line:
                inside = False
            elif inside and len(line.strip()) > 12:
                lines.add(line.strip())
    return lines


@pytest.mark.parametrize("unit", GRADED)
def test_release_holds_no_solution_and_no_hidden_test(unit):
    text = release_notebook(unit).read_text(encoding="utf-8")
    nb = nbformat.reads(text, as_version=4)
    sources = "\n".join(cell.source for cell in nb.cells)
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "HIDDEN TESTS", "autograder", "grade("):
        assert marker not in sources, marker
    leaked = [line for line in solution_lines(unit) if line in sources]
    assert not leaked, f"reference lines in the release: {leaked}"
    solutions = [c for c in nb.cells if nbgrader_meta(c).get("solution")]
    assert solutions and all("raise NotImplementedError()" in c.source for c in solutions)


@pytest.mark.parametrize("unit", GRADED)
def test_release_shows_no_answer_key_in_plain_text(unit):
    text = release_notebook(unit).read_text(encoding="utf-8")
    for entry in yaml.safe_load((QUIZZES / f"{unit}.yml").read_text()):
        for option in entry["options"]:
            assert option["why"] not in text


@pytest.mark.parametrize("unit", GRADED)
def test_every_graded_part_has_one_hidden_grade_cell_with_its_points(unit):
    nb = nbformat.read(solution_notebook(unit), as_version=4)
    cells = {nbgrader_meta(c).get("grade_id"): nbgrader_meta(c) for c in nb.cells if nbgrader_meta(c).get("grade")}
    for part in UNITS[unit].parts:
        meta = cells[f"grade_{part.name}"]
        assert meta["points"] == part.points > 0
    visible = [c for c in nb.cells if str(nbgrader_meta(c).get("grade_id", "")).startswith("check_")]
    assert len(visible) >= len(UNITS[unit].parts), "every part needs a visible check cell"


def test_a_locked_cell_says_by_its_name_whether_the_grader_runs_it():
    """The grader's worker runs locked `setup*` cells and leaves out locked checks, figures and
    demos; a locked cell named otherwise would be left ambiguous, so the build refuses it."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1", metadata={"nbgrader": {
        "grade": False, "solution": False, "locked": True, "grade_id": name}}) for name in ("setup", "check_x")]
    check_locked_cells(nb, "fine.ipynb")
    nb.cells[1].metadata["nbgrader"]["grade_id"] = "helpers"
    with pytest.raises(ValueError, match="helpers"):
        check_locked_cells(nb, "ambiguous.ipynb")


@pytest.mark.parametrize("unit", GRADED)
def test_every_exercise_opens_with_a_table_of_its_parts_whose_points_are_the_graders(unit):
    """The first cell's table (part | function | what it does | points | difficulty | time) has one
    row per graded part, with the grader's own points: a student plans by it."""
    import re

    intro = nbformat.read(solution_notebook(unit), as_version=4).cells[0].source
    header = "| part | function | what it does | points | difficulty | time |"
    assert header in intro, f"{unit}: the first cell has no table of the parts ({header})"
    rows = [line for line in intro[intro.index(header):].splitlines()[2:] if line.startswith("|")]
    listed = {}
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        named = re.match(r"`(\w+)[(`]", cells[1])
        if named is None:
            continue  # a row for what is not graded
        assert re.fullmatch(r"★+☆*", cells[4]) and cells[5], (
            f"{unit}: the row of {named[1]} needs a difficulty and a time")
        listed[named[1]] = float(cells[3])
    spec = UNITS[unit]
    assert listed == {part.name: part.points for part in spec.parts}, (
        f"{unit}: the table says {listed}; the grader gives {({p.name: p.points for p in spec.parts})}")
