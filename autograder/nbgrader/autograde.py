"""Grading a whole class: `python3 course.py autograde UNIT [--workers N] [--students A,B]
[--scheduler ADDRESS] [--feedback] [--course DIR]`.

nbgrader grades one notebook after another. Here each submission is one task for an existing
engine, a local process pool (`concurrent.futures`) by default or a Dask cluster
(`--scheduler`), and the division of labour keeps the gradebook exactly what a sequential
`nbgrader autograde` would have written:

- A task carries one submission's bytes in (its files, and a snapshot of the gradebook that
  holds the assignment) and runs the real `nbgrader autograde` on them in a scratch course
  of its own: the same sanitizers, sandboxed kernel, hidden graders and grade cells. What
  comes out is the autograded folder, as bytes.
- Only this process, the coordinator, writes the course: it puts the autograded folder in
  place, then writes the grades into `gradebook.db` with nbgrader's own `SaveAutoGrades` and
  `AssignLatePenalties` (which read every score from the graded notebook), after the
  student and submission rows that nbgrader's `init_assignment` would have made. So two
  tasks finishing together cannot lose or double a grade: their results are recorded one
  after the other.
- A ledger (`.course_autograde/<unit>.json`) records each student's submission fingerprint
  once its grades are in. A rerun grades only what is new or changed since, so an interrupted
  run (Ctrl-C, a killed process, a restart) resumes where it stopped.
- A submission that crashes nbgrader, hangs past its time limit, or cannot be read costs that
  student only; it is listed at the end with the reason, and tried again on the next run."""

from __future__ import annotations

import argparse
import functools
import gc
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ..engine.report import fmt
from ..grading.forked import Forked
from ..grading.pool import DaskEngine, LocalEngine
from ..paths import ROOT
from .course import ScratchCourse

LEDGER_DIR = ".course_autograde"
SUBMISSION_SECONDS = 1800.0  # one student's whole notebook run: far above a normal one (10 to 60 s), even loaded
ENGINE_VERSION = 1  # bump when what a task returns changes: every submission is graded again


# ---------------------------------------------------------------- what a task carries


def read_tree(folder: Path) -> dict[str, bytes]:
    """Every file under `folder`, by relative path (POSIX separators), as bytes."""
    return {path.relative_to(folder).as_posix(): path.read_bytes()
            for path in sorted(folder.rglob("*")) if path.is_file()}


def write_tree(folder: Path, files: dict[str, bytes]) -> None:
    for relative, data in files.items():
        target = folder / relative
        if not target.resolve().is_relative_to(folder.resolve()):
            raise ValueError(f"refusing to write outside {folder}: {relative}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def fingerprint(files: dict[str, bytes], grader: str) -> str:
    digest = hashlib.sha256(f"{ENGINE_VERSION}\0{grader}\0".encode())
    for relative, data in sorted(files.items()):
        digest.update(relative.encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()


def grader_fingerprint(unit: str) -> str:
    """What the grades of a unit depend on besides the submission: its graders and reference."""
    digest = hashlib.sha256()
    for folder in (ROOT / "autograder", ROOT / "solutions" / unit, ROOT / "coursekit"):
        for path in sorted(folder.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


# ---------------------------------------------------------------- the task (runs in a worker)


def grade_submission(task: dict) -> dict:
    """Grade one submission with the real `nbgrader autograde`, in a scratch course.

    `task`: unit, student, files (the submitted folder, by relative path), gradebook (the
    course's gradebook.db as bytes), seconds. Returns the autograded folder's files, or the
    reason there is none. Runs in a worker process: it touches nothing but its own temporary
    folder, so it can run on any machine that has the course installed.
    """
    unit, student = task["unit"], task["student"]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="course-autograde-") as scratch:
        course = ScratchCourse(Path(scratch) / "course")
        course.create()
        (course.path / "gradebook.db").write_bytes(task["gradebook"])
        write_tree(course.path / "submitted" / student / unit, task["files"])
        limit = task.get("seconds", SUBMISSION_SECONDS)
        try:
            if task.get("fork", True):
                log = autograde_forked(course.path, unit, student, limit)
            else:  # a fresh `python -m nbgrader` (a Dask worker has threads: no fork there)
                proc = course.nbgrader("autograde", unit, "--student", student, "--force", "--create",
                                       check=False, timeout=limit)
                log = proc.stdout + proc.stderr
        except subprocess.TimeoutExpired:
            return {"student": student, "ok": False, "seconds": time.perf_counter() - started,
                    "reason": f"nbgrader autograde did not finish within {limit:g} s"}
        graded = course.path / "autograded" / student / unit
        notebooks = sorted(graded.glob("*.ipynb")) if graded.exists() else []
        if not notebooks:
            return {"student": student, "ok": False, "seconds": time.perf_counter() - started,
                    "reason": nbgrader_failure(log)}
        return {"student": student, "ok": True, "files": read_tree(graded), "log": log[-4000:],
                "seconds": time.perf_counter() - started}


def autograde_forked(course: Path, unit: str, student: str, seconds: float) -> str:
    """`nbgrader autograde UNIT --student STUDENT --force --create` in `course`; its log.

    nbgrader runs in a child forked from this worker, which has nbgrader and the graders
    imported already: the two seconds of start-up a fresh `python -m nbgrader` pays for every
    notebook are paid once per worker. The child leads a process group of its own (the kernel
    and the hidden-test process are in it), so a run past `seconds` is killed whole, and the
    worker itself, and the other submissions it will grade, never share its fate.
    """
    _warm_up(unit)
    gc.collect()  # so the worker's own garbage between tasks is freed, not frozen for good by the fork
    child = Forked(functools.partial(_autograde_in_child, course, unit, student), own_group=True)
    try:
        log, _ = child.communicate(seconds)
    except subprocess.TimeoutExpired:
        raise subprocess.TimeoutExpired("nbgrader autograde", seconds) from None
    finally:
        child.kill()  # the run past its time, or anything it left behind in its group
    return log


def _autograde_in_child(course: Path, unit: str, student: str) -> int:
    """In the forked child: grade, and print nbgrader's log (everything printed is the log)."""
    with quiet_gradebook():
        log = _autograde_here(course, unit, student)
    sys.stdout.write(log)
    return 0


_WARM: set[str] = set()  # the units this worker is ready for


def _warm_up(unit: str) -> None:
    """Import once, in the worker, what every grading of `unit` needs (inherited by each
    forked child): nbgrader, and pytest with the unit's graders for the hidden tests."""
    if unit not in _WARM:
        import nbgrader.apps.api  # noqa: F401
        import nbgrader.preprocessors  # noqa: F401

        from ..grading import run as grading_run
        from . import grades  # noqa: F401
        grading_run.prepare_forked_runs(unit)
        _WARM.add(unit)


def _autograde_here(course: Path, unit: str, student: str) -> str:
    from nbgrader.apps.api import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    from .course import configure

    os.chdir(course)
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    os.environ["PYTHONPATH"] = str(ROOT)
    config = Config()
    configure(config, course)
    api = NbGraderAPI(CourseDirectory(config=config), config=config)
    result = api.autograde(unit, student, force=True, create=True)
    return str(result.get("log", "")) + str(result.get("error", ""))


def nbgrader_failure(log: str) -> str:
    """The one line of nbgrader's log that says why nothing was graded."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    grader = [line for line in lines if "the grader failed" in line or "the sandbox could not start" in line]
    if grader:  # the grader's own failure (grades.GraderFailure): the submission is not to blame
        return f"the grader failed (not the submission): {grader[-1].split('failed: ', 1)[-1][:300]}"
    for marker in ("[ERROR]", "Error", "error"):
        found = [line for line in lines if marker in line]
        if found:
            return f"nbgrader could not grade it: {found[-1][:300]}"
    return "nbgrader could not grade it (no autograded notebook came out)"


# ---------------------------------------------------------------- recording (the coordinator)


@contextmanager
def quiet_gradebook():
    """nbgrader's own gradebook calls warn about SQLAlchemy session details (they do inside
    `nbgrader autograde` too); the rows they write are checked against nbgrader's in the tests."""
    import warnings

    from sqlalchemy.exc import SAWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SAWarning)
        yield


def record(course: Path, unit: str, result: dict) -> None:
    """Put one graded submission in place and into the gradebook, as `nbgrader autograde` does."""
    with quiet_gradebook():
        _record(course, unit, result)


def _record(course: Path, unit: str, result: dict) -> None:
    import nbformat
    from nbgrader.api import Gradebook, MissingEntry
    from nbgrader.preprocessors import AssignLatePenalties, SaveAutoGrades
    from nbgrader.utils import parse_utc

    student, files = result["student"], result["files"]
    graded = course / "autograded" / student / unit
    staged = graded.with_name(graded.name + ".incoming")
    shutil.rmtree(staged, ignore_errors=True)
    write_tree(staged, files)
    shutil.rmtree(graded, ignore_errors=True)
    staged.rename(graded)

    db_url = f"sqlite:///{course / 'gradebook.db'}"
    timestamp = files.get("timestamp.txt")
    with Gradebook(db_url) as gb:
        gb.update_or_create_student(student)
        if timestamp and timestamp.strip():
            gb.update_or_create_submission(unit, student, timestamp=parse_utc(timestamp.decode().strip()))
        else:
            gb.update_or_create_submission(unit, student)
        # A notebook of the assignment that the student did not hand in scores 0, as in nbgrader.
        for notebook in gb.find_assignment(unit).notebooks:
            if f"{notebook.name}.ipynb" not in files:
                submitted = gb.find_submission_notebook(notebook.name, unit, student)
                for grade in submitted.grades:
                    grade.auto_score = 0
                    grade.needs_manual_grade = False
                gb.db.commit()
    for name in sorted(files):
        if not name.endswith(".ipynb") or "/" in name:
            continue
        with Gradebook(db_url) as gb:
            try:
                gb.find_notebook(name.removesuffix(".ipynb"), unit)
            except MissingEntry:
                continue  # nbgrader skips notebooks the assignment does not have
        nb = nbformat.reads(files[name].decode("utf-8"), as_version=nbformat.NO_CONVERT)
        resources = {"nbgrader": {"notebook": name.removesuffix(".ipynb"), "assignment": unit,
                                  "student": student, "db_url": db_url}}
        for step in (SaveAutoGrades(), AssignLatePenalties()):
            step.preprocess(nb, resources)


# ---------------------------------------------------------------- the ledger


class Ledger:
    """`<course>/.course_autograde/<unit>.json`: each graded student's fingerprint. Written
    after the student's grades are in, atomically, so a crash loses at most the students in
    flight (graded again next time), never a recorded grade."""

    def __init__(self, course: Path, unit: str):
        self.path = course / LEDGER_DIR / f"{unit}.json"
        self.events = course / LEDGER_DIR / f"{unit}.log"
        self.entries: dict[str, dict] = json.loads(self.path.read_text()) if self.path.exists() else {}

    def is_current(self, student: str, print_: str) -> bool:
        return self.entries.get(student, {}).get("fingerprint") == print_

    def mark(self, student: str, print_: str, seconds: float) -> None:
        self.entries[student] = {"fingerprint": print_, "graded_at": time.strftime("%Y-%m-%d %H:%M:%S"),
                                 "seconds": round(seconds, 2)}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(self.entries, indent=1, sort_keys=True))
        os.replace(temporary, self.path)
        with self.events.open("a") as log:  # one line per recorded grading, for people and tests
            log.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} graded {student} {print_[:12]}\n")


# ---------------------------------------------------------------- progress


class Progress:
    """A bar on a terminal, plain lines in a log: done, failed, rate, time left."""

    def __init__(self, total: int, stream=None):
        self.total, self.done, self.failed = total, 0, 0
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.started = time.perf_counter()

    def line(self) -> str:
        elapsed = time.perf_counter() - self.started
        finished = self.done + self.failed
        rate = finished / elapsed if elapsed > 0 else 0.0
        left = (self.total - finished) / rate if rate > 0 else float("nan")
        width = 24
        filled = int(width * finished / self.total) if self.total else width
        bar = "#" * filled + "." * (width - filled)
        left_text = f"{left:4.0f} s left" if left == left else "  ? s left"
        return (f"[{bar}] {finished}/{self.total} graded ({self.failed} failed), "
                f"{rate * 60:5.1f}/min, {left_text}")

    def update(self, student: str, ok: bool, seconds: float) -> None:
        if ok:
            self.done += 1
        else:
            self.failed += 1
        if self.tty:
            self.stream.write("\r" + self.line())
        else:
            self.stream.write(f"{'graded' if ok else 'FAILED'} {student} in {seconds:.1f} s; {self.line()}\n")
        self.stream.flush()

    def finish(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


# ---------------------------------------------------------------- the run


@dataclass
class ClassRun:
    unit: str
    graded: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # unchanged since their last grading
    failures: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0


def submissions(course: Path, unit: str, only: list[str] | None = None) -> dict[str, Path]:
    root = course / "submitted"
    found = {folder.parent.name: folder for folder in sorted(root.glob(f"*/{unit}")) if folder.is_dir()}
    if only:
        missing = sorted(set(only) - set(found))
        if missing:
            raise SystemExit(f"no submission of {unit} for: {', '.join(missing)} (looked in {root}/<student>/{unit}/)")
        found = {student: found[student] for student in only}
    return found


def autograde_class(course: Path, unit: str, workers: int | None = None, students: list[str] | None = None,
                    scheduler: str | object | None = None, stream=None,
                    seconds: float = SUBMISSION_SECONDS) -> ClassRun:
    started = time.perf_counter()
    course = Path(course).resolve()
    gradebook = course / "gradebook.db"
    if not gradebook.exists():
        raise SystemExit(f"{gradebook} does not exist: run `nbgrader generate_assignment {unit}` in {course} first")
    _check_assignment(gradebook, unit)
    ledger = Ledger(course, unit)
    grader = grader_fingerprint(unit)
    run = ClassRun(unit)
    todo = {}
    for student, folder in submissions(course, unit, students).items():
        try:
            files = read_tree(folder)
        except OSError as err:
            run.failures[student] = f"could not read the submission: {err}"
            continue
        print_ = fingerprint(files, grader)
        if ledger.is_current(student, print_):
            run.skipped.append(student)
        else:
            todo[student] = (files, print_)
    stream = stream or sys.stderr
    stream.write(f"{unit}: {len(todo)} to grade, {len(run.skipped)} unchanged since their last grading\n")
    if not todo:
        run.seconds = time.perf_counter() - started
        return run
    snapshot = gradebook.read_bytes()
    engine = DaskEngine(scheduler) if scheduler is not None else LocalEngine(workers or os.cpu_count() or 1)
    progress = Progress(len(todo), stream)
    cancelled = True
    try:
        futures = {engine.submit({"unit": unit, "student": s, "files": files, "gradebook": snapshot,
                                  "seconds": seconds}, grade_submission): s for s, (files, _) in todo.items()}
        for future in engine.as_completed(list(futures)):
            student = futures[future]
            try:
                result = engine.outcome(future)
            except Exception as err:  # noqa: BLE001 - a worker that died: this student only
                result = {"student": student, "ok": False, "seconds": 0.0,
                          "reason": f"the grading worker failed ({type(err).__name__}: {str(err)[:200]})"}
            if result.get("ok"):
                try:
                    record(course, unit, result)
                except Exception as err:  # noqa: BLE001 - a graded notebook nbgrader cannot score
                    result = {**result, "ok": False, "reason": f"could not record the grades: {err}"}
            if result.get("ok"):
                ledger.mark(student, todo[student][1], result["seconds"])
                run.graded.append(student)
            else:
                run.failures[student] = result["reason"]
            progress.update(student, bool(result.get("ok")), result.get("seconds", 0.0))
        cancelled = False
    finally:
        progress.finish()
        engine.close(cancel=cancelled)
    run.seconds = time.perf_counter() - started
    return run


def _check_assignment(gradebook: Path, unit: str) -> None:
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(f"sqlite:///{gradebook}") as gb:
        try:
            gb.find_assignment(unit)
        except MissingEntry:
            raise SystemExit(f"{unit} is not in {gradebook}: run `nbgrader generate_assignment {unit}` first") from None


# ---------------------------------------------------------------- feedback, and the summary


def feedback_task(task: dict) -> dict:
    """`nbgrader generate_feedback` for one student, in the course folder (local workers)."""
    course = ScratchCourse(Path(task["course"]))
    proc = course.nbgrader("generate_feedback", task["unit"], "--student", task["student"], "--force",
                           check=False, timeout=300)
    return {"student": task["student"], "ok": proc.returncode == 0,
            "reason": nbgrader_failure(proc.stdout + proc.stderr)}


def generate_feedback(course: Path, unit: str, students: list[str], workers: int) -> dict[str, str]:
    """Feedback pages for these students, `workers` at a time; returns the failures."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    failures = {}
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        for result in pool.map(feedback_task, [{"course": str(course), "unit": unit, "student": s} for s in students]):
            if not result["ok"]:
                failures[result["student"]] = result["reason"]
    return failures


def scores(course: Path, unit: str) -> dict[str, tuple[float, float]]:
    from nbgrader.api import Gradebook

    with quiet_gradebook(), Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return {s.student.id: (float(s.score or 0.0), float(s.max_score or 0.0))
                for s in gb.find_assignment(unit).submissions}


def summary(course: Path, run: ClassRun, grades_csv: Path | None, feedback: bool) -> str:
    out = io.StringIO()
    table = scores(course, run.unit)
    width = max([len(s) for s in table] + [7]) + 2
    out.write(f"\n{'student'.ljust(width)}{'score':>12}  this run\n")
    for student in sorted(table):
        score, most = table[student]
        state = ("graded" if student in run.graded else "unchanged" if student in run.skipped
                 else "FAILED" if student in run.failures else "")
        out.write(f"{student.ljust(width)}{fmt(score) + '/' + fmt(most):>12}  {state}\n")
    if run.failures:
        out.write(f"\n{len(run.failures)} submission(s) could not be graded (tried again on the next run):\n")
        for student, reason in sorted(run.failures.items()):
            out.write(f"  {student}: {reason}\n")
    out.write(f"\n{len(run.graded)} graded, {len(run.skipped)} unchanged, {len(run.failures)} failed, "
              f"in {run.seconds:.1f} s\n")
    if feedback:
        out.write(f"Feedback pages: {course / 'feedback'}/<student>/{run.unit}/<notebook>.html\n")
    if grades_csv is not None:
        out.write(f"Grades exported to: {grades_csv}\n")
    return out.getvalue()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python3 course.py autograde",
                                     description="Grade every new or changed submission of a unit, in parallel.")
    parser.add_argument("unit")
    parser.add_argument("--workers", type=int, default=None, help="submissions at a time (default: the cores)")
    parser.add_argument("--students", default=None, help="comma-separated student ids (default: all)")
    parser.add_argument("--scheduler", default=None, help="a Dask scheduler's address, e.g. tcp://10.0.0.5:8786")
    parser.add_argument("--feedback", action="store_true", help="also generate the feedback pages, in parallel")
    parser.add_argument("--course", default=str(ROOT), help="the nbgrader course folder (default: this one)")
    parser.add_argument("--seconds", type=float, default=SUBMISSION_SECONDS, help="time limit per submission")
    args = parser.parse_args(argv)
    course = Path(args.course).resolve()
    students = [s for s in args.students.split(",") if s] if args.students else None
    workers = args.workers or os.cpu_count() or 1
    run = autograde_class(course, args.unit, workers, students, args.scheduler, seconds=args.seconds)
    if args.feedback:
        wanted = sorted(set(run.graded) | set(run.skipped))
        for student, reason in generate_feedback(course, args.unit, wanted, workers).items():
            run.failures[student] = f"feedback: {reason}"
    grades_csv = course / "grades.csv"
    export = ScratchCourse(course).nbgrader("export", "--to", str(grades_csv), check=False)
    print(summary(course, run, grades_csv if export.returncode == 0 else None, args.feedback))
    return 1 if run.failures else 0


def gradebook_rows(course: Path, unit: str, students: list[str] | None = None) -> dict:
    """Everything nbgrader's gradebook holds about a unit's submissions, as plain data: what
    `nbgrader export`, `generate_feedback` and formgrader read. Two gradings of the same
    submissions agree when these are equal."""
    from nbgrader.api import Gradebook

    rows = {}
    with quiet_gradebook(), Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for submission in gb.find_assignment(unit).submissions:
            student = submission.student.id
            if students is not None and student not in students:
                continue
            notebooks = {}
            for notebook in submission.notebooks:
                notebooks[notebook.name] = {
                    "late_submission_penalty": notebook.late_submission_penalty,
                    "flagged": notebook.flagged,
                    "grades": {g.name: (g.auto_score, g.manual_score, g.extra_credit, g.needs_manual_grade,
                                        g.max_score) for g in notebook.grades},
                    "comments": {c.name: (c.auto_comment, c.manual_comment) for c in notebook.comments},
                }
            rows[student] = {"timestamp": str(submission.timestamp), "score": submission.score,
                             "notebooks": notebooks}
    return rows
