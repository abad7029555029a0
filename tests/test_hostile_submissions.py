"""Hostile submissions, graded by the real `nbgrader autograde` in one class.

Each student below is a plausible cheat or accident (the issue "Hidden pytest graders that
a submission cannot reach" lists where they come from). Most are built on the untouched
release, so the same code honestly earns 0 and any point they get is a forged one; the
others are built on the reference answers, so an attack that fails leaves full marks, and
an attack that hurts the grader shows up as points lost elsewhere. A canary student who
submits the reference is graded after all of them. The test then checks, for everyone:
the score, that the course tree and the canary's files are untouched, that nothing a
student started is still running, and that the feedback pages are inert and hold no
hidden test or reference code.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path

import nbformat
import pytest

from autograder.grading.run import check
from autograder.nbgrader.course import ScratchCourse
from autograder.paths import ROOT, unit_notebook_name
from autograder.tools.demo import SampleMaker
from autograder.trust.submission import nbgrader_meta
from autograder.units import UNITS

UNIT = "01_attention"
NAME = unit_notebook_name(UNIT)
FULL = UNITS[UNIT].points
MARKER = "sleep 987"  # the command line of processes the students leave behind
AUTOGRADE_SECONDS = 1800  # the class takes about two minutes; a grader that hangs on one notebook never ends
GARBLED_SECONDS = 600
pytestmark = [pytest.mark.nbgrader, pytest.mark.xdist_group("hostile_class")]


# A softmax that writes bytes to every file descriptor it has on each call, its answers kept
# right. In the kernel (the visible checks call it) it garbles the kernel's sockets.
SOCKET_SPRAY = """import os
_good = softmax
def softmax(x, axis=-1):
    for fd in range(256):
        try:
            os.write(fd, b'\\xff' * 4096 + b'{"ok": true}\\n')
        except OSError:
            pass
    return _good(x, axis)
"""


def code(source: str):
    return nbformat.v4.new_code_cell(source)


# What every attack below may know: where the course lives on the instructor's disk.
def attacks(course: Path) -> dict[str, tuple[str, str, float | str]]:
    """student -> (base: "release" or "reference", a cell of attack code, the score it must get).

    The score is a number of points, or the honest code whose own score it must not pass:
    the forged answers below still earn what their honest part earns (a function that
    returns zeros leaves its input alone, and that check is worth a point)."""
    root, gradebook, canary = str(ROOT), str(course / "gradebook.db"), str(course / "submitted" / "zed")
    return {
        # forgery from inside the kernel: every grade cell's output is the trusted run's
        "forge_transformer": ("release", "ip = get_ipython()\n"
                              "ip.input_transformers_cleanup.append(lambda lines: ['pass\\n'])", 0),
        "forge_hooks": ("release", "import sys\nsys.displayhook = lambda value: None\n"
                        "get_ipython().events.register('pre_run_cell', lambda *a: None)", 0),
        "forge_modules": ("release", "import sys, types\nfake = types.ModuleType('autograder')\n"
                          "fake.grade = lambda *a, **k: 100.0\nsys.modules['autograder'] = fake", 0),
        "forge_numpy": ("release", "import numpy as np\nnp.allclose = lambda *a, **k: True\n"
                        "np.array_equal = lambda *a, **k: True\nnp.isfinite = lambda x: np.ones(np.shape(x), bool)\n"
                        "def softmax(x, axis=-1):\n    return np.zeros_like(x)",
                        "import numpy as np\ndef softmax(x, axis=-1):\n    return np.zeros_like(x)"),
        "forge_liar": ("release", "import numpy as np\nclass Liar(np.ndarray):\n"
                       "    def __eq__(self, other): return np.ones(np.shape(self), bool)\n"
                       "    def __array_ufunc__(self, *a, **k): return np.zeros(1)\n"
                       "def softmax(x, axis=-1):\n    return np.zeros_like(x).view(Liar)",
                       "import numpy as np\ndef softmax(x, axis=-1):\n    return np.zeros_like(x)"),
        "forge_torch": ("release", "import torch, numpy as np\n"
                        "class Liar(torch.Tensor):\n"
                        "    @classmethod\n"
                        "    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
                        "        if func in (torch.allclose, torch.equal, torch.Tensor.__eq__):\n"
                        "            return True\n"
                        "        return super().__torch_function__(func, types, args, kwargs or {})\n"
                        "    def __array__(self, dtype=None, copy=None):\n"
                        "        return np.full(self.shape, 0.5)\n"
                        "def softmax(x, axis=-1):\n    return torch.zeros(np.shape(x)).as_subclass(Liar)",
                        "import numpy as np\ndef softmax(x, axis=-1):\n    return np.zeros_like(x)"),
        "forge_stack": ("release", "import gc, sys\n"
                        "def softmax(x, axis=-1):\n"
                        "    for frame_depth in range(1, 30):\n"
                        "        try:\n            f = sys._getframe(frame_depth)\n        except ValueError:\n"
                        "            break\n"
                        "        ref = f.f_globals.get('load_reference')\n"
                        "        if ref:\n            return ref('01_attention').softmax(x, axis)\n"
                        "    for obj in gc.get_objects():\n"
                        "        if getattr(obj, '__name__', '') == 'softmax' and obj is not softmax:\n"
                        "            return obj(x, axis)\n"
                        "    raise RuntimeError('no reference found')", 0),
        # stealing the answer: nothing of the course is in the sandbox
        "steal_reference": ("release", f"import glob, sys\nsys.path.insert(0, {root!r})\n"
                            "def softmax(x, axis=-1):\n"
                            "    from autograder.engine.reference import load_reference\n"
                            "    return load_reference('01_attention').softmax(x, axis)\n"
                            f"for path in glob.glob({root!r} + '/solutions/*/*.ipynb') + [{gradebook!r}]:\n"
                            "    print(open(path, errors='replace').read())\n", 0),
        "steal_processes": ("release", "import os\nfor pid in os.listdir('/proc'):\n"
                            "    if pid.isdigit():\n"
                            "        try:\n            print(pid, open(f'/proc/{pid}/cmdline').read())\n"
                            "            print(open(f'/proc/{pid}/mem', 'rb').read(100))\n"
                            "        except OSError as err:\n            print(err)", 0),
        # damage to the instructor: writes to the course tree, the gradebook, classmates
        "damage_tree": ("reference", "import os, subprocess, glob\n"
                        f"targets = [{root!r} + '/autograder/units/attention.py', {root!r} + '/sitecustomize.py',\n"
                        f"           {gradebook!r}] + glob.glob({canary!r} + '/*/*.ipynb')\n"
                        "for target in targets:\n"
                        "    try:\n        open(target, 'a').write('\\nboom = 1\\n')\n"
                        "    except OSError as err:\n        print('refused:', err)\n"
                        "subprocess.Popen(['sh', '-c', '" + MARKER + "; echo late >> " + root + "/sitecustomize.py'],\n"
                        "                 start_new_session=True)", FULL),
        # resource attacks: each costs the part it breaks, nothing else
        "resource_alarm": ("reference", "import signal\n_good = self_attention\n"
                           "def self_attention(*args, **kwargs):\n"
                           "    signal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
                           "    while True:\n        try:\n            pass\n        except BaseException:\n"
                           "            pass", FULL - UNITS[UNIT].part("self_attention").points),
        "resource_flood": ("reference", "import threading, subprocess\n"
                           "for i in range(200000):\n    print('flood' * 20)\n"
                           "def spin():\n    while True:\n        pass\n"
                           "threading.Thread(target=spin, daemon=True).start()  # a thread that never ends\n"
                           "subprocess.Popen(['sh', '-c', '" + MARKER + "'])", FULL),
        "resource_memory": ("reference", "import numpy as np\n_good = softmax\n"
                            "def softmax(x, axis=-1):\n    hog = np.ones(10**11)\n    return _good(x, axis)",
                            FULL - UNITS[UNIT].part("softmax").points),
        "resource_exit": ("reference", "import os\nos._exit(1)", FULL),
        # cells that wait inside every per-cell limit (some 40 ms of computing every 8 s, for 105 s;
        # more than the kernel's 10 ms tick of CPU accounting, which the no-progress rule reads):
        # the run's budget of waiting ends it, and the parts never reached cost 0
        "resource_waiting": ("reference", "import time\nfor _ in range(13):\n    time.sleep(8)\n"
                             "    sum(range(2_000_000))", 0),
        "resource_no_interrupt": ("reference", "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                                  "signal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True:\n    pass", FULL),
        # the channel between worker and grader
        "channel_spray": ("release", "import os\n"
                          "def softmax(x, axis=-1):\n"
                          "    if os.fork() == 0:\n"
                          "        for fd in range(3, 64):\n"
                          "            try:\n                os.write(fd, b'\\xff' * 4096 + b'{\"ok\": true}')\n"
                          "            except OSError:\n                pass\n"
                          "        os._exit(0)\n"
                          "    for fd in range(3, 64):\n"
                          "        try:\n            os.write(fd, bytes(7) + b'\\x10' + b'x' * 16)\n"
                          "        except OSError:\n            pass\n"
                          "    return x", 0),
        # the same bytes on every call (see test_garbled_kernel_sockets_stop_nobody_else)
        "channel_spray_kernel": ("reference", SOCKET_SPRAY, FULL - UNITS[UNIT].part("softmax").points),
        "channel_objects": ("release", "import numpy as np\n"
                            "class Payload:\n    def __reduce__(self):\n        return (print, ('unpickled!',))\n"
                            "def softmax(x, axis=-1):\n    return np.array([Payload()] * x.size, dtype=object)\n"
                            "def scaled_dot_product_attention(Q, K, V, mask=None):\n"
                            "    deep = []\n    for _ in range(10000):\n        deep = [deep]\n    return deep, deep",
                            0),
        "channel_planted": ("reference", "import os, socket, sys\n"
                            "folders = {os.getcwd(), '/tmp'}\n"
                            "folders |= {os.path.dirname(a) for a in sys.argv if a.endswith('.json')}\n"
                            "for folder in folders:\n"
                            "    for name in ('report.json', 'kernel.json', 'grading.sock', 'kernel-ipc-9'):\n"
                            "        path = os.path.join(folder, name)\n"
                            "        try:\n"
                            "            if name.endswith(('.sock', '-9')):\n"
                            "                socket.socket(socket.AF_UNIX).bind(path)\n"
                            "            else:\n"
                            "                open(path, 'w').write('{\"score\": 15, \"checks\": []}')\n"
                            "        except OSError as err:\n"
                            "            print(err)", FULL),
        # feedback that would run script when opened
        "feedback_script": ("reference", "from IPython.display import HTML, Javascript, display\n"
                            "display(HTML('<script>alert(\"pwned-1\")</script>'))\n"
                            "display(HTML('<img src=x onerror=alert(\"pwned-2\")>'))\n"
                            "display(Javascript('alert(\"pwned-3\")'))\n"
                            "print('<script>alert(\"pwned-4\")</script>')", FULL),
    }


def tampered(maker: SampleMaker, student: str):
    """Notebooks whose structure, not code, is the attack: (notebook or raw bytes, expected score)."""
    nb = maker.notebook(maker.answers)
    if student == "tamper_points":  # points and a pre-filled output on every grade cell
        for cell in nb.cells:
            meta = nbgrader_meta(cell)
            if meta.get("grade"):
                meta["points"] = 1000
                cell.outputs = [nbformat.v4.new_output("execute_result", data={"text/plain": "1000.0"},
                                                       execution_count=1)]
        return nb, FULL
    if student == "tamper_retyped":  # the release, with grade cells turned into markdown and duplicated
        nb = maker.notebook()
        for cell in list(nb.cells):
            if nbgrader_meta(cell).get("grade"):
                copy = nbformat.from_dict(dict(cell))
                copy["id"] = f"copy-{len(nb.cells)}"
                nb.cells.append(copy)
                cell["cell_type"] = "markdown"
                cell.pop("outputs", None)
                cell.pop("execution_count", None)
        return nb, 0
    if student == "tamper_schema":  # malformed metadata: a missing schema_version once stopped the run
        locked = [cell for cell in nb.cells if nbgrader_meta(cell).get("locked")]
        locked[0].metadata["nbgrader"]["schema_version"] = "garbage"
        del locked[1].metadata["nbgrader"]["schema_version"]
        locked[2].metadata["nbgrader"] = {}
        return nb, FULL
    if student == "tamper_stripped":  # an editor dropped every cell's nbgrader metadata
        for cell in nb.cells:
            cell.metadata.pop("nbgrader", None)
        return nb, FULL
    if student == "tamper_unknown_locked":  # a cell of the student's own, marked locked under a new id
        mine = nbformat.v4.new_code_cell("mine = 1")
        mine.metadata["nbgrader"] = {"grade": False, "solution": False, "locked": True, "task": False,
                                     "grade_id": "check_mine", "schema_version": 3}
        nb.cells.insert(3, mine)
        return nb, FULL
    if student == "tamper_json":
        return b'{"cells": [ this is not json', 0
    raise KeyError(student)


TAMPERED = ("tamper_points", "tamper_retyped", "tamper_schema", "tamper_stripped", "tamper_unknown_locked",
            "tamper_json")


def tree_digest() -> str:
    digest = hashlib.sha256()
    for path in sorted((ROOT / "autograder").rglob("*.py")) + sorted((ROOT / "solutions").rglob("*.ipynb")):
        digest.update(str(path).encode() + path.read_bytes())
    digest.update(str((ROOT / "sitecustomize.py").exists()).encode())
    return digest.hexdigest()


@pytest.fixture(scope="session")  # built once per worker, even when other tests run in between
def hostile_class(tmp_path_factory):
    course = ScratchCourse(tmp_path_factory.mktemp("hostile") / "course")
    course.create()
    course.generate_assignment(UNIT)
    maker = SampleMaker(UNIT, course.release / UNIT / NAME)
    expected, released = {}, set()  # released: built on the release, so no reference code of their own
    for student, (base, attack, score) in attacks(course.path).items():
        if base == "release":
            released.add(student)
        nb = maker.notebook(maker.answers if base == "reference" else None)
        at = max(i for i, c in enumerate(nb.cells) if nbgrader_meta(c).get("solution"))
        nb.cells.insert(at + 1, code(attack))  # after the last solution cell, before its checks
        path = course.path / "incoming" / student / NAME
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, path)
        course.submit(student, UNIT, path, NAME)
        if isinstance(score, str):  # the honest code's own score, through the same grader
            honest = path.with_suffix(".honest.py")
            honest.write_text(score)
            score = check(UNIT, honest)["score"]
        expected[student] = score
    for student in TAMPERED:
        content, score = tampered(maker, student)
        course.submit(student, UNIT, content, NAME)
        expected[student] = score
        if score == 0:  # the tampered notebooks that earn nothing are the release's
            released.add(student)
    # the canary: graded last (nbgrader goes in name order), its files must come out intact
    canary = course.submit("zed", UNIT, _write(course.path / "incoming" / "zed" / NAME, maker.notebook(maker.answers)),
                           NAME)
    expected["zed"] = FULL
    before = {"tree": tree_digest(), "canary": canary.read_bytes()}
    proc = course.autograde(UNIT, timeout=AUTOGRADE_SECONDS)  # a hang fails the class, not the suite
    course.generate_feedback(UNIT)
    scores = {}
    with course.gradebook() as gb:
        for student in expected:
            try:
                scores[student] = float(gb.find_submission_notebook(NAME.removesuffix(".ipynb"), UNIT, student).score)
            except Exception:  # noqa: BLE001 - not graded at all
                scores[student] = None
    leftovers = subprocess.run(["pgrep", "-f", MARKER], capture_output=True, text=True).stdout.split()
    return {"course": course, "expected": expected, "released": released, "scores": scores, "before": before,
            "canary": canary,
            "log": proc.stdout + proc.stderr, "leftovers": leftovers}


def _write(path: Path, nb) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def students():
    return [*attacks(Path("/nowhere")), *TAMPERED, "zed"]


@pytest.mark.parametrize("student", students())
def test_no_attack_earns_more_than_the_same_code_honestly_does(hostile_class, student):
    expected = hostile_class["expected"][student]
    score = hostile_class["scores"][student]
    if student == "tamper_json":  # unreadable: nbgrader cannot grade it; it counts as 0 and is logged
        assert score in (None, 0.0)
        assert "tamper_json" in hostile_class["log"]
        return
    assert score == expected, (student, score, expected)


def test_the_course_tree_and_the_classmates_files_are_untouched(hostile_class):
    assert tree_digest() == hostile_class["before"]["tree"]
    assert hostile_class["canary"].read_bytes() == hostile_class["before"]["canary"]
    assert not (ROOT / "sitecustomize.py").exists()


def test_no_student_process_outlives_the_grading(hostile_class):
    assert hostile_class["leftovers"] == []


@pytest.mark.parametrize("student", [s for s in students() if s != "tamper_json"])
def test_feedback_is_inert_and_holds_no_hidden_code(hostile_class, student):
    course = hostile_class["course"].path
    html = (course / "feedback" / student / UNIT / NAME.replace(".ipynb", ".html")).read_text(encoding="utf-8")
    # The student's source is shown, escaped; what must never appear is live markup.
    assert not re.search(r"<script[^>]*>[^<]*pwned", html), student
    for bad in ("<img src=x onerror", "BEGIN HIDDEN TESTS", "autograder/tests", "### BEGIN SOLUTION"):
        assert bad not in html, (student, bad)
    if student in hostile_class["released"]:  # built on the release: no reference code of its own
        # a comment of the reference's (one span in the highlighted HTML, so a plain search finds it)
        assert "forbidden pairs get exactly zero weight" not in html, student
    assert "points" in html


def test_each_attack_is_told_what_happened_in_plain_words(hostile_class):
    course = hostile_class["course"].path

    def outputs(student):
        nb = nbformat.read(course / "autograded" / student / UNIT / NAME, as_version=4)
        return "\n".join(o.get("text", "") for c in nb.cells if nbgrader_meta(c).get("grade") for o in c.outputs)

    assert "did not finish" in outputs("resource_alarm")
    assert "NotImplementedError" in outputs("forge_transformer")
    assert "cannot read" in outputs("channel_objects") or "expected" in outputs("channel_objects")
    assert "raised" in outputs("steal_reference")
    waiting = UNITS[UNIT].budget.waiting_seconds
    assert f"used up this grading's budget of {waiting:g} s of waiting" in outputs("resource_waiting")


def test_garbled_kernel_sockets_stop_nobody_else(tmp_path):
    """A notebook whose code garbles its kernel's sockets once left jupyter_client's heartbeat
    thread blocked, and nbgrader joined it without a timeout: `nbgrader autograde` stopped
    there for good and the students after it were never graded. (Seen with these two
    students; in the bigger class above the timing differs and it did not hang.)"""
    course = ScratchCourse(tmp_path / "course")
    course.create()
    course.generate_assignment(UNIT)
    maker = SampleMaker(UNIT, course.release / UNIT / NAME)
    nb = maker.notebook(maker.answers)
    at = max(i for i, c in enumerate(nb.cells) if nbgrader_meta(c).get("solution"))
    nb.cells.insert(at + 1, code(SOCKET_SPRAY))
    course.submit("spray", UNIT, nb, NAME)
    course.submit("zed", UNIT, maker.notebook(maker.answers), NAME)
    try:
        course.autograde(UNIT, timeout=GARBLED_SECONDS)
    except subprocess.TimeoutExpired:
        pytest.fail(f"nbgrader autograde still ran after {GARBLED_SECONDS} s (two notebooks take about 40 s)")
    with course.gradebook() as gb:
        scores = {s: gb.find_submission_notebook(NAME.removesuffix(".ipynb"), UNIT, s).score for s in ("spray", "zed")}
    assert scores == {"spray": FULL - UNITS[UNIT].part("softmax").points, "zed": FULL}


def test_a_run_whose_notebook_nbgrader_gave_up_on_is_stopped(tmp_path):
    """When nbgrader stops on a notebook before FillGradeCells reads its report, the hidden
    tests' run must not go on computing beside the next students' (it did, for seconds)."""
    import shutil

    from autograder.nbgrader import grades
    from autograder.paths import solution_notebook

    gone = tmp_path / "gone" / NAME
    gone.parent.mkdir()
    shutil.copy(solution_notebook(UNIT), gone)
    grades.RUNS["gone/01_attention/attention"] = stale = grades.GradingRun(UNIT, gone)
    resources = {"nbgrader": {"assignment": UNIT, "notebook": NAME.removesuffix(".ipynb"), "student": "next"}}
    try:
        grades.StartTrustedGrading().preprocess(nbformat.read(gone, as_version=4), resources)
        assert stale.proc.returncode is not None, "the abandoned run is still going"
        assert not gone.parent.exists()
        assert list(grades.RUNS) == ["next/01_attention/attention"]
    finally:
        grades.abandon_runs()
    assert grades.RUNS == {}
