"""The nbgrader glue: one place for the course's nbgrader settings, and a scratch course
folder in which the build and the sample class run the real nbgrader commands.

The course root's `nbgrader_config.py` calls `configure(c, root)`; so does every scratch
course, so the instructor's setup and the tests run nbgrader the same way.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from ..paths import ROOT, SOLUTIONS
from ..trust.sandbox import CELL_SECONDS


def validate_kernel_manager():
    """The kernel manager of Validate's kernel (nbgrader's Execute, in `nbgrader validate` and
    behind the lab's Validate button): that kernel, and only that one, draws figures off screen
    (no window to show them in) and is told how long a grade cell may wait for the hidden
    graders' verdict (coursekit.feedback.validate_part). Set in the process's environment
    instead, both would reach every kernel the lab starts: no chapter would show a figure."""
    from jupyter_client import AsyncKernelManager

    from coursekit.feedback import VALIDATE_WAIT_ENV

    from .grades import GRADE_CELL_VALIDATE_SECONDS

    class ValidateKernelManager(AsyncKernelManager):
        async def start_kernel(self, **kw):
            kw["env"] = {**kw.get("env", os.environ), "MPLBACKEND": "Agg",
                         VALIDATE_WAIT_ENV: str(GRADE_CELL_VALIDATE_SECONDS - 30)}
            return await super().start_kernel(**kw)

    return ValidateKernelManager


def restore_deleted_grade_cells_preprocessor():
    """nbgrader's OverwriteCells, with a restore of deleted grade cells that works, and a
    notebook with duplicated grade cells graded rather than dropped.

    nbgrader 0.9.6 re-inserts a deleted grade cell after the source cell before it, but
    looks that cell up among grade and solution cells only. When a locked read-only cell
    (our visible checks) comes first it raises KeyError, and the student's whole notebook
    goes ungraded. This version puts the cell after the nearest earlier cell still there.
    """
    from nbgrader.api import MissingEntry
    from nbgrader.preprocessors import OverwriteCells
    from traitlets import Bool

    class RestoreDeletedGradeCells(OverwriteCells):
        add_missing_cells = Bool(True).tag(config=True)

        def preprocess(self, nb, resources):
            # DeduplicateIds leaves `nbgrader: {}` on every duplicate of a cell, and
            # nbgrader's restore of task cells then raises KeyError on it: that student's
            # whole notebook would go ungraded. An empty dict means an ordinary cell.
            for cell in nb.cells:
                if cell.get("metadata", {}).get("nbgrader") == {}:
                    del cell.metadata["nbgrader"]
            return super().preprocess(nb, resources)

        def preprocess_cell(self, cell, resources, cell_index):
            # A cell claiming a grade_id the gradebook does not know (a student's own cell
            # marked locked, say): nbgrader deletes the id only, and the nbgrader metadata left
            # without one stops that student's whole notebook further on. It is an ordinary cell.
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if grade_id is not None:
                try:
                    self.gradebook.find_source_cell(grade_id, self.notebook_id, self.assignment_id)
                except MissingEntry:
                    self.log.warning("Cell %r is not in the gradebook: graded as an ordinary cell", grade_id)
                    del cell.metadata["nbgrader"]
                    return cell, resources
            return super().preprocess_cell(cell, resources, cell_index)

        def add_missing_grade_cells(self, nb, resources):
            source_nb = self.gradebook.find_notebook(self.notebook_id, self.assignment_id)
            source_cells = source_nb.source_cells
            order = [cell.name for cell in source_cells]
            solution_ids = {cell.name for cell in source_nb.solution_cells}

            def position(grade_id):
                for index, cell in enumerate(nb.cells):
                    if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
                        return index
                return None

            for grade_cell in sorted(source_nb.grade_cells, key=lambda g: order.index(g.name)):
                if position(grade_cell.name) is not None:
                    continue
                self.log.warning(f"Missing grade cell {grade_cell.name}: adding it back")
                at = order.index(grade_cell.name)
                insert_at = next(
                    (position(name) + 1 for name in reversed(order[:at]) if position(name) is not None), 0
                )
                cell = self.missing_cell_transform(
                    source_cells[at], grade_cell.max_score, is_solution=grade_cell.name in solution_ids
                )
                nb.cells.insert(insert_at, cell)
            return nb, resources

    return RestoreDeletedGradeCells


def repair_metadata_preprocessor():
    """A sanitizer that runs first: a cell whose nbgrader metadata is malformed loses it.

    nbgrader 0.9.6 raises out of its sanitizers on a `schema_version` that is missing or not
    3, and for one that is too old or too new it stops `nbgrader autograde` for every
    student after this one. A cell
    stripped of bad metadata is an ordinary cell: its code still runs and is graded, and a
    grade cell it was is restored from the gradebook like a deleted one.
    """
    from nbconvert.preprocessors import Preprocessor

    FIELDS = {"grade": bool, "solution": bool, "locked": bool, "task": bool, "grade_id": str,
              "schema_version": int, "points": (int, float), "checksum": str, "cell_type": str}

    def well_formed(meta) -> bool:
        # A missing schema_version reads as 0 to nbgrader, which then aborts the whole run
        # (SchemaTooOldError), as does 4; a missing grade_id raises in OverwriteCells.
        if not isinstance(meta, dict) or "grade_id" not in meta or "schema_version" not in meta:
            return False
        typed = all(isinstance(meta[key], kind) and not (kind is int and isinstance(meta[key], bool))
                    for key, kind in FIELDS.items() if key in meta)
        return typed and meta["schema_version"] == 3

    class RepairMetadata(Preprocessor):
        enabled = True

        def preprocess(self, nb, resources):
            for cell in nb.cells:
                meta = cell.get("metadata", {})
                if "nbgrader" in meta and not well_formed(meta["nbgrader"]):
                    self.log.warning("Dropping malformed nbgrader metadata of a cell: %r", meta["nbgrader"])
                    del meta["nbgrader"]
            return nb, resources

    return RepairMetadata


def unit_limits(assignment: str | None):
    """(seconds one cell of the assignment may run, its page's Budget) where it is a unit of the
    course, else (None, None): what the sandboxed kernel is told (it imports no unit itself)."""
    from ..units import UNITS

    if assignment not in UNITS:
        return None, None
    unit = UNITS[assignment]
    return unit.cell_seconds, unit.page_budget


def configure(c, root: Path) -> None:
    """Apply the course's nbgrader settings to the traitlets config `c`."""
    from nbgrader.preprocessors import (
        AssignLatePenalties,
        CheckCellMetadata,
        ClearHiddenTests,
        ClearOutput,
        DeduplicateIds,
        GetGrades,
        LimitOutput,
        OverwriteKernelspec,
        SaveAutoGrades,
    )

    from ..trust.inert import InertFeedbackExporter, InertNotebook
    from ..trust.kernel import SandboxedExecute, SandboxedKernelManager
    from .grades import FillGradeCells, InertOutputs, StartTrustedGrading, validate_timeout

    c.CourseDirectory.root = str(root)
    c.CourseDirectory.course_id = "transformer-course"
    c.CourseDirectory.source_directory = "solutions"
    c.CourseDirectory.release_directory = "exercises"
    # Nothing but the notebooks goes to students (nbgrader copies every other file it finds).
    c.CourseDirectory.ignore = [
        ".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "*.py", "*.yml", "*.db",
    ]
    # A student who deletes a grade cell gets it back and graded, not a silent zero.
    c.Autograde.sanitize_preprocessors = [
        repair_metadata_preprocessor(), ClearOutput, DeduplicateIds, OverwriteKernelspec,
        restore_deleted_grade_cells_preprocessor(), CheckCellMetadata,
    ]
    # The student's kernel runs in the sandbox; the grades come from the hidden pytest
    # graders, started before the kernel and written into the grade cells after it.
    # The notebook written to autograded/ is what formgrader renders for the instructor, with
    # a template of its own that nothing cleans afterwards: InertOutputs and InertNotebook
    # make it inert in itself. InertNotebook rewrites markdown sources, so it comes after
    # SaveAutoGrades, which scores an unchanged markdown answer 0 by its checksum (class
    # grading reads the written notebook with SaveAutoGrades again; it matters for markdown
    # answer cells only, and the course's notebooks have none). (nbgrader's
    # IgnorePattern and ClearMetadataPreprocessor are disabled unless switched on: listed, they
    # did nothing. FillGradeCells writes every grade cell's outputs, and InertNotebook trims
    # the metadata.)
    c.Autograde.autograde_preprocessors = [
        StartTrustedGrading, SandboxedExecute, LimitOutput, InertOutputs, FillGradeCells,
        SaveAutoGrades, AssignLatePenalties, InertNotebook, CheckCellMetadata,
    ]
    c.Execute.timeout = int(CELL_SECONDS)
    # Validate (the toolbar button, `nbgrader validate`): grade cells report the visible checks and
    # the hidden graders' verdict (coursekit.feedback.validate_part), so they get longer to run,
    # and the kernel (which inherits this process's environment) is told how long it may wait.
    c.Execute.timeout_func = validate_timeout
    c.SandboxedExecute.timeout_func = None
    # Nothing here may change a student's kernel: these settings are also read by the Jupyter
    # server that `course.py lab` (or `jupyter lab` in the course folder) starts, and every kernel
    # it starts inherits the server's environment. What Validate's kernel needs goes to it alone.
    c.Execute.kernel_manager_class = validate_kernel_manager()
    c.SandboxedExecute.kernel_manager_class = SandboxedKernelManager  # a section of its own outranks its parent's
    c.SandboxedExecute.unit_limits = unit_limits
    # Feedback: keep the hidden part of grade cells hidden. The autograded notebook is not
    # trusted to be inert: its outputs and cells are made inert again, and the exporter cleans
    # the rendered page's body after rendering (nbgrader's SanitizeHTML, disabled unless
    # switched on, cleans markdown before it is rendered, which lets `[x](javascript:...)`
    # through: it is replaced, not listed. CSSHTMLHeaderPreprocessor is not listed either:
    # a listed copy is disabled, and the template, nbconvert's classic, runs its own.)
    c.GenerateFeedback.preprocessors = [GetGrades, ClearHiddenTests, InertOutputs, InertNotebook]
    c.GenerateFeedback.exporter_class = InertFeedbackExporter


CONFIG_TEMPLATE = """\
# Written by autograder.nbgrader.course: a scratch course that uses the course's settings.
import sys
sys.path.insert(0, {root!r})
from autograder.nbgrader.course import configure
configure(get_config(), {here!r})
c = get_config()
c.CourseDirectory.release_directory = "release"
"""


class NbgraderFailed(RuntimeError):
    pass


class ScratchCourse:
    """A throwaway nbgrader course whose source directory is the course's `solutions/`."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.release = self.path / "release"

    def create(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / "nbgrader_config.py").write_text(
            CONFIG_TEMPLATE.format(root=str(ROOT), here=str(self.path))
        )
        link = self.path / "solutions"
        if not link.exists():
            link.symlink_to(SOLUTIONS, target_is_directory=True)

    def nbgrader(self, *args: str, check: bool = True, timeout: float | None = None) -> subprocess.CompletedProcess:
        # nbgrader runs helper programs (alembic) from PATH: put this environment's first.
        path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
        env = dict(os.environ, PYTHONPATH=str(ROOT), MPLBACKEND="Agg", PATH=path)
        proc = subprocess.run(
            [sys.executable, "-m", "nbgrader", *args],
            cwd=self.path, env=env, capture_output=True, text=True, timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise NbgraderFailed(f"nbgrader {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
        return proc

    def generate_assignment(self, unit: str) -> None:
        self.nbgrader("generate_assignment", unit, "--force", "--create")

    def submit(self, student: str, unit: str, notebook, name: str) -> Path:
        """Hand in `notebook` (a file's path, raw bytes or a notebook node) where nbgrader
        looks for `student`'s submission of `unit`."""
        target = self.path / "submitted" / student / unit / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(notebook, bytes):
            target.write_bytes(notebook)
        elif isinstance(notebook, (str, Path)):
            shutil.copyfile(notebook, target)
        else:
            import nbformat

            nbformat.write(notebook, target)
        return target

    def autograde(self, unit: str, timeout: float | None = None) -> subprocess.CompletedProcess:
        # Exit status 1 when a student's kernel died; the others are still graded.
        return self.nbgrader("autograde", unit, "--create", "--force", check=False, timeout=timeout)

    def generate_feedback(self, unit: str) -> None:
        self.nbgrader("generate_feedback", unit, "--force")

    def export(self, path: Path) -> None:
        self.nbgrader("export", "--to", str(path))

    def gradebook(self):
        from nbgrader.api import Gradebook

        return Gradebook(f"sqlite:///{self.path / 'gradebook.db'}")
