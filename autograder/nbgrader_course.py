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

from .paths import ROOT, SOLUTIONS

# Seconds a single cell may run in nbgrader's kernel. The graders stop a looping student
# function after a few seconds themselves; this is the backstop for everything else.
CELL_TIMEOUT = 120


def configure(c, root: Path) -> None:
    """Apply the course's nbgrader settings to the traitlets config `c`."""
    from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
    from nbgrader.preprocessors import ClearHiddenTests, GetGrades

    c.CourseDirectory.root = str(root)
    c.CourseDirectory.course_id = "transformer-course"
    c.CourseDirectory.source_directory = "solutions"
    c.CourseDirectory.release_directory = "exercises"
    # Nothing but the notebooks goes to students (nbgrader copies every other file it finds).
    c.CourseDirectory.ignore = [
        ".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", "*.py", "*.yml", "*.db",
    ]
    # A student who deletes a grade cell gets it back and graded, not a silent zero.
    c.OverwriteCells.add_missing_cells = True
    c.Execute.timeout = CELL_TIMEOUT
    # Feedback shows each grade cell's source; keep the hidden part of it hidden.
    c.GenerateFeedback.preprocessors = [GetGrades, CSSHTMLHeaderPreprocessor, ClearHiddenTests]
    # The grading kernel inherits this environment: the hidden cells import `autograder`.
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    os.environ.setdefault("MPLBACKEND", "Agg")


CONFIG_TEMPLATE = """\
# Written by autograder.nbgrader_course: a scratch course that uses the course's settings.
import sys
sys.path.insert(0, {root!r})
from autograder.nbgrader_course import configure
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

    def __enter__(self) -> ScratchCourse:
        self.create()
        return self

    def __exit__(self, *exc) -> None:
        return None

    def create(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / "nbgrader_config.py").write_text(
            CONFIG_TEMPLATE.format(root=str(ROOT), here=str(self.path))
        )
        link = self.path / "solutions"
        if not link.exists():
            link.symlink_to(SOLUTIONS, target_is_directory=True)

    def nbgrader(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        # nbgrader runs helper programs (alembic) from PATH: put this environment's first.
        path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
        env = dict(os.environ, PYTHONPATH=str(ROOT), MPLBACKEND="Agg", PATH=path)
        proc = subprocess.run(
            [sys.executable, "-m", "nbgrader", *args],
            cwd=self.path, env=env, capture_output=True, text=True,
        )
        if check and proc.returncode != 0:
            raise NbgraderFailed(f"nbgrader {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
        return proc

    def generate_assignment(self, unit: str) -> None:
        self.nbgrader("generate_assignment", unit, "--force", "--create")

    def submit(self, student: str, unit: str, notebook: Path, name: str) -> Path:
        target = self.path / "submitted" / student / unit / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(notebook, target)
        return target

    def autograde(self, unit: str) -> subprocess.CompletedProcess:
        # Exit status 1 when a student's kernel died; the others are still graded.
        return self.nbgrader("autograde", unit, "--create", "--force", check=False)

    def generate_feedback(self, unit: str) -> None:
        self.nbgrader("generate_feedback", unit, "--force")

    def export(self, path: Path) -> None:
        self.nbgrader("export", "--to", str(path))

    def gradebook(self):
        from nbgrader.api import Gradebook

        return Gradebook(f"sqlite:///{self.path / 'gradebook.db'}")
