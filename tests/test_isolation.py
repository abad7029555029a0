"""No student can touch a classmate's grade, with the grader running as an ordinary user.

Graded by a non-root user (as most instructors grade), through `course.py autograde`:

- a submission whose sandbox holds hundreds of threads leaves every other sandbox room to
  start: the process cap counts one sandbox's processes, not the user's;
- a notebook's kernel can write nothing on the grader's disk (its connection folder is the
  grader's, read-only to it) nor fill the sandbox's own root; what it may write is capped, and
  so is what its outputs and widget messages may add to the graded notebook;
- a sandbox that cannot start (killed as it starts) is the grader's failure: the student is
  listed with the reason, nothing is recorded, and the next run grades them.

Every test here runs as `nobody` when the suite runs as root (CI), since Linux does not apply
the per-user process limit to root at all.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import pytest

from autograder.nbgrader import autograde as nbgrader_autograde
from autograder.nbgrader.course import ScratchCourse
from autograder.paths import ROOT, unit_notebook_name
from autograder.tools.demo import SampleMaker
from autograder.units import UNITS

pytestmark = [pytest.mark.nbgrader, pytest.mark.xdist_group("unprivileged")]

UNIT = "01_attention"
NAME = unit_notebook_name(UNIT)
FULL = UNITS[UNIT].points

# A classmate's sandbox, started by the same user before the class is graded: as many sleeping
# threads as it can make (the process cap stops it), held for as long as the test needs.
HOG = """
import sys, time
sys.path.insert(0, {root!r})
from autograder.trust.sandbox import SandboxedProcess
code = ("import threading, time\\n"
        "for _ in range(2000):\\n"
        "    try:\\n"
        "        threading.Thread(target=time.sleep, args=(900,), daemon=True).start()\\n"
        "    except RuntimeError:\\n"
        "        break\\n"
        "time.sleep(900)\\n")
hog = SandboxedProcess([sys.executable, "-c", code])
print("started", flush=True)
time.sleep(900)
"""

# In the notebook's kernel: write next to the connection file (the folder the grader made for
# the kernel), in the sandbox's root, and fill /tmp past its cap; then report what happened.
KERNEL_WRITES = """
import json, os
from ipykernel.connect import get_connection_file
folder = os.path.dirname(os.path.abspath(get_connection_file()))
report = {}
for target in (os.path.join(folder, "planted.txt"), "/planted.txt", "/opt/planted.txt"):
    try:
        with open(target, "w") as f:
            f.write("x" * 1000)
        report[target] = "written"
    except OSError as err:
        report[target] = type(err).__name__
written = 0
try:
    for i in range(10_000):
        with open(f"/tmp/fill-{i}", "wb") as f:
            f.write(b"x" * (1 << 20))
        written += 1
except OSError:
    pass
report["tmp_megabytes"] = written
print("REPORT " + json.dumps(report))
"""


# In the notebook's kernel: widget (comm) messages carrying a megabyte of state each, which a
# kernel client keeps and writes into the graded notebook unless they count against its budget.
COMM_FLOOD = """
from ipykernel.comm import Comm
for i in range(120):
    Comm(target_name="jupyter.widget", data={"state": {"_model_name": "Flood", "value": "x" * 1_000_000},
                                              "buffer_paths": []})
"""


def threads_of(uid: int) -> int:
    """Threads of every process of `uid` on the machine."""
    total = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        except OSError:
            continue
        if fields.get("Uid", "").split()[:1] == [str(uid)]:
            total += int(fields.get("Threads", "0").strip() or 0)
    return total


def descendants(pid: int) -> list[int]:
    """Every process `pid` started, and they started, and so on (not `pid` itself)."""
    found, todo = [], [pid]
    while todo:
        try:
            children = [int(c) for c in Path(f"/proc/{todo[-1]}/task/{todo[-1]}/children").read_text().split()]
        except OSError:
            children = []
        todo.pop()
        found += children
        todo += children
    return found


def make_course(path: Path, user, notebooks: dict) -> ScratchCourse:
    course = ScratchCourse(path)
    course.create()
    course.generate_assignment(UNIT)
    for student, nb in notebooks.items():
        course.submit(student, UNIT, nb, NAME)
    user.reach(path)  # pytest's temporary folders are root's, mode 0700
    user.own(path)
    return course


def autograde(user, course: ScratchCourse, home: Path, *extra: str) -> subprocess.CompletedProcess:
    return user.run([sys.executable, "-m", "autograder", "autograde", UNIT, "--course", str(course.path), *extra],
                    home, capture_output=True, text=True, timeout=900)


def scores(course: ScratchCourse) -> dict:
    return {student: score for student, (score, _) in nbgrader_autograde.scores(course.path, UNIT).items()}


@pytest.fixture(scope="module")
def maker(tmp_path_factory):
    scratch = ScratchCourse(tmp_path_factory.mktemp("isolation_release") / "course")
    scratch.create()
    scratch.generate_assignment(UNIT)
    return SampleMaker(UNIT, scratch.release / UNIT / NAME)


def test_a_sandbox_full_of_threads_and_a_kernel_that_writes_cost_only_themselves(unprivileged, maker,
                                                                                  tmp_path):
    reference = maker.notebook(maker.answers)
    writer = maker.notebook(maker.answers)
    writer.cells.append(nbformat.v4.new_code_cell(KERNEL_WRITES))
    flooder = maker.notebook(maker.answers)
    flooder.cells.append(nbformat.v4.new_code_cell(COMM_FLOOD))
    course = make_course(tmp_path / "course", unprivileged,
                         {"ada": reference, "bob": reference, "wes": writer, "cam": flooder})
    home = tmp_path / "home"
    hog = unprivileged.popen([sys.executable, "-c", HOG.format(root=str(ROOT))], home, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert hog.stdout.readline().strip() == "started"
        deadline = time.monotonic() + 60
        while threads_of(unprivileged.uid) < 200:
            assert time.monotonic() < deadline, "the classmate's sandbox never made its threads"
            time.sleep(0.2)
        proc = autograde(unprivileged, course, home, "--workers", "2")
    finally:
        hog.kill()
        hog.wait()
    graded = scores(course)
    assert graded.get("ada") == FULL and graded.get("bob") == FULL, (graded, proc.stdout[-3000:])
    assert graded.get("wes") == FULL, (graded, proc.stdout[-3000:])
    nb = nbformat.read(course.path / "autograded" / "wes" / UNIT / NAME, as_version=4)
    printed = "\n".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    report = json.loads(printed.split("REPORT ", 1)[1].splitlines()[0])
    assert all(result != "written" for target, result in report.items() if target != "tmp_megabytes"), report
    assert report["tmp_megabytes"] <= 256, report  # the sandbox's /tmp has a cap
    assert not list((home / "tmp").rglob("planted.txt"))
    assert graded.get("cam") == FULL, (graded, proc.stdout[-3000:])
    flooded = course.path / "autograded" / "cam" / UNIT / NAME
    assert flooded.stat().st_size < 10 << 20, f"the graded notebook holds {flooded.stat().st_size >> 20} MB"


def test_a_sandbox_killed_as_it_starts_is_the_graders_failure_and_graded_next_time(unprivileged, maker, tmp_path):
    course = make_course(tmp_path / "course", unprivileged, {"ada": maker.notebook(maker.answers)})
    home = tmp_path / "home"
    run = unprivileged.popen([sys.executable, "-m", "autograder", "autograde", UNIT, "--course", str(course.path)],
                             home, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    stop = threading.Event()

    def kill_graders_workers():  # every sandbox of this run that would run the hidden tests, as it starts
        while not stop.is_set():
            for pid in descendants(run.pid):
                try:
                    if b"grader-worker/main.py" in Path(f"/proc/{pid}/cmdline").read_bytes():
                        os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.01)

    killer = threading.Thread(target=kill_graders_workers, daemon=True)
    killer.start()
    try:
        output, _ = run.communicate(timeout=900)
    finally:
        stop.set()
        killer.join()
    first = subprocess.CompletedProcess(run.args, run.returncode, output, "")
    assert first.returncode == 1, first.stdout[-3000:]
    assert "1 submission(s) could not be graded" in first.stdout, first.stdout[-3000:]
    assert "ada: the grader failed" in first.stdout, first.stdout[-3000:]
    ledger = course.path / nbgrader_autograde.LEDGER_DIR / f"{UNIT}.json"
    assert not ledger.exists() or json.loads(ledger.read_text()) == {}
    assert scores(course).get("ada") in (None, 0.0)  # nothing recorded (nbgrader would list 0 for none)

    second = autograde(unprivileged, course, home)
    assert second.returncode == 0, second.stdout[-3000:]
    assert scores(course) == {"ada": FULL}


def test_stale_empty_pids_cgroups_are_swept_and_live_ones_kept():
    """A grader killed before it closed its sandboxes leaves their pids cgroups behind (a thousand a
    day on a machine that runs the suite): the next one removes the empty ones an hour old."""
    from autograder.trust.sandbox import _PidsCgroup

    if os.geteuid() != 0 or not (_PidsCgroup.BASE / "cgroup.procs").exists():
        pytest.skip("pids cgroups are made by a root grader on cgroup v1 only")
    stale, recent = _PidsCgroup(8), _PidsCgroup(8)
    assert stale.path is not None and recent.path is not None
    old = time.time() - 2 * _PidsCgroup.STALE_SECONDS
    os.utime(stale.path, (old, old))
    try:
        assert _PidsCgroup.sweep() >= 1
        assert not stale.path.exists() and recent.path.exists()
    finally:
        recent.kill_all()
        stale.kill_all()
