"""A fresh worker for the same submission, carrying named files of the old one's scratch folder and
nothing else (`Student.fresh_worker`): what unit 08's resumed runs rest on. The folder's entries are
the student's, read and written by the grader from outside the sandbox: a link there must never be
followed (it would be followed from the grader's own root), nor a FIFO wait forever, and nothing
the old worker kept anywhere else may reach the new one."""

from __future__ import annotations

import pytest

from autograder.trust import sandbox
from autograder.trust.student import Student

needs_sandbox = pytest.mark.skipif(not sandbox.bwrap_works(),
                                   reason="bubblewrap cannot make a sandbox on this machine (no user namespaces?)")

# Each worker that runs these cells leaves a token of its own in several places; `plant` makes a
# name of its scratch folder a link to a file of the grader's disk.
CELLS = """
import os

TOKEN = os.urandom(8).hex()
open("/scratch/carried.txt", "w").write(TOKEN)
open("/scratch/beside.txt", "w").write(TOKEN)
open("/tmp/kept.txt", "w").write(TOKEN)
open("/dev/shm/kept.txt", "w").write(TOKEN)
os.environ["KEPT"] = os.environ.get("KEPT", "") + TOKEN
if not os.path.lexists("/scratch/linked.txt"):
    os.symlink(OUTSIDE, "/scratch/linked.txt")
if not os.path.exists("/scratch/fifo"):
    os.mkfifo("/scratch/fifo")
open("/scratch/large.bin", "wb").write(bytes(3000))


def token():
    return TOKEN


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError as err:
        return type(err).__name__


def environment():
    return os.environ.get("KEPT", "")


def plant(name):
    os.unlink("/scratch/" + name)
    os.symlink(OUTSIDE, "/scratch/" + name)
    return os.path.islink("/scratch/" + name)
"""


@pytest.fixture
def outside(tmp_path):
    """A file of the grader's disk, where the sandbox cannot see it."""
    path = tmp_path / "grader_secret.txt"
    path.write_text("the grader's own bytes")
    return path


@needs_sandbox
def test_only_the_named_plain_files_cross_to_the_fresh_worker(outside):
    student = Student([("cells", f"OUTSIDE = {str(outside)!r}\n" + CELLS)])
    with student:
        student.start()
        old_token, generation = student.call("token").value, student.generation
        handle = student.call("token", keep=True).value
        left = student.fresh_worker(("carried.txt", "linked.txt", "fifo", "large.bin", "missing.txt"), limit=2000)
        new_token = student.call("token").value
        assert new_token != old_token and student.generation > generation
        assert not handle.call().ok  # a handle of the old worker is void
        # the named plain file crossed, and replaced what the new worker's cells wrote there
        assert student.call("read", "/scratch/carried.txt").value == old_token
        assert "carried.txt" not in left, left
        # a link, a FIFO, a file over the limit and a missing one stayed behind, each with a reason
        assert set(left) == {"linked.txt", "fifo", "large.bin", "missing.txt"}, left
        assert "not a plain file" in left["linked.txt"] and "not a plain file" in left["fifo"]
        assert "more than" in left["large.bin"] and "no such file" in left["missing.txt"]
        # nothing else of the old worker's is here: its other files, its environment
        for path in ("/scratch/beside.txt", "/tmp/kept.txt", "/dev/shm/kept.txt"):
            assert student.call("read", path).value == new_token, path
        assert student.call("environment").value == new_token
        # the link was not followed from the grader's side: the grader's bytes are not in the sandbox
        assert student.call("read", "/scratch/linked.txt").value != outside.read_text()
    assert outside.read_text() == "the grader's own bytes"


@needs_sandbox
def test_writing_a_carried_file_never_follows_a_link_the_cells_left(outside):
    student = Student([("cells", f"OUTSIDE = {str(outside)!r}\n" + CELLS)])
    with student:
        student.start()
        assert student.call("plant", "carried.txt").value is True
        assert student.process.write_scratch("carried.txt", b"carried bytes") is None
        assert outside.read_text() == "the grader's own bytes"
        assert student.call("read", "/scratch/carried.txt").value == "carried bytes"
        assert student.process.write_scratch("../escape.txt", b"x") is not None
        assert student.process.read_scratch("../scratch/carried.txt", 100)[0] is None
