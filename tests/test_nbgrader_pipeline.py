"""The instructor's loop through real nbgrader commands, on the sample class (see
autograder/tools/demo.py for who the students are; the suite grades its compact form, the same cases
in three notebooks a unit, with the looping part in the first unit only, so each test asks
which student plays the case it checks and which parts each unit's cases broke)."""

from __future__ import annotations

import csv
import re

import nbformat
import pytest

from autograder.paths import solution_notebook, unit_notebook_name
from autograder.units import UNITS

GRADED = [u for u in UNITS if solution_notebook(u).exists()]
pytestmark = [pytest.mark.nbgrader, pytest.mark.xdist_group("sample_class")]


def cells(sample_class, student, unit):
    return sample_class.cell_scores[(student, unit)]


def autograded(sample_class, student, unit):
    path = sample_class.course.path / "autograded" / student / unit / unit_notebook_name(unit)
    return nbformat.read(path, as_version=4)


@pytest.mark.parametrize("unit", GRADED)
def test_reference_gets_full_marks(sample_class, unit):
    scores = cells(sample_class, sample_class.roles["reference"], unit)
    assert {c.removeprefix("grade_") for c in scores} >= {p.name for p in UNITS[unit].parts}
    assert all(s == m for s, m in scores.values()), scores
    assert sample_class.score(sample_class.roles["reference"], unit) == (UNITS[unit].points, UNITS[unit].points)


@pytest.mark.parametrize("unit", GRADED)
def test_untouched_release_gets_zero_everywhere(sample_class, unit):
    scores = cells(sample_class, sample_class.roles["release"], unit)
    assert scores and all(s == 0 for s, _ in scores.values()), scores
    # Every check of every grade cell failed for the reason it did: nothing is written yet.
    graded = autograded(sample_class, sample_class.roles["release"], unit)
    for cell in graded.cells:
        if str(cell.metadata.get("nbgrader", {}).get("grade_id", "")).startswith("grade_"):
            lines = [line for o in cell.outputs for line in o.get("text", "").splitlines()]
            checks = [line for line in lines if line.lstrip().startswith(("ok", "FAIL"))]
            assert checks and all(line.lstrip().startswith("FAIL") for line in checks), lines
            assert all("NotImplementedError" in line or "same problem as above" in line for line in checks), lines


@pytest.mark.parametrize("unit", GRADED)
def test_typical_bug_loses_its_points_and_is_named(sample_class, unit):
    bug = UNITS[unit].sample_bug
    scores = cells(sample_class, sample_class.roles["bug"], unit)
    assert scores[f"grade_{bug.part}"][0] < scores[f"grade_{bug.part}"][1]
    graded = autograded(sample_class, sample_class.roles["bug"], unit)
    text = "\n".join(o.get("text", "") for c in graded.cells if c.cell_type == "code" for o in c.outputs)
    description = next(m for m in UNITS[unit].misconceptions if m.name == bug.expect).description
    assert description in text


@pytest.mark.parametrize("unit", GRADED)
def test_raising_or_looping_cell_costs_only_its_part(sample_class, unit):
    broken: dict[str, set[str]] = {}
    for role, part in sample_class.broken[unit].items():
        broken.setdefault(sample_class.roles[role], set()).add(f"grade_{part}")
    bug = (sample_class.roles["bug"], f"grade_{UNITS[unit].sample_bug.part}")  # the compact class's third case
    for student, cells_broken in broken.items():
        scores = cells(sample_class, student, unit)
        assert cells_broken <= set(scores), (student, scores)
        for cell, (score, max_score) in scores.items():
            if cell in cells_broken:
                assert score == 0, (student, cell)
            elif (student, cell) != bug:
                assert score == max_score, (student, cell, score)


def test_the_class_has_a_part_that_loops_and_one_that_raises(sample_class):
    """The compact class loops in one unit only: that one must still be there."""
    assert any("loops" in broken for broken in sample_class.broken.values()), sample_class.broken
    assert all("raises" in broken for broken in sample_class.broken.values()), sample_class.broken


@pytest.mark.parametrize("unit", GRADED)
def test_deleted_grade_cell_is_restored_and_graded(sample_class, unit):
    student = sample_class.roles["deleted"]
    scores = cells(sample_class, student, unit)
    last = f"grade_{UNITS[unit].parts[-1].name}"
    assert last in scores and scores[last][0] == scores[last][1]
    restored = [c for c in autograded(sample_class, student, unit).cells if "was missing" in c.source]
    assert restored


@pytest.mark.parametrize("unit", GRADED)
def test_grade_cells_write_nothing_to_stderr_and_end_with_a_float(sample_class, unit):
    for student in sample_class.students:
        for cell in autograded(sample_class, student, unit).cells:
            if not cell.metadata.get("nbgrader", {}).get("grade") or cell.metadata["nbgrader"].get("points", 0) == 0:
                continue
            if "grade_" not in cell.metadata["nbgrader"]["grade_id"]:
                continue
            kinds = [(o.output_type, o.get("name")) for o in cell.outputs]
            assert ("stream", "stderr") not in kinds and "error" not in [k for k, _ in kinds], (student, kinds)
            result = [o for o in cell.outputs if o.output_type == "execute_result"]
            assert len(result) == 1
            float(result[0]["data"]["text/plain"])


@pytest.mark.parametrize("unit", GRADED)
def test_feedback_shows_messages_but_no_traceback_or_test_source(sample_class, unit):
    for student in sample_class.students:
        html = sample_class.feedback[(student, unit)].read_text(encoding="utf-8")
        for secret in ("BEGIN HIDDEN TESTS", "from autograder", "grade(&quot;", "grade(\"", "most recent call last"):
            assert secret not in html, (student, secret)
        assert "points" in html
    cat = sample_class.feedback[(sample_class.roles["bug"], unit)].read_text(encoding="utf-8")
    assert re.search(r"This looks like", cat)


def test_the_grader_never_failed_itself(sample_class):
    assert sample_class.grader_failures == []
    assert sample_class.failures == {}  # every submission graded, every feedback page made


def test_grades_are_exported_for_everyone(sample_class):
    with open(sample_class.grades_csv) as f:
        rows = list(csv.DictReader(f))
    assert {(r["student_id"], r["assignment"]) for r in rows} >= {
        (s, u) for s in sample_class.students for u in GRADED
    }
    reference = [r for r in rows if r["student_id"] == sample_class.roles["reference"]]
    assert all(float(r["score"]) == float(r["max_score"]) for r in reference)
