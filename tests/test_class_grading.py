"""`course.py autograde`: a class graded in parallel gets the gradebook sequential nbgrader
gives; a run killed midway and restarted grades each student once; a crashing and a hanging
submission cost only their own student; and the Dask path works on a `LocalCluster`.

One class of unit 01 is graded both ways: with sequential `nbgrader autograde` (the
baseline) and with `course.py autograde --workers 2`, which is first killed after its first
recorded student and then run again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from autograder.nbgrader import autograde
from autograder.nbgrader.course import ScratchCourse
from autograder.paths import ROOT, unit_notebook_name
from autograder.tools.demo import SampleMaker

pytestmark = [pytest.mark.nbgrader, pytest.mark.xdist_group("class_grading")]

UNIT = "01_attention"
NAME = unit_notebook_name(UNIT)
GOOD = ["ada", "cat", "dan", "fay"]  # the reference, a typical bug, a cell that raises, a deleted grade cell
HANG_SECONDS = 25.0  # the per-submission limit in this test: hal's notebook needs 4 x 10 s (unit 01's cell limit)


def hanging_notebook(release: Path):
    """Four cells that each sleep past unit 01's 10-second cell limit: 40 s in all."""
    nb = nbformat.read(release, as_version=4)
    for _ in range(4):
        nb.cells.insert(1, nbformat.v4.new_code_cell("import time\ntime.sleep(1000)"))
    return nb


def make_course(path: Path, notebooks: dict) -> ScratchCourse:
    course = ScratchCourse(path)
    course.create()
    course.generate_assignment(UNIT)
    for student, nb in notebooks.items():
        course.submit(student, UNIT, nb, NAME)
    return course


def recorded(course: ScratchCourse) -> list[str]:
    events = course.path / autograde.LEDGER_DIR / f"{UNIT}.log"
    return [line.split()[3] for line in events.read_text().splitlines()] if events.exists() else []


@pytest.fixture(scope="session")
def graded_class(tmp_path_factory):
    root = tmp_path_factory.mktemp("class_grading")
    baseline_release = root / "release.ipynb"
    scratch = ScratchCourse(root / "maker")
    scratch.create()
    scratch.generate_assignment(UNIT)
    maker = SampleMaker(UNIT, scratch.release / UNIT / NAME)
    samples = {s: nb for s, nb in maker.students().items() if s in GOOD}
    nbformat.write(nbformat.read(scratch.release / UNIT / NAME, as_version=4), baseline_release)

    sequential = make_course(root / "sequential", samples)
    sequential.autograde(UNIT)

    extra = {"hal": hanging_notebook(baseline_release), "zed": b"{ this is not a notebook"}
    parallel = make_course(root / "parallel", {**samples, **extra})
    # First run: killed (SIGKILL, the whole process group) once one student is recorded.
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "autograder", "autograde", UNIT, "--course", str(parallel.path), "--workers", "2",
         "--students", ",".join(GOOD), "--seconds", str(HANG_SECONDS)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 600
    while not recorded(parallel) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before_restart = recorded(parallel)
    # Second run: everyone, the crashing and the hanging student included.
    log = root / "second_run.log"
    with log.open("w") as stream:
        run = autograde.autograde_class(parallel.path, UNIT, workers=2, stream=stream, seconds=HANG_SECONDS)
    return {"sequential": sequential, "parallel": parallel, "run": run, "before_restart": before_restart,
            "log": log.read_text()}


def test_two_workers_give_the_gradebook_sequential_nbgrader_gives(graded_class):
    sequential = autograde.gradebook_rows(graded_class["sequential"].path, UNIT, GOOD)
    parallel = autograde.gradebook_rows(graded_class["parallel"].path, UNIT, GOOD)
    assert set(sequential) == set(GOOD)
    for student in GOOD:
        # The submission's timestamp is when nbgrader saw it (no timestamp.txt): not compared.
        sequential[student].pop("timestamp"), parallel[student].pop("timestamp")
    assert parallel == sequential
    for student in GOOD:  # the graded notebooks too: the same grade-cell messages
        outputs = []
        for course in (graded_class["sequential"], graded_class["parallel"]):
            nb = nbformat.read(course.path / "autograded" / student / UNIT / NAME, as_version=4)
            outputs.append([[o.get("text") for o in c.get("outputs", [])] for c in nb.cells
                            if c.get("metadata", {}).get("nbgrader", {}).get("grade")])
        assert outputs[0] == outputs[1], student


def test_a_killed_run_resumes_and_grades_each_student_once(graded_class):
    assert graded_class["before_restart"], "the first run was killed before it recorded anyone"
    assert len(graded_class["before_restart"]) < len(GOOD), "the first run finished before it was killed"
    events = recorded(graded_class["parallel"])
    assert sorted(events) == sorted(GOOD), events  # once each, across both runs
    assert set(graded_class["run"].graded) == set(GOOD) - set(graded_class["before_restart"])


def test_a_crashing_and_a_hanging_submission_cost_only_their_own_student(graded_class):
    run = graded_class["run"]
    assert set(run.failures) == {"hal", "zed"}, run.failures
    assert "did not finish within 25 s" in run.failures["hal"]
    assert "nbgrader could not grade it" in run.failures["zed"]
    assert "FAILED hal" in graded_class["log"] and "FAILED zed" in graded_class["log"]
    summary = autograde.summary(graded_class["parallel"].path, run, None, False)
    assert "2 submission(s) could not be graded" in summary and "hal:" in summary and "zed:" in summary


def test_an_unchanged_class_is_not_graded_again_and_a_changed_submission_is(graded_class, tmp_path):
    course = graded_class["parallel"]
    stream = (tmp_path / "log").open("w")
    again = autograde.autograde_class(course.path, UNIT, workers=2, students=["ada", "cat"], stream=stream)
    assert again.graded == [] and sorted(again.skipped) == ["ada", "cat"]


def test_the_dask_path_on_a_local_cluster(graded_class, tmp_path):
    distributed = pytest.importorskip("distributed")
    source = graded_class["parallel"].path / "submitted" / "ada" / UNIT / NAME
    course = make_course(tmp_path / "dask", {"ada": nbformat.read(source, as_version=4)})
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        run = autograde.autograde_class(course.path, UNIT, scheduler=cluster.scheduler_address,
                                           stream=(tmp_path / "log").open("w"))
    assert run.graded == ["ada"] and not run.failures
    assert autograde.gradebook_rows(course.path, UNIT)["ada"]["score"] == \
        autograde.gradebook_rows(graded_class["sequential"].path, UNIT)["ada"]["score"]
