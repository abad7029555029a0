"""Chapters teach the idea; they never hand over a graded function (issue 10, point 1), and
neither do the exercises' visible check cells (issue 18).

Every reading chapter's code runs as a student's submission would (in the sandboxed worker),
and every function or class it defines is graded in the place of every graded part of every
unit, whatever its name. The best that chapter code alone can earn must stay at most a fifth
of each unit's points. A function or class defined in an exercise's visible check cell (an
oracle written another way, say) must earn nothing at all in place of a graded part: pasted
into the answer cell above it, it would be the answer.
"""

from __future__ import annotations

import ast
import inspect

import nbformat
import pytest

from autograder.engine.grade import grade_part
from autograder.engine.reference import load_reference
from autograder.paths import COURSE_UNITS, chapter_notebook, release_notebook, solution_notebook
from autograder.trust.student import Student
from autograder.units import UNITS

MOST = 0.20  # of a unit's points
GRADED = [u for u in UNITS if solution_notebook(u).exists()]


def chapter_cells(unit: str) -> list[tuple[str, str]]:
    """The chapter's code cells (not its quiz cells), without IPython's % and ! lines."""
    nb = nbformat.read(chapter_notebook(unit), as_version=4)
    cells = [("matplotlib", "import matplotlib\nmatplotlib.use('Agg')")]
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and "quiz" not in cell.metadata:
            source = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))
            cells.append((f"{chapter_notebook(unit).name} cell {index}", source))
    return cells


def definitions(cells) -> dict[str, ast.AST]:
    """Top-level functions and classes the chapter defines, by name."""
    found = {}
    for _, source in cells:
        for node in ast.parse(source).body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                found[node.name] = node
    return found


def could_stand_in(node: ast.AST, reference) -> bool:
    """Whether a definition could even be called as the part is: a class for a class, and a
    function whose parameters can take the reference's required arguments."""
    if isinstance(reference, type) != isinstance(node, ast.ClassDef):
        return False
    if isinstance(node, ast.ClassDef):
        return True
    params = inspect.signature(reference).parameters.values()
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    needed = sum(p.default is p.empty for p in positional)
    own = node.args.posonlyargs + node.args.args
    own_needed = len(own) - len(node.args.defaults)
    return own_needed <= len(positional) and (len(own) >= needed or node.args.vararg is not None)


class StandIn:
    """The chapter's worker, with one of its definitions answering to a part's name."""

    def __init__(self, student: Student, part: str, name: str):
        self.student, self.part, self.name = student, part, name
        self.notes: list[str] = []

    def _own(self, name):
        return self.name if name == self.part else name

    def kind(self, name):
        return self.student.kind(self._own(name))

    def call(self, name, *args, **kwargs):
        return self.student.call(self._own(name), *args, **kwargs)

    def new(self, name, *args, **kwargs):
        return self.student.new(self._own(name), *args, **kwargs)

    def __getattr__(self, attr):
        return getattr(self.student, attr)


@pytest.fixture(scope="session")
def chapters():
    """unit -> (the chapter's worker, its definitions), for chapters that define anything."""
    started = {}
    for unit in COURSE_UNITS:
        if not chapter_notebook(unit).exists():
            continue
        cells = chapter_cells(unit)
        defined = definitions(cells)
        if defined:
            student = Student(cells, cell_seconds=120.0)
            student.start()
            started[unit] = (student, defined)
    yield started
    for student, _ in started.values():
        student.close()


@pytest.mark.xdist_group("chapter_code")
@pytest.mark.parametrize("unit", GRADED)
def test_chapter_code_alone_earns_at_most_a_fifth_of_a_unit(unit, chapters):
    spec = UNITS[unit]
    ref = load_reference(unit)
    best = {}
    for part in spec.parts:
        best[part.name] = (0.0, None)
        for chapter, (student, defined) in chapters.items():
            for name, node in defined.items():
                if not could_stand_in(node, getattr(ref, part.name)):
                    continue
                results = grade_part(spec, part.name, StandIn(student, part.name, name), name_mistakes=False)
                earned = sum(r.points for r in results)
                if earned > best[part.name][0]:
                    best[part.name] = (earned, f"{chapter}:{name}")
    total = sum(points for points, _ in best.values())
    print(f"{unit}: chapter code alone earns {total:g} of {spec.points:g}",
          {part: f"{points:g} ({where})" for part, (points, where) in best.items() if where})
    assert total <= MOST * spec.points, (
        f"chapter code alone earns {total:g} of {spec.points:g} points in {unit}: "
        f"{ {part: where for part, (points, where) in best.items() if points} }")


def test_the_check_would_catch_a_chapter_that_hands_over_a_graded_function():
    # A chapter cell with the stable softmax under another name: graded as `softmax`, it earns
    # the part's points, over a fifth of unit 01.
    cells = [("cell 1", "import numpy as np\n\ndef normalise_rows(z, axis=-1):\n"
                        "    e = np.exp(z - z.max(axis=axis, keepdims=True))\n"
                        "    return e / e.sum(axis=axis, keepdims=True)\n")]
    spec, ref = UNITS["01_attention"], load_reference("01_attention")
    (name, node), = definitions(cells).items()
    assert could_stand_in(node, ref.softmax) and not could_stand_in(node, ref.self_attention)
    with Student(cells) as student:
        student.start()
        earned = sum(r.points for r in grade_part(spec, "softmax", StandIn(student, "softmax", name),
                                                  name_mistakes=False))
    assert earned == spec.part("softmax").points > MOST * spec.points


def check_cell_definitions(unit: str) -> list[tuple[str, str]]:
    """The release notebook's setup cells, then every import, function and class of its visible
    check cells, each as a cell of its own: the definitions, without the checks that call the
    (unanswered) parts."""
    nb = nbformat.read(release_notebook(unit), as_version=4)
    cells = [("matplotlib", "import matplotlib\nmatplotlib.use('Agg')")]
    for cell in nb.cells:
        grade_id = str(cell.metadata.get("nbgrader", {}).get("grade_id", ""))
        if cell.cell_type != "code":
            continue
        if grade_id.startswith("setup"):
            cells.append((grade_id, cell.source))
        elif grade_id.startswith("check_"):
            for node in ast.parse(cell.source).body:
                if isinstance(node, ast.Import | ast.ImportFrom | ast.FunctionDef | ast.ClassDef):
                    cells.append((f"{grade_id}: line {node.lineno}", ast.get_source_segment(cell.source, node)))
    return cells


def earned_in_place_of_parts(unit: str, cells) -> dict[str, float]:
    """"part <- definition" -> the points it earns on the part's value checks (inputs-unchanged
    checks left out: any function that leaves its arguments alone passes those)."""
    spec, ref = UNITS[unit], load_reference(unit)
    # Only the check cells' own definitions: what the setup cells define is given to the student anyway.
    defined = definitions([(label, source) for label, source in cells if label.startswith("check_")])
    earned = {}
    with Student(cells, cell_seconds=120.0) as student:
        student.start()
        for part in spec.parts:
            for name, node in defined.items():
                if not could_stand_in(node, getattr(ref, part.name)):
                    continue
                results = grade_part(spec, part.name, StandIn(student, part.name, name), name_mistakes=False)
                kinds = {f"{part.name}/{c.name}": c.kind for c in part.checks}
                points = sum(r.points for r in results if kinds[r.name] != "unchanged")
                if points:
                    earned[f"{part.name} <- {name}"] = points
    return earned


@pytest.mark.parametrize("unit", GRADED)
def test_no_visible_check_cell_holds_a_graded_function(unit):
    earned = earned_in_place_of_parts(unit, check_cell_definitions(unit))
    assert not earned, f"a function of {unit}'s visible check cells earns points in place of a graded part: {earned}"


def test_the_check_cell_test_would_catch_a_check_cell_that_hands_over_a_graded_function():
    # A visible check that compares the student's softmax with one written another way: that
    # other way, pasted into the answer cell, is the answer.
    cells = [("check_softmax: line 1", "import numpy as np\n\ndef softmax_by_logsumexp(z, axis=-1):\n"
                                       "    m = z.max(axis=axis, keepdims=True)\n"
                                       "    log_total = np.log(np.exp(z - m).sum(axis=axis, keepdims=True))\n"
                                       "    return np.exp(z - m - log_total)\n")]
    earned = earned_in_place_of_parts("01_attention", cells)
    softmax = UNITS["01_attention"].part("softmax")
    value_points = sum(c.points for c in softmax.checks if c.kind != "unchanged")
    assert earned.get("softmax <- softmax_by_logsumexp", 0) == value_points > 0
