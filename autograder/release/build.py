"""`python3 course.py build [--check] [--checkpoint]`: bring every generated part of the course up to date.

1. Quiz cells in chapters and solutions are rewritten from `quizzes/<unit>.yml`.
2. Grade cells in solutions get their source and points from the unit's grader
   (`autograder/units/`), so the points a notebook claims are the points the grader gives.
3. Outputs and execution counts are stripped (notebooks are committed clean).
4. `exercises/<unit>/` is regenerated with `nbgrader generate_assignment`.

With `--check` nothing is written: it lists what is stale and exits 1 if anything is.
With `--checkpoint` it first retrains `coursekit/data/tiny_gpt.pt`, the small trained model
chapter 06 samples from (`autograder/release/pretrain.py`, about two minutes on two cores).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import nbformat

from ..paths import COURSE_UNITS, EXERCISES, ROOT, chapter_notebook, solution_notebook
from .quizzes import sync_quiz_cells


def clean_outputs(nb) -> None:
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cell.metadata.pop("execution", None)
        cell.metadata.pop("ExecuteTime", None)


def check_locked_cells(nb, where: str) -> None:
    """Every locked cell that is not a grade cell says by its name what it is: the grader's
    worker runs `setup*` cells and leaves out checks, figures and demos (see submission.py)."""
    from ..trust.submission import SETUP_PREFIX, SHOWS_ONLY_PREFIXES, nbgrader_meta

    allowed = (SETUP_PREFIX, *SHOWS_ONLY_PREFIXES)
    wrong = [str(meta.get("grade_id")) for meta in map(nbgrader_meta, nb.cells)
             if meta.get("locked") and not meta.get("grade") and not meta.get("solution")
             and not str(meta.get("grade_id", "")).startswith(allowed)]
    if wrong:
        raise ValueError(f"{where}: locked cell(s) {', '.join(wrong)} must be named {'*, '.join(allowed)}* "
                         "(setup cells run before the answers are graded; the others are left out)")


def built_notebook(path: Path, unit: str, is_solution: bool):
    nb = nbformat.read(path, as_version=4)
    sync_quiz_cells(nb, unit, str(path.relative_to(ROOT)))
    if is_solution:
        from .gradecells import sync_feedback_cells, sync_grade_cells

        sync_grade_cells(nb, unit, str(path.relative_to(ROOT)))
        sync_feedback_cells(nb, unit)
        check_locked_cells(nb, str(path.relative_to(ROOT)))
    clean_outputs(nb)
    return nb


def notebook_text(nb) -> str:
    return nbformat.writes(nb) + "\n"


def build_release(units: list[str], release_dir: Path) -> None:
    """Run nbgrader generate_assignment for `units` into `release_dir` (a scratch course)."""
    from ..nbgrader.course import ScratchCourse

    course = ScratchCourse(release_dir.parent / "course")
    course.create()
    for unit in units:
        course.generate_assignment(unit)
        shutil.copytree(course.release / unit, release_dir / unit, dirs_exist_ok=True)


def compare_trees(built: Path, committed: Path) -> list[str]:
    stale = []
    built_files = {p.relative_to(built) for p in built.rglob("*") if p.is_file()}
    committed_files = {p.relative_to(committed) for p in committed.rglob("*") if p.is_file()}
    for rel in sorted(built_files | committed_files):
        a, b = built / rel, committed / rel
        if not a.exists() or not b.exists() or a.read_bytes() != b.read_bytes():
            stale.append(f"exercises/{rel}")
    return stale


class BuildError(Exception):
    pass


def build(check: bool = False) -> list[str]:
    """Bring notebooks and the release up to date; return the paths that were (or are) stale.

    Raises BuildError listing every notebook that cannot be built (a quiz or grade cell
    with no source to build it from).
    """
    stale: list[str] = []
    errors: list[str] = []
    units = COURSE_UNITS
    for unit in units:
        for path, is_solution in ((chapter_notebook(unit), False), (solution_notebook(unit), True)):
            if not path.exists():
                continue
            try:
                text = notebook_text(built_notebook(path, unit, is_solution))
            except (KeyError, ValueError) as err:
                errors.append(err.args[0] if err.args else str(err))
                continue
            if path.read_text(encoding="utf-8") != text:
                stale.append(str(path.relative_to(ROOT)))
                if not check:
                    path.write_text(text, encoding="utf-8")
    if errors:
        raise BuildError("\n".join(errors))
    graded = [u for u in units if solution_notebook(u).exists()]
    if not graded:
        return stale
    with tempfile.TemporaryDirectory() as tmp:
        release = Path(tmp) / "release"
        release.mkdir()
        build_release(graded, release)
        differences = compare_trees(release, EXERCISES)
        stale += differences
        if differences and not check:
            shutil.rmtree(EXERCISES, ignore_errors=True)
            shutil.copytree(release, EXERCISES)
    return stale


def main(argv: list[str]) -> int:
    check = "--check" in argv
    if "--checkpoint" in argv and not check:
        from .pretrain import train_checkpoint

        train_checkpoint()
    try:
        stale = build(check=check)
    except BuildError as err:
        print(f"Cannot build:\n{err}", file=sys.stderr)
        return 1
    if check:
        if stale:
            print("Stale (run `python3 course.py build`):\n  " + "\n  ".join(stale))
            return 1
        print("Everything generated is up to date.")
        return 0
    print("Rebuilt:\n  " + "\n  ".join(stale) if stale else "Everything was already up to date.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
