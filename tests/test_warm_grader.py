"""The check line's warm grader (`python -m autograder warm-grader`), run as an ordinary user as
a student's lab runs it: a check answered by it is word for word the report a grading started
from nothing gives; the worker it starts ahead holds one submission and is gone once that check
is answered (the next check has another); a dead grader or a stale socket costs a check nothing
(the next check line starts a new one); and it answers its own user only."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path

import nbformat
import pytest

from autograder.feedback.reports import feedback_for
from autograder.paths import solution_notebook
from autograder.trust.submission import nbgrader_meta
from coursekit import feedback

pytestmark = [pytest.mark.xdist_group("unprivileged")]

UNIT = "01_attention"
GLOBAL_MAX_SOFTMAX = (
    "def softmax(x, axis=-1):\n"
    "    e = np.exp(x - x.max())\n"
    "    return e / e.sum(axis=axis, keepdims=True)\n"
)


@pytest.fixture
def lab(monkeypatch, unprivileged):
    """A student's home with a cache of its own (so a warm grader of its own), and the grader
    it starts stopped at the end (its socket taken away: it leaves within seconds). The home is
    short-named, so that the socket lies in it for the test user and this process alike."""
    home = Path(tempfile.mkdtemp(prefix="warm-", dir="/tmp"))
    home.chmod(0o711)  # the test user's to enter (and, handed over, its own)
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))
    for name in (feedback.ENV_URL, feedback.ENV_TOKEN, "NBGRADER_EXECUTION", "JPY_SESSION_NAME"):
        monkeypatch.delenv(name, raising=False)
    socket_path = feedback.warm_grader_socket()
    try:
        yield home
    finally:
        pid = (status(unprivileged, home) or {}).get("pid")
        socket_path.unlink(missing_ok=True)
        if pid:
            deadline = time.monotonic() + 30
            while alive(pid) and time.monotonic() < deadline:
                time.sleep(0.2)
        shutil.rmtree(home, ignore_errors=True)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def notebook(folder: Path, softmax: str | None = None) -> Path:
    """Unit 01's reference notebook, with `softmax`'s answer replaced if given."""
    nb = nbformat.read(solution_notebook(UNIT), as_version=4)
    if softmax is not None:
        [cell] = [c for c in nb.cells if nbgrader_meta(c).get("grade_id") == "softmax"]
        cell.source = softmax
    path = folder / f"{uuid.uuid4().hex[:8]}.ipynb"
    nbformat.write(nb, path)
    return path


def check(user, home: Path, part: str, path: Path) -> dict:
    """One check line, as the student's kernel runs it (`python -m coursekit.feedback`)."""
    snapshot, out = home / f"snapshot-{path.name}", home / f"answer-{path.stem}.json"
    shutil.copy(path, snapshot)
    proc = user.run([sys.executable, "-m", "coursekit.feedback", UNIT, part, str(snapshot), str(out)], home,
                    capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(out.read_text())


def status(user, home: Path) -> dict | None:
    code = ("import json; from coursekit.feedback import _warm_request, warm_grader_socket; "
            "print(json.dumps(_warm_request(warm_grader_socket(), {'op': 'status'}, 30)))")
    proc = user.run([sys.executable, "-c", code], home, capture_output=True, text=True, timeout=120)
    return json.loads(proc.stdout) if proc.returncode == 0 and proc.stdout.strip() else None


def ready(user, home: Path) -> dict:
    """The grader's status once its worker for the next check has started (and imported)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        now = status(user, home)
        if now and now.get("ready"):
            return now
        time.sleep(0.5)
    raise AssertionError(f"the warm grader has no worker ready after 120 s (last status: {now})")


def test_a_warm_check_is_a_fresh_grading_in_a_worker_of_its_own(unprivileged, lab):
    right, wrong = notebook(lab), notebook(lab, GLOBAL_MAX_SOFTMAX)
    assert status(unprivileged, lab) is None  # nothing listens before the first check

    first = check(unprivileged, lab, "softmax", wrong)  # the first check starts the grader
    before = ready(unprivileged, lab)
    assert before["unit"] == UNIT and alive(before["worker"])
    second = check(unprivileged, lab, "all", right)  # answered with the worker started ahead
    after = ready(unprivileged, lab)

    for answer, path, part in ((first, wrong, "softmax"), (second, right, "all")):
        fresh = feedback_for(UNIT, path.read_bytes(), part, f"snapshot-{path.name}")
        assert answer == {"ok": True, "report": fresh, "by": "the course's hidden graders, on this machine"}
    assert first["report"]["parts"][0]["mistakes"] and first["report"]["score"] < first["report"]["max_score"]
    assert second["report"]["score"] == second["report"]["max_score"]
    # The worker that ran the second check ran nothing else: gone, and the next check has another.
    assert after["pid"] == before["pid"] and after["worker"] != before["worker"]
    assert not alive(before["worker"])


def test_a_dead_grader_or_a_stale_socket_costs_the_next_check_nothing(unprivileged, lab):
    wrong = notebook(lab, GLOBAL_MAX_SOFTMAX)
    first = check(unprivileged, lab, "softmax", wrong)
    grader = ready(unprivileged, lab)
    os.kill(grader["pid"], signal.SIGKILL)  # its socket stays behind, with nobody listening
    deadline = time.monotonic() + 30
    while (alive(grader["pid"]) or alive(grader["worker"])) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(grader["worker"])  # the sandbox dies with the grader that started it
    assert feedback.warm_grader_socket().exists() and status(unprivileged, lab) is None

    again = check(unprivileged, lab, "softmax", wrong)
    assert again == first
    assert ready(unprivileged, lab)["pid"] != grader["pid"]


def test_the_warm_grader_answers_its_own_user_only(unprivileged, lab):
    if not unprivileged.dropping:
        pytest.skip("the suite runs as an ordinary user: there is no second user to ask from")
    check(unprivileged, lab, "softmax", notebook(lab))
    ready(unprivileged, lab)
    path = notebook(lab, GLOBAL_MAX_SOFTMAX)
    unprivileged.own(lab)
    asked = feedback._warm_request(feedback.warm_grader_socket(), {"unit": UNIT, "part": "softmax",
                                                                   "path": str(path)}, 60)
    assert asked == {"error": "this grader answers the user who started it only", "kind": "grader"}
