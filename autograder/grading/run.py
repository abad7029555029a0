"""One grading run: the hidden tests of a unit on one submission, in a trusted process of their
own, `python -m pytest autograder/tests/test_<unit>.py --submission PATH` (`GradingRun`,
`start_grading`), whose report is the JSON the plugin writes. The nbgrader preprocessors, the
feedback reports, the warm grader and the `check` command all grade through it, so they can
never disagree. The submission's code runs in that run's sandboxed worker, never here, so
nothing it prints, raises or exits with reaches this process."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from ..engine.spec import CheckResult
from ..paths import ROOT
from ..trust import student
from ..units import get_unit
from .forked import Forked

GRADERS = ROOT / "autograder" / "tests"
RUN_SECONDS = 1800  # the whole run, for one submission: far above any honest one, even on a busy machine
_FORK_RUNS = False  # set by `prepare_forked_runs`, in a class-grading worker only


class GradingFailed(RuntimeError):
    """The grading run itself failed: a problem for the instructor, not the student."""


def grader_file(unit: str) -> Path:
    get_unit(unit)  # KeyError with the known units if there is no such unit
    path = GRADERS / f"test_{unit}.py"
    if not path.exists():
        raise KeyError(f"unit {unit!r} has no hidden tests ({path.relative_to(ROOT)})")
    return path


def pytest_command(unit: str, submission: Path, report: Path, parts: list[str] | None = None) -> list[str]:
    # A unit with a shorter cell limit (its notebook's cells are quick) loads the submission
    # under it too: a visible check that loops stops there, not after nbgrader's 30 s.
    cell_seconds = get_unit(unit).cell_seconds
    # `-p autograder.grading.plugin --noconftest`: the plugin is what autograder/tests/conftest.py
    # would load, and no conftest.py near the submission (or in the course's own tests/) is
    # ever imported into the trusted run.
    return [sys.executable, "-m", "pytest", str(grader_file(unit)), "--submission", str(submission),
            "--grading-json", str(report), "-q", "--no-header", "-p", "no:cacheprovider",
            "-p", "autograder.grading.plugin", "--noconftest",
            "--rootdir", str(ROOT), "-o", "addopts=",
            *(["--cell-seconds", str(cell_seconds)] if cell_seconds else []),
            *(["--parts", ",".join(parts)] if parts else [])]


def start_grading(unit: str, submission: str | Path, parts: list[str] | None = None) -> GradingRun:
    """The run of `unit`'s hidden tests on `submission`: every part's, or those of `parts` only."""
    return GradingRun(unit, Path(submission).resolve(), parts)


class GradingRun:
    """One run of a unit's hidden tests on one submission, in its own process.

    Started at once and collected later, so nbgrader's kernel can run the notebook while
    the grader runs the tests."""

    def __init__(self, unit: str, submission: Path, parts: list[str] | None = None):
        self.unit, self.submission = unit, submission
        self.folder = tempfile.TemporaryDirectory(prefix="grading-")
        self.report_path = Path(self.folder.name) / "report.json"
        # No pytest plugin of the environment's loads into the trusted run (anyio's alone cost a
        # third of a second of each check): its one plugin is named on the command line.
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                   MPLBACKEND="Agg", PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
        command = pytest_command(unit, submission, self.report_path, parts)
        self.handed = None  # a worker started ahead that the forked run adopts (student.offer_spare)
        if _FORK_RUNS and threading.active_count() == 1:  # forking a threaded process is unsafe
            self.proc = Forked(functools.partial(_pytest_here, command[3:], ROOT, env))
            self.handed = student.hand_over_spare()
        else:
            self.proc = subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def abandon(self) -> None:
        """Stop the run and forget it: its notebook will not be graded by this run (nbgrader
        stopped before reading its report). Its sandboxed workers die with it."""
        self.proc.kill()  # a no-op once it has exited (Popen and Forked alike)
        try:
            self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        self._stop_handed()
        self.folder.cleanup()

    def _stop_handed(self) -> None:
        """The run is over: the worker it adopted is stopped (and reaped here, its parent)."""
        if self.handed is not None:
            self.handed.discard()
            self.handed = None

    def result(self, timeout: float = RUN_SECONDS) -> tuple[dict, str]:
        """(the report, pytest's own output). Raises GradingFailed if there is no report."""
        try:
            output, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            output, _ = self.proc.communicate()
            raise GradingFailed(f"the hidden tests of {self.unit} ran past {timeout:g} s") from None
        finally:
            self._stop_handed()
        try:
            report = json.loads(self.report_path.read_text())
        except (OSError, ValueError):
            tail = "\n".join(output.strip().splitlines()[-15:])
            raise GradingFailed(f"the hidden tests of {self.unit} gave no report (exit {self.proc.returncode}):\n"
                                f"{tail}") from None
        finally:
            self.folder.cleanup()
        if report.get("grader_error"):
            raise GradingFailed(f"the grader failed on {self.unit}: {report['grader_error']}")
        return report, output


def prepare_forked_runs(unit: str, zygote: bool = True) -> None:
    """Import pytest, the grading plugin and `unit`'s grader module here, and from now on run
    every GradingRun of this process (and of processes forked from it) in a forked child
    (`forked.Forked`); with `zygote`, also start the zygote its workers are forked from
    (`trust/zygote.py`) and do the trusted half of its grading (`rehearse_once`), both of which
    those children inherit.

    For `course.py autograde`'s workers, which grade one notebook after another: the child
    starts with what a fresh `python -m pytest` spends half a second (a NumPy unit) to two
    seconds (a unit whose checks use PyTorch) importing. The run is otherwise the same: the same command line,
    the test file collected (and its asserts rewritten) afresh, the submission in its own
    sandboxed worker. Nothing is computed here, so no thread pool (torch's) exists to be
    forked. A plain `nbgrader autograde` keeps the fresh process."""
    global _FORK_RUNS
    import importlib

    import _pytest.assertion.rewrite  # noqa: F401
    import _pytest.python  # noqa: F401
    import pytest  # noqa: F401

    from ..trust import student  # noqa: F401

    spec = get_unit(unit)  # its grader module, and what that imports (torch for units 04-07)
    for name in spec.grader_imports:  # what its checks import when they run (torch for unit 03)
        try:
            importlib.import_module(name)
        except ImportError:
            pass  # the run reports it, as a fresh process would
    if zygote:
        from ..trust import zygote as zygotes
        from ..trust.sandbox import Limits
        from .plugin import worker_setup

        zygotes.prepare_zygote(Limits(), **worker_setup([unit]))
        rehearse_once(unit)
    _FORK_RUNS = True


_REHEARSED: set[str] = set()


def rehearse_once(unit: str) -> None:
    """The trusted half of `unit`'s grading, done here once for every run forked from this
    process (`grade.rehearse`). A failure is not this process's to report: each run then computes
    what it needs, and says so if the reference is broken."""
    if unit in _REHEARSED:
        return
    from ..engine.grade import rehearse

    _REHEARSED.add(unit)
    try:
        rehearse(get_unit(unit))
    except Exception:  # noqa: BLE001 - see above
        pass


def _pytest_here(args: list[str], cwd: Path, env: dict) -> int:
    """In a forked child: what `python -m pytest ARGS` would do, in `cwd` with `env`."""
    import pytest

    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    return int(pytest.main(args))


def check(unit: str, path: str | Path) -> dict:
    """Grade one file: the report (with an "error" key when it could not be graded)."""
    report, _ = start_grading(unit, path).result()
    return report


def results_of(report: dict) -> list[CheckResult]:
    return [CheckResult(**c) for c in report.get("checks", [])]
