"""`python3 course.py demo`: the instructor's loop, run for real on a sample class.

In a scratch course (`.course_demo/course/`), for every graded unit: generate the student
release from `solutions/`, submit the sample students below, grade them with
`course.py autograde` (the real `nbgrader autograde` per submission, several at a time; see
nbgrader/autograde.py), generate the feedback the same way, `nbgrader export`, then print the
scores and where the feedback is. The sample submissions are made from the release and the reference each
time, so they never go stale:

    ada  the reference solution, typed into the release       full marks
    ben  the release, untouched                                 zero
    cat  the reference with the unit's typical bug              loses that part's points
    dan  a solution cell that raises before defining its part   loses that part only
    eve  a function whose body loops forever                    loses that part only
         (dan breaks the unit's first part, which later parts call; eve its last part, so
         that only one visible check cell waits out nbgrader's cell timeout)
    fay  the reference with a hidden grade cell deleted         full marks (cell restored)
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from ..engine.report import fmt
from ..nbgrader.course import ScratchCourse
from ..paths import ROOT, solution_notebook, unit_notebook_name
from ..trust.submission import nbgrader_meta
from ..units import UNITS

STUDENTS = {
    "ada": "the reference solution",
    "ben": "the untouched release",
    "cat": "a typical bug",
    "dan": "a solution cell that raises",
    "eve": "a function that loops forever",
    "fay": "a grade cell deleted",
}
# The same cases in three notebooks, for the test suite (whose time this class dominates): the
# reference with its last grade cell deleted still gets full marks, and one notebook has the
# typical bug in its part and a part that raises (each in a cell of its own), and in the class's
# first unit only, a part that loops too: a loop waits out a cell's time limit and a call's
# (about 25 s of the unit's 32), and one unit shows what any other would.
COMPACT_STUDENTS = {
    "ada": "the reference solution, a grade cell deleted",
    "ben": "the untouched release",
    "cat": "a typical bug, a part that raises (in the first unit, a part that loops too)",
}
# What each case is called, and who plays it, in each class.
ROLES = {"reference": "ada", "release": "ben", "bug": "cat", "raises": "dan", "loops": "eve", "deleted": "fay"}
COMPACT_ROLES = {"reference": "ada", "release": "ben", "bug": "cat", "raises": "cat", "loops": "cat",
                 "deleted": "ada"}


def strip_solution_markers(source: str) -> str:
    return "\n".join(
        line for line in source.splitlines() if "BEGIN SOLUTION" not in line and "END SOLUTION" not in line
    )


def defines(source: str, name: str) -> bool:
    """Whether a cell defines the function or class `name` (`class GPTConfig:` has no parentheses)."""
    return re.search(rf"^\s*(def|class)\s+{re.escape(name)}\b", source, re.MULTILINE) is not None


class SampleMaker:
    """Builds the sample students' notebooks for one unit from its release and reference."""

    def __init__(self, unit: str, release_nb: Path):
        self.unit = UNITS[unit]
        self.release = nbformat.read(release_nb, as_version=4)
        source = nbformat.read(solution_notebook(unit), as_version=4)
        self.answers = {
            nbgrader_meta(c)["grade_id"]: c.source for c in source.cells if nbgrader_meta(c).get("solution")
        }

    def notebook(self, answers: dict[str, str] | None = None, drop: str | None = None):
        nb = nbformat.from_dict(self.release)
        nb = nbformat.v4.upgrade(nb) if nb.nbformat_minor < 5 else nb
        kept = []
        for cell in nb.cells:
            grade_id = nbgrader_meta(cell).get("grade_id")
            if drop is not None and grade_id == drop:
                continue
            if answers is not None and nbgrader_meta(cell).get("solution") and grade_id in answers:
                cell.source = strip_solution_markers(answers[grade_id])
            kept.append(cell)
        nb.cells = kept
        return nb

    def cell_defining(self, part: str) -> str:
        for grade_id, source in self.answers.items():
            if defines(source, part):
                return grade_id
        raise KeyError(f"{self.unit.name}: no solution cell defines {part}")

    def with_answer(self, part: str, edit) -> dict[str, str]:
        answers = dict(self.answers)
        grade_id = self.cell_defining(part)
        answers[grade_id] = edit(answers[grade_id])
        return answers

    def broken_parts(self, compact: bool = False, loops: bool = True) -> dict[str, str]:
        """Which part raises and which loops: the first and the last part, or in the compact
        class two parts whose cells are neither the typical bug's nor each other's. There the
        loop goes in a helper the bug's part calls, if it has one (graded with the reference's
        helper in its place), else in the last such part: a looping `generate` beside a buggy
        `generate_cached` leaves the bug's points right but its mistake unnamed. Without
        `loops` (the compact class past its first unit), no part loops."""
        names = [p.name for p in self.unit.parts]
        if not compact:
            return {"raises": names[0], "loops": names[-1]}
        bug = self.unit.part(self.unit.sample_bug.part)
        free = [n for n in names if self.cell_defining(n) != self.cell_defining(bug.name)]
        looping = next((n for n in free if n in bug.uses), free[-1])
        raises = next(n for n in free if self.cell_defining(n) != self.cell_defining(looping))
        return {"raises": raises, "loops": looping} if loops else {"raises": raises}

    def students(self, compact: bool = False, loops: bool = True) -> dict[str, object]:
        """The sample students' notebooks (STUDENTS), or with `compact` the same cases in fewer
        notebooks (COMPACT_STUDENTS; `loops` says whether a part loops there)."""
        unit = self.unit
        broken = self.broken_parts(compact, loops)
        first, last = broken["raises"], broken.get("loops")
        bug = unit.sample_bug

        def typical_bug(source: str) -> str:
            if source.count(bug.old) != 1:
                raise ValueError(f"{unit.name}: the sample bug's text {bug.old!r} must occur once in the "
                                 f"cell defining {bug.part}")
            return source.replace(bug.old, bug.new)

        def raises_first(source: str) -> str:
            return 'raise RuntimeError("half-finished work: this cell stops here")\n' + source

        def loops_forever(source: str) -> str:
            lines = source.splitlines()
            at = next(i for i, line in enumerate(lines) if "BEGIN SOLUTION" in line)
            indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
            lines[at + 1: at + 1] = [f"{indent}while True:  # waiting for something that never happens",
                                     f"{indent}    pass"]
            return "\n".join(lines)

        if compact:
            everything_at_once = self.with_answer(bug.part, typical_bug)
            everything_at_once[self.cell_defining(first)] = raises_first(self.answers[self.cell_defining(first)])
            if last is not None:
                everything_at_once[self.cell_defining(last)] = loops_forever(self.answers[self.cell_defining(last)])
            return {
                "ada": self.notebook(self.answers, drop=f"grade_{unit.parts[-1].name}"),
                "ben": self.notebook(),
                "cat": self.notebook(everything_at_once),
            }
        return {
            "ada": self.notebook(self.answers),
            "ben": self.notebook(),
            "cat": self.notebook(self.with_answer(bug.part, typical_bug)),
            "dan": self.notebook(self.with_answer(first, raises_first)),
            "eve": self.notebook(self.with_answer(last, loops_forever)),
            "fay": self.notebook(self.answers, drop=f"grade_{last}"),
        }


@dataclass
class SampleClass:
    course: ScratchCourse
    units: list[str]
    # (student, unit) -> {grade cell id: (score, max_score)}
    cell_scores: dict[tuple[str, str], dict[str, tuple[float, float]]] = field(default_factory=dict)
    feedback: dict[tuple[str, str], Path] = field(default_factory=dict)
    grades_csv: Path | None = None
    autograde_logs: dict[str, str] = field(default_factory=dict)
    autograde_seconds: dict[str, float] = field(default_factory=dict)  # wall time of `nbgrader autograde`
    # (student, unit, grade cell) where the grader itself failed: an instructor's bug
    grader_failures: list[tuple[str, str, str]] = field(default_factory=list)
    # (student, unit) -> why course.py autograde could not grade it (or make its feedback)
    failures: dict[tuple[str, str], str] = field(default_factory=dict)
    seconds: float = 0.0
    students: dict[str, str] = field(default_factory=lambda: dict(STUDENTS))  # who, and what they hand in
    roles: dict[str, str] = field(default_factory=lambda: dict(ROLES))  # case -> the student who plays it
    # unit -> {"raises": part, "loops": part}: the parts the raising and looping cases break
    broken: dict[str, dict[str, str]] = field(default_factory=dict)

    def score(self, student: str, unit: str) -> tuple[float, float]:
        cells = self.cell_scores[(student, unit)].values()
        return sum(s for s, _ in cells), sum(m for _, m in cells)


def run_sample_class(workdir: Path, units: list[str] | None = None, log=print,
                     workers: int | None = None, compact: bool = False) -> SampleClass:
    """The loop on the sample class (STUDENTS; with `compact`, the same cases in fewer notebooks)."""
    from ..nbgrader.autograde import autograde_class, generate_feedback, nbgrader_failure

    workers = workers or os.cpu_count() or 1
    started = time.perf_counter()
    units = units or [u for u in UNITS if solution_notebook(u).exists()]
    if workdir.exists():
        shutil.rmtree(workdir)
    course = ScratchCourse(workdir / "course")
    course.create()
    students = COMPACT_STUDENTS if compact else STUDENTS
    result = SampleClass(course=course, units=units, students=dict(students),
                         roles=dict(COMPACT_ROLES if compact else ROLES))
    for unit in units:
        name = unit_notebook_name(unit)
        log(f"[{unit}] generate_assignment")
        course.generate_assignment(unit)
        maker = SampleMaker(unit, course.release / unit / name)
        loops = not compact or unit == units[0]
        result.broken[unit] = maker.broken_parts(compact, loops)
        for student, nb in maker.students(compact, loops).items():
            path = workdir / "samples" / student / unit / name
            path.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, path)
            course.submit(student, unit, path, name)
        log(f"[{unit}] autograde {len(students)} sample submissions, {workers} at a time (course.py autograde)")
        started_unit = time.perf_counter()
        progress = io.StringIO()
        run = autograde_class(course.path, unit, workers=workers, stream=progress)
        result.autograde_seconds[unit] = time.perf_counter() - started_unit
        result.autograde_logs[unit] = progress.getvalue()
        result.failures.update({(student, unit): reason for student, reason in run.failures.items()})
        if compact:  # the suite's class: one nbgrader process for the unit's pages (6 s, not 6 s a student)
            log(f"[{unit}] generate_feedback")
            proc = course.nbgrader("generate_feedback", unit, "--force", check=False, timeout=600)
            if proc.returncode != 0:
                for student in students:
                    result.failures[(student, unit)] = f"feedback: {nbgrader_failure(proc.stdout + proc.stderr)}"
        else:
            log(f"[{unit}] generate_feedback, {workers} at a time")
            for student, reason in generate_feedback(course.path, unit, sorted(students), workers).items():
                result.failures[(student, unit)] = f"feedback: {reason}"
    result.grades_csv = course.path / "grades.csv"
    course.export(result.grades_csv)
    with course.gradebook() as gb:
        for unit in units:
            notebook_id = unit_notebook_name(unit).removesuffix(".ipynb")
            for student in students:
                try:
                    submission = gb.find_submission_notebook(notebook_id, unit, student)
                except Exception:  # noqa: BLE001 - a student whose kernel died has no entry
                    result.cell_scores[(student, unit)] = {}
                    continue
                result.cell_scores[(student, unit)] = {
                    g.name: (float(g.score or 0.0), float(g.max_score)) for g in submission.grades
                }
                graded_nb = course.path / "autograded" / student / unit / unit_notebook_name(unit)
                graded_cells = nbformat.read(graded_nb, as_version=4).cells if graded_nb.exists() else []
                for cell in graded_cells:
                    text = "".join(o.get("text", "") for o in cell.get("outputs", []))
                    if "the grader could not check" in text:
                        result.grader_failures.append((student, unit, nbgrader_meta(cell).get("grade_id")))
                feedback = course.path / "feedback" / student / unit / f"{notebook_id}.html"
                if feedback.exists():
                    result.feedback[(student, unit)] = feedback
    result.seconds = time.perf_counter() - started
    return result


def score_table(result: SampleClass) -> str:
    width = max(len(f"{s}  {d}") for s, d in result.students.items()) + 2
    header = "student".ljust(width) + "".join(u.rjust(16) for u in result.units)
    lines = [header, "-" * len(header)]
    for student, what in result.students.items():
        row = f"{student}  {what}".ljust(width)
        for unit in result.units:
            score, max_score = result.score(student, unit)
            row += f"{fmt(score)}/{fmt(max_score)}".rjust(16)
        lines.append(row)
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder demo", description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", default=str(ROOT / ".course_demo"), help="scratch folder (wiped first)")
    parser.add_argument("--units", nargs="*", help="units to run (default: every graded unit)")
    args = parser.parse_args(argv)
    result = run_sample_class(Path(args.workdir), args.units)
    print()
    print(score_table(result))
    print()
    for unit in result.units:
        print(f"Per-cell scores for {unit}:")
        for student in result.students:
            cells = result.cell_scores[(student, unit)]
            parts = ", ".join(
                f"{cell.removeprefix('grade_')} {fmt(s)}/{fmt(m)}" for cell, (s, m) in cells.items()
            )
            print(f"  {student}: {parts or 'not graded (see the autograde log)'}")
    feedback_root = result.course.path / "feedback"
    print(f"\nFeedback pages ({len(result.feedback)}): {feedback_root}/<student>/<unit>/<notebook>.html")
    print(f"  e.g. {next(iter(result.feedback.values()), 'none')}")
    print(f"Grades exported to: {result.grades_csv}")
    with open(result.grades_csv) as f:
        rows = list(csv.DictReader(f))
    print(f"  ({len(rows)} rows: one per student and assignment)")
    timings = ", ".join(f"{unit} {seconds:.1f} s" for unit, seconds in result.autograde_seconds.items())
    print(f"\n`course.py autograde` of {len(result.students)} students: {timings}; "
          f"{sum(result.autograde_seconds.values()):.1f} s in all.")
    for (student, unit), reason in sorted(result.failures.items()):
        print(f"NOT GRADED: {student} in {unit}: {reason}")
    print(f"The whole loop took {result.seconds:.0f} s.")
    for student, unit, cell in result.grader_failures:
        print(f"WARNING: the grader itself failed for {student}, {unit}, {cell}: see its autograded notebook.")
    return 1 if result.grader_failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
