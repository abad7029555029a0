"""A grading run's budget (autograder/trust/budget.py): what one submission may spend of the grader's
time, computing or waiting, in all its cells and checks together, measured outside its process.

Per-cell and per-call limits stop one cell or one call; a notebook of many cells that each wait
or compute just under them held a grading worker for the run's whole 30-minute backstop, and
ended as the grader's failure (free, so it could be sent again at once). With the budget the run
ends early, the parts not yet graded cost the submission with a sentence that says why, and the
report is the submission's (a feedback service counts it). A busy machine changes nothing:
waiting is what the scheduler reports as blocked, apart from time spent waiting for a CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from autograder.engine.grade import grade_part
from autograder.paths import ROOT
from autograder.trust.budget import OVER_BUDGET, Budget
from autograder.trust.student import Student
from autograder.units import UNITS

ANSWER = "def double(x):\n    return 2 * x\n"
# A cell that waits about 105 s, computing a few milliseconds every 8 s: it stays inside every
# per-cell limit (CPU time, the 20 s no-progress rule, the wall-clock backstop).
WAITS = "import time\nfor _ in range(13):\n    time.sleep(8)\n    sum(range(200_000))\n"
SHORT_WAITS = "import time\nfor _ in range(10):\n    time.sleep(0.5)\n    sum(range(200_000))\n"
COMPUTES = "x = 0\nfor i in range(4_000_000):\n    x += i\n"  # about half a second of CPU


def worker(cells: list[str], budget: Budget, **kwargs) -> Student:
    student = Student([(f"cell {i + 1}", source) for i, source in enumerate(cells)], budget=budget, **kwargs)
    student.start()
    return student


def test_cells_that_wait_use_up_the_budget_and_nothing_more_runs():
    with worker([ANSWER, SHORT_WAITS, SHORT_WAITS, SHORT_WAITS], Budget(cpu_seconds=60, waiting_seconds=6)) as student:
        assert student.exhausted and "of waiting" in student.exhausted and "cell 3" in student.exhausted
        assert any(OVER_BUDGET in note for note in student.notes)
        outcome = student.call("double", 2)
        assert outcome.over_budget and outcome.error == student.exhausted
        usage = student.usage()
        assert 6 <= usage["waiting_seconds"] < 7.5 and usage["exceeded"] == student.exhausted
        assert student.process is None  # the worker is gone, and no other is started
        student.start()
        assert student.process is None


def test_cells_that_compute_use_up_the_budget():
    with worker([ANSWER] + [COMPUTES] * 8, Budget(cpu_seconds=1.5, waiting_seconds=60)) as student:
        assert student.exhausted and "of computing" in student.exhausted
        assert 1.5 < student.usage()["cpu_seconds"] < 3


def test_a_child_process_computes_on_the_submissions_account():
    # The parent waits for its child: only the child computes, in the sandbox.
    spawn = ("import os\npid = os.fork()\nif pid == 0:\n    x = 0\n    for i in range(30_000_000):\n        x += i\n"
             "    os._exit(0)\nos.waitpid(pid, 0)\n")
    with worker([ANSWER, spawn], Budget(cpu_seconds=1.0, waiting_seconds=600), cell_seconds=60) as student:
        assert student.exhausted and "of computing" in student.exhausted


def test_the_graders_answers_to_a_submissions_calls_count_too():
    """A function that calls the grader back (a reference helper, a layer of the course's model)
    over and over makes the grader compute: that is charged to the submission."""
    def helper():  # the grader's own work, in this process
        deadline = time.process_time() + 0.05
        while time.process_time() < deadline:
            pass
        return 1

    source = "def busy():\n    return sum(helper() for _ in range(100))\n"
    with worker([source], Budget(cpu_seconds=2.0, waiting_seconds=600)) as student:
        outcome = student.call("busy", stubs={"helper": helper}, seconds=30)
        assert outcome.over_budget and "of computing" in outcome.error
        assert student.usage()["cpu_seconds"] >= 2.0


@pytest.fixture
def busy_machine():
    """Four busy loops per core, beside the test, each in a session of its own: where the kernel
    shares the CPU between sessions first (autogroup), loops in the test's own session would hardly
    slow a sandbox, which has a session of its own."""
    loop = [sys.executable, "-c", "while True:\n    pass\n"]
    loops = [subprocess.Popen(loop, start_new_session=True) for _ in range(4 * (os.cpu_count() or 1))]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def test_a_busy_machine_is_not_waiting(busy_machine):
    """Beside four busy loops per core the worker's cells take several times their CPU time in
    wall-clock time, and a budget of 2 s of waiting is still untouched: time spent waiting for a
    CPU is the machine's, not the submission's."""
    began = time.monotonic()
    with worker([ANSWER] + [COMPUTES] * 4, Budget(cpu_seconds=60, waiting_seconds=2)) as student:
        wall = time.monotonic() - began
        usage = student.usage()
        assert student.exhausted is None, student.exhausted
        assert student.call("double", 21).value == 42
    assert usage["waiting_seconds"] < 1.0, usage
    assert wall > 2 * usage["cpu_seconds"], (wall, usage)  # the loops did slow it down


def test_a_notebook_that_waits_is_graded_within_its_budget_and_it_counts(tmp_path):
    """Through `course.py check`: the run ends once the unit's budget of waiting is used up (not
    at the run's 30-minute backstop), every part scores 0 with the reason, and the report is
    an ordinary one (not the grader's failure)."""
    source = (ROOT / "tests" / "submissions" / "01_attention" / "correct_einsum.py").read_text()
    cells = [{"cell_type": "code", "id": f"c{i}", "metadata": {}, "execution_count": None, "outputs": [],
              "source": text} for i, text in enumerate([source, WAITS, WAITS, WAITS])]
    path = tmp_path / "attention.ipynb"
    path.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells}))
    began = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "autograder", "check", "01_attention", str(path), "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    seconds = time.monotonic() - began
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    budget = UNITS["01_attention"].budget
    assert report["score"] == 0 and "grader_error" not in report
    assert report["budget"]["exceeded"] and "of waiting" in report["budget"]["exceeded"]
    assert budget.waiting_seconds <= report["budget"]["waiting_seconds"] < budget.waiting_seconds + 2
    assert all(OVER_BUDGET in check["message"] for check in report["checks"]), report["checks"]
    assert seconds < 600, seconds  # (a backstop for the test itself: it used to take 30 minutes)


def test_a_correct_answer_is_far_inside_its_budget():
    """The budgets are sized from the references (Unit.reference_cpu_seconds); every differently
    written correct answer is held to half its unit's budget by tests/test_graders.py. Here, the
    rule itself: the allowance leaves room for a slower machine and a slower correct answer."""
    for unit in UNITS.values():
        assert unit.budget.cpu_seconds >= 4 * unit.reference_cpu_seconds + 30
        assert unit.page_budget.cpu_seconds >= 4 * unit.notebook_cpu_seconds + 30


def test_grading_a_part_after_the_budget_is_used_up_runs_nothing():
    unit = UNITS["01_attention"]
    with worker([(ROOT / "tests" / "submissions" / "01_attention" / "correct_einsum.py").read_text(), SHORT_WAITS],
                Budget(cpu_seconds=60, waiting_seconds=2)) as student:
        results = grade_part(unit, "softmax", student)
    assert all(not r.passed and r.points == 0 and r.message.startswith("not run: " + OVER_BUDGET) for r in results)
