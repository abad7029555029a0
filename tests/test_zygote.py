"""Workers forked from a zygote (autograder/trust/zygote.py, worker/zygote.py).

A fork is a sandbox of its own: two workers of one zygote share no file, process, descriptor,
random seed or process cap; neither has a capability or runs as anyone but the unprivileged
user; and a grading through forks is the grading a freshly started worker gives. Where a zygote
cannot work, workers start afresh. Each isolation test runs as the suite's user (root in CI:
its forks are the machine's root outside) and as an ordinary user.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.paths import ROOT
from autograder.trust import sandbox, zygote
from autograder.trust.student import Student

PROBE_SCRIPT = Path(__file__).parent / "zygote_probe.py"
NO_CAPABILITY = ["0000000000000000"] * 5

pytestmark = pytest.mark.skipif(not sandbox.bwrap_works(), reason="bubblewrap cannot make a sandbox here")

# A course (or its Python) under /tmp, /scratch or /dev/shm is mounted inside the zygote's own private
# folder of that name, which each fork's private folder would hide: the zygote says it cannot fork
# there, and workers start afresh (the same grades). The fork tests need a course elsewhere.
UNDER_A_PRIVATE_FOLDER = next((str(path) for path in (ROOT, Path(sys.prefix), Path(sys.base_prefix))
                               for folder in ("/tmp", "/scratch", "/dev/shm")
                               if str(path.resolve()).startswith(folder + "/")), None)
needs_forks = pytest.mark.skipif(UNDER_A_PRIVATE_FOLDER is not None,
                                 reason=f"{UNDER_A_PRIVATE_FOLDER} lies under a folder each fork makes private: "
                                 "workers start afresh there (test_a_course_under_tmp_grades_with_fresh_workers)")


def probe(unprivileged=None, home=None) -> dict:
    command = [sys.executable, str(PROBE_SCRIPT)]
    if unprivileged is None:
        proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)))
    else:
        proc = unprivileged.run(command, home, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    if report["unfit"] and not nested_namespaces_allowed():
        pytest.skip(f"this kernel refuses namespaces nested in a sandbox: {report['unfit']}")
    return report


def nested_namespaces_allowed() -> bool:
    """Whether a process in the sandbox may make the namespaces a fork of a zygote makes: where it
    may, a zygote that does not work is a defect, not the machine's limit."""
    flags = 0x10000000 | 0x00020000 | 0x20000000 | 0x40000000  # user, mount, PID, network
    code = f"import ctypes, sys; sys.exit(ctypes.CDLL(None).unshare({flags}) != 0)"
    argv = sandbox.bwrap_argv(sandbox.bwrap_executable(), sandbox.Limits(), cwd="/scratch")
    return subprocess.run([*argv, sys.executable, "-I", "-c", code], capture_output=True).returncode == 0


def judge(report: dict) -> None:
    assert report["kinds"] == ["ForkedSandbox", "ForkedSandbox"] and report["zygotes"] == 1, \
        f"no fork: {report['unfit'] or report['fork_failure']}"
    assert not report["errors"], report["errors"]
    for seen in (report["first"], report["other"], report["again"]):
        assert seen["uid"] == "65534" and seen["no_new_privs"] == "1", seen
        assert seen["capabilities"] == NO_CAPABILITY, seen
        assert seen["processes"] == [1, 2], seen  # its init and itself: nothing of the zygote or a sibling
        # stdin, stdout and stderr on /dev/null and its two pipes: not the zygote's control socket
        assert seen["descriptors"] == ["/dev/null"] * 3 + ["pipe"] * 2, seen
    # Each fork's /tmp, /scratch and /dev/shm are its own: the second sees nothing of the first's
    # marks, and the first finds its own again.
    assert report["other"]["seen"] == {"/tmp": [], "/scratch": [], "/dev/shm": []}
    assert report["again"]["seen"] == {"/tmp": ["a"], "/scratch": ["a"], "/dev/shm": ["a"]}
    assert report["first"]["draw"] != report["other"]["draw"]  # seeded afresh, not the zygote's state
    # One fork full of threads (held at its own cap) leaves its sibling room to start 50 of its own.
    assert 200 < report["hogged"] < 300 and report["beside"] == 50, report


@needs_forks
def test_two_forks_of_one_zygote_share_nothing():
    judge(probe())


@needs_forks
@pytest.mark.xdist_group("unprivileged")
def test_two_forks_of_one_zygote_share_nothing_as_an_ordinary_user(unprivileged, tmp_path):
    judge(probe(unprivileged, tmp_path / "home"))


def check(unit: str, path: Path, **env) -> dict:
    proc = subprocess.run([sys.executable, "-m", "autograder", "check", unit, str(path), "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, env=dict(os.environ, **env))
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    return {c["name"]: (c["points"], c["passed"], c["message"], c["misconception"]) for c in report["checks"]}


@pytest.mark.parametrize("name", ["correct_written_plainly", "wrong_checkpoint_no_optimizer"])
def test_a_grading_through_forks_is_the_grading_of_workers_started_afresh(name):
    """Unit 08 starts three workers a grading (the checkpoint's round trip and the resumed run each
    go on in a new one, which gets one file of the last one's scratch folder): through a zygote,
    and each started afresh, every check says the same."""
    path = ROOT / "tests" / "submissions" / "08_training" / f"{name}.py"
    assert check("08_training", path) == check("08_training", path, AUTOGRADER_ZYGOTE="0")


def test_where_no_zygote_comes_up_workers_start_afresh(monkeypatch):
    def refuses(self, seconds=0.0):
        raise zygote.ZygoteFailed("unfit: 2 threads after the imports")

    monkeypatch.setattr(zygote, "_unfit", None)
    monkeypatch.setattr(zygote, "_zygotes", {})
    monkeypatch.setattr(zygote.Zygote, "wait_ready", refuses)
    with Student([("answer", "def double(x):\n    return 2 * x\n")]) as student:
        student.start()
        assert type(student.process).__name__ == "SandboxedProcess"
        assert student.call("double", 21).value == 42
    assert zygote._unfit == "unfit: 2 threads after the imports" and not zygote._zygotes
    monkeypatch.setattr(zygote, "_unfit", None)
    monkeypatch.setenv("AUTOGRADER_ZYGOTE", "0")
    with Student([("answer", "def double(x):\n    return 2 * x\n")]) as student:
        student.start()
        assert type(student.process).__name__ == "SandboxedProcess"


@needs_forks
def test_a_fork_that_dies_before_it_reports_is_tried_again_from_a_new_zygote(monkeypatch):
    """Seen in the suite beside eight busy loops: a fork that died before it reported. The worker
    comes from a new zygote instead (and, were that to fail too, starts afresh)."""
    real_fork, failures = zygote.Zygote.fork, []

    def dies_once(self):
        if not failures:
            failures.append(self)
            raise zygote.ZygoteFailed("no worker from the zygote (the other side has gone)")
        return real_fork(self)

    monkeypatch.setattr(zygote, "_unfit", None)
    monkeypatch.setattr(zygote, "_zygotes", {})
    monkeypatch.setattr(zygote.Zygote, "fork", dies_once)
    try:
        with Student([("answer", "def double(x):\n    return 2 * x\n")]) as student:
            student.start()
            assert type(student.process).__name__ == "ForkedSandbox"
            assert student.call("double", 21).value == 42
        assert failures and not failures[0].alive()  # the zygote whose fork died was let go
    finally:
        zygote.close_all()


@pytest.mark.skipif(UNDER_A_PRIVATE_FOLDER is None, reason="the course and its Python lie outside /tmp here")
def test_a_course_under_tmp_grades_with_fresh_workers():
    """Seen in every suite run from a worktree under /tmp: each fork copied the zygote's /tmp, the
    course's mounts included, into its own and ran out of space (ENOSPC), and the fork tests failed.
    The zygote now says so before its first fork, and every worker starts afresh."""
    report = probe()
    assert report["kinds"] == ["SandboxedProcess", "SandboxedProcess"] and "holds what the sandbox mounted" in (
        report["unfit"] or ""), report
    assert not report["errors"], report["errors"]
