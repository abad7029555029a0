"""The trust line itself: the sandboxed worker, the wire format, and `course.py check`
driven by submissions that misbehave on purpose."""

from __future__ import annotations

import json
import math
import struct
import subprocess
import sys

import numpy as np
import pytest
import torch

from autograder.paths import ROOT
from autograder.trust import sandbox
from autograder.trust.student import Handle, Student
from autograder.trust.worker import channel
from autograder.units import UNITS

needs_sandbox = pytest.mark.skipif(not sandbox.bwrap_works(),
                                   reason="bubblewrap cannot make a sandbox on this machine (no user namespaces?)")


@needs_sandbox
def test_where_bubblewrap_works_the_course_sandbox_starts():
    # The grader falls back to no sandbox (loudly) when its sandbox cannot start; where
    # bubblewrap itself works, that fallback is a bug in how the sandbox is built (it once
    # hid a course cloned under /tmp behind the sandbox's private /tmp).
    assert sandbox.sandbox_problem() is None


def worker(source: str, **kwargs) -> Student:
    student = Student([("answer", source)], **kwargs)
    student.start()
    return student


# ---------------------------------------------------------------- classes, through handles

TINY_NET = """
import torch
from torch import nn

class TinyNet(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.proj = nn.Linear(d_in, d_out)

    def forward(self, x):
        return torch.tanh(self.proj(x))
"""


def test_a_torch_module_is_driven_through_handles():
    torch.manual_seed(0)
    weight, bias, x = torch.randn(3, 4), torch.randn(3), torch.randn(5, 4)
    with worker(TINY_NET) as student:
        net = student.new("TinyNet", 4, 3).value
        assert isinstance(net, Handle) and net.type_name == "__main__.TinyNet"
        assert net.method("load_state_dict", {"proj.weight": weight, "proj.bias": bias}).ok
        state = net.method("state_dict").value
        assert set(state) == {"proj.weight", "proj.bias"} and torch.equal(state["proj.weight"], weight)
        out = net.call(x).value
        assert type(out) is torch.Tensor and torch.allclose(out, torch.tanh(x @ weight.T + bias))
        # Gradients: keep the output in the worker, run backward there, read the .grad back.
        kept = net.call(x, keep=True).value
        kept.method("sum", keep=True).value.method("backward")
        grads = net.grads().value
    w, b = weight.clone().requires_grad_(), bias.clone().requires_grad_()
    torch.tanh(x @ w.T + b).sum().backward()
    assert torch.allclose(grads["proj.weight"], w.grad) and torch.allclose(grads["proj.bias"], b.grad)


def test_a_handle_from_a_restarted_worker_is_void():
    with worker(TINY_NET + "\nimport os\ndef crash():\n    os._exit(3)\n") as student:
        net = student.new("TinyNet", 2, 2).value
        assert student.call("crash").error
        assert "lost" in net.call(torch.zeros(1, 2)).error


# ---------------------------------------------------------------- the sandbox


@needs_sandbox
def test_the_worker_sees_no_course_no_network_and_writes_nowhere_else():
    probe = f"""
import os, socket
ROOT = {str(ROOT)!r}
def look():
    seen = sorted(os.listdir(ROOT))
    readable = []
    for path in ("autograder/engine/grade.py", "solutions", "autograder/tests"):
        try:
            open(os.path.join(ROOT, path)).read()
            readable.append(path)
        except OSError:
            pass
    try:
        socket.create_connection(("1.1.1.1", 80), timeout=2)
        network = True
    except OSError:
        network = False
    try:
        open(os.path.join(ROOT, "planted.txt"), "w").write("x")
        wrote = True
    except OSError:
        wrote = False
    pids = [p for p in os.listdir("/proc") if p.isdigit()]
    return seen, readable, network, wrote, len(pids)
"""
    with worker(probe) as student:
        seen, readable, network, wrote, processes = student.call("look").value
    assert set(seen) <= {".venv", "coursekit"}, seen
    assert readable == [] and not network and not wrote
    assert processes <= 3  # the sandbox's init, the worker, and nothing of the grader's
    assert not (ROOT / "planted.txt").exists()


@needs_sandbox
def test_the_sandbox_imports_the_course_package_of_the_folder_it_grades_from(tmp_path):
    """A course folder moved after `.venv/` was made: the environment's editable install of
    coursekit still points at the old folder, which the sandbox does not show (here: this
    checkout, graded from a copy). The worker imports coursekit from the folder it grades from."""
    import os
    import shutil

    copy = tmp_path / "moved_course"
    for name in ("autograder", "coursekit"):
        shutil.copytree(ROOT / name, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
    answer = "import coursekit.gpt\\ndef where():\\n    return coursekit.gpt.__file__\\n"
    script = ("from autograder.trust.student import Student\n"
              f"s = Student([('answer', '{answer}')])\n"
              "s.start()\n"
              "print(repr((s.call('where').value, s.notes)))\n"
              "s.close()\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=copy, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(copy)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    where, notes = eval(proc.stdout.strip().splitlines()[-1])  # noqa: S307 - our own script's repr
    assert notes == [] and where == str(copy / "coursekit" / "gpt.py"), (where, notes)


def test_without_the_sandbox_grading_still_runs_and_says_so_loudly(monkeypatch, capsys):
    monkeypatch.setattr(sandbox, "sandbox_problem", lambda: "bubblewrap disabled for this test")
    monkeypatch.setattr("autograder.trust.student.sandbox_problem", sandbox.sandbox_problem)
    monkeypatch.setattr(sandbox, "_warned", False)
    with worker("def double(x):\n    return 2 * x\n") as student:
        assert not student.process.sandboxed
        assert student.call("double", np.arange(3)).value.tolist() == [0, 2, 4]
    with worker("x = 1\n"):
        pass
    err = capsys.readouterr().err
    assert err.count("WITHOUT the sandbox") == 1 and "bubblewrap disabled for this test" in err


def test_a_fork_bomb_and_leftover_children_die_with_the_worker():
    source = """
import os, subprocess
def spawn():
    subprocess.Popen(["sh", "-c", "sleep 986"], start_new_session=True)
    n = 0
    try:
        for _ in range(5000):
            if os.fork() == 0:
                import time
                time.sleep(60)
                os._exit(0)
            n += 1
    except OSError:
        pass
    return n
"""
    with worker(source, limits=sandbox.Limits(processes=64)) as student:
        forked = student.call("spawn", seconds=20).value
    assert forked < 5000  # the process cap held
    left = subprocess.run(["pgrep", "-f", "sleep 986"], capture_output=True, text=True).stdout.split()
    assert left == []


# ---------------------------------------------------------------- the wire format


def frame(header: dict, blobs: list[bytes]) -> tuple[dict, list[bytes]]:
    return channel.unpack(channel.pack(header, blobs)[8:])


class Payload:
    ran = False

    def __reduce__(self):
        return (Payload.mark, ())

    @staticmethod
    def mark():
        Payload.ran = True


CASES = {  # an array's header fields and its bytes, each refused
    "object_array": ({"dt": "|O", "sh": [1]}, np.array([Payload()], dtype=object).tobytes()),
    "structured": ({"dt": np.dtype([("a", "i4"), ("b", "f8")]).str, "sh": [2]}, bytes(24)),
    "not_a_dtype": ({"dt": "pickle", "sh": [1]}, bytes(8)),
    "bytes_short": ({"dt": "<f8", "sh": [3]}, bytes(16)),
    "bytes_over": ({"dt": "<f8", "sh": [2]}, bytes(24)),
    "negative_shape": ({"dt": "<f8", "sh": [-1, -2]}, bytes(16)),
    "huge_shape": ({"dt": "<f8", "sh": [2**40, 2**40]}, bytes(8)),
    "shape_of_floats": ({"dt": "<f8", "sh": [2.0]}, bytes(16)),
}


@pytest.mark.parametrize("case", [*CASES, "deep", "bad_blob", "unknown_tag"])
def test_the_decoder_refuses_what_is_not_plain_data(case):
    if case in CASES:
        fields, blob = CASES[case]
        header, blobs = {"t": "nd", "b": 0, **fields}, [blob]
    elif case == "deep":
        header, blobs = {"t": "list", "v": []}, []
        for _ in range(channel.MAX_DEPTH + 5):
            header = {"t": "list", "v": [header]}
    elif case == "bad_blob":
        header, blobs = {"t": "nd", "b": 7, "dt": "<f8", "sh": []}, []
    else:
        header, blobs = {"t": "pickle", "v": "gASV"}, []
    with pytest.raises(channel.ChannelError):
        channel.decode(header, blobs)
    assert not Payload.ran


def test_arrays_and_tensors_cross_as_they_were():
    import torch

    values = [np.arange(12, dtype=np.int16).reshape(3, 4)[:, 1::2], np.float32(2.5), np.zeros((0, 3)),
              np.array([1.0, 2.0], dtype=">f8"), torch.arange(6.0).reshape(2, 3).t(),
              torch.ones(2, dtype=torch.bfloat16), np.array(True)]
    blobs: list[bytes] = []
    back = channel.decode(channel.encode(values, blobs), blobs)
    for sent, got in zip(values, back, strict=True):
        assert type(got) is type(sent) or (isinstance(sent, np.generic) and isinstance(got, np.generic))
        if isinstance(sent, torch.Tensor):
            assert got.dtype == sent.dtype and torch.equal(got, sent)
        else:
            assert np.asarray(got).dtype == np.asarray(sent).dtype and np.array_equal(got, sent)
        if isinstance(got, np.ndarray):
            assert got.flags.writeable  # a student's function may write into what it is given


def test_an_oversized_or_garbled_message_is_refused_unread():
    r, w = __import__("os").pipe()
    with open(w, "wb", closefd=True) as f:
        f.write(struct.pack(">Q", channel.MAX_MESSAGE_BYTES + 1))
    with pytest.raises(channel.ChannelError):
        channel.receive(r, deadline=None)
    with pytest.raises(channel.ChannelError):
        channel.unpack(struct.pack(">I", 1000) + b"{}")


def test_subclasses_cross_as_their_plain_bytes():
    class Lying(np.ndarray):
        def __eq__(self, other):
            return True

    blobs: list[bytes] = []
    value = channel.decode(channel.encode(np.arange(3.0).view(Lying), blobs), blobs)
    assert type(value) is np.ndarray and (value == np.array([9.0, 9.0, 9.0])).tolist() == [False] * 3

    class LyingTensor(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            return super().__torch_function__(func, types, args, kwargs or {})

    blobs = []
    tensor = channel.decode(channel.encode(torch.ones(2).as_subclass(LyingTensor), blobs), blobs)
    assert type(tensor) is torch.Tensor


# ---------------------------------------------------------------- `course.py check` cannot be steered


def check(tmp_path, source: str) -> tuple[int, str]:
    path = tmp_path / "answer.py"
    path.write_text(source)
    proc = subprocess.run([sys.executable, "-m", "autograder", "check", "01_attention", str(path), "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stdout


FORGED = json.dumps({"unit": "01_attention", "score": 15, "max_score": 15, "checks": []})


@pytest.mark.parametrize("attack", [
    f"print({FORGED!r})\nimport os\nos._exit(0)",
    f"import sys\nprint({FORGED!r})\nsys.exit(0)",
    "import atexit\natexit.register(lambda: [None for _ in iter(int, 1)])",
    "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
    "def softmax(x, axis=-1):\n    while True:\n        pass",
    "import os, sys\nfor fd in range(3, 100):\n    try:\n        os.write(fd, b'{\"score\": 15}\\n' * 100)\n"
    "    except OSError:\n        pass",
], ids=["os_exit", "sys_exit", "atexit_loop", "ignored_alarm", "fd_spray"])
def test_a_submission_cannot_steer_checks_output_or_exit_status(tmp_path, attack):
    status, out = check(tmp_path, attack)
    report = json.loads(out)
    assert status == 1 and report["score"] == 0 and report["max_score"] == UNITS["01_attention"].points
    assert len(report["checks"]) == sum(len(p.checks) for p in UNITS["01_attention"].parts)


# ---------------------------------------------------------------- library shortcuts a part forbids

SDPA = "torch.nn.functional.scaled_dot_product_attention"
SHORTCUT_USERS = """
import sys

def torch_imported():
    return "torch" in sys.modules

def at_call_time(n):
    import torch  # imported by the call itself, after the rule was set up
    q = torch.ones(1, n, 2)
    return float(torch.nn.functional.scaled_dot_product_attention(q, q, q).sum())
"""


def test_a_forbidden_shortcut_raises_even_when_the_call_imports_its_library():
    """A NumPy unit forbids torch's attention without importing torch into every worker (a
    second and a half of CPU per notebook); a function that imports torch itself still
    meets the rule, and torch works again once the call is over."""
    with worker(SHORTCUT_USERS) as student:
        outcome = student.call("torch_imported", forbid=(SDPA,))
        assert outcome.error is None and outcome.value is False
        outcome = student.call("at_call_time", 3, forbid=(SDPA,))
        assert outcome.value is None and "off limits" in outcome.error, outcome
        outcome = student.call("at_call_time", 3, forbid=(SDPA,))  # torch now imported: patched at once
        assert "off limits" in outcome.error, outcome
        outcome = student.call("at_call_time", 3)
        assert outcome.error is None and outcome.value == pytest.approx(6.0), outcome


TENSOR_METHOD_USER = """
import torch

def log_softmax_method(n):
    return float(torch.zeros(n).log_softmax(-1).sum())
"""


def test_a_forbidden_method_of_a_class_raises_and_comes_back():
    """`torch.Tensor.log_softmax` names a method, not a module's function: it is refused on the
    class while the call runs, and works again afterwards."""
    rule = ("torch.Tensor.log_softmax",)
    with worker(TENSOR_METHOD_USER) as student:
        outcome = student.call("log_softmax_method", 4, forbid=rule)
        assert outcome.value is None and "torch.Tensor.log_softmax is off limits" in outcome.error, outcome
        outcome = student.call("log_softmax_method", 4)
        assert outcome.error is None and outcome.value == pytest.approx(4 * -math.log(4)), outcome


# ---------------------------------------------------------------- a busy machine costs no correct answer


def descendants(pid: int) -> list[int]:
    """`pid` and every process it started, and they started (a sandbox: bubblewrap, its init, the worker)."""
    from pathlib import Path

    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            todo += [int(c) for c in Path(f"/proc/{current}/task/{current}/children").read_text().split()]
        except OSError:
            pass
    return found


def stall(pids: list[int], seconds: float, after: float = 0.0) -> None:
    """What an oversubscribed machine does to a process, at its worst: no CPU at all for a while."""
    import os
    import signal
    import time

    time.sleep(after)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            # A process that was starting the sandbox when the list was taken, gone since (seen on a
            # busy machine): the others are still stopped, the worker among them.
            pass
    time.sleep(seconds)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


BUSY_WORK = """
import numpy as np
def work(n):
    total = 0.0
    for _ in range(n):
        total += float(np.linalg.norm(np.ones(50)))
    return total
"""


def test_trusted_code_under_a_time_limit_runs_on_one_torch_thread():
    """The grader's CPU-time limit on trusted code (the reference, the variants) must not count
    PyTorch's threads spinning at their barriers: on a busy machine that made a catalogued
    training variant use 59 s of CPU instead of 9 and time out. Inside the limit PyTorch runs
    on one thread; after it, on as many as before."""
    before = torch.get_num_threads()
    with sandbox.time_limit(30.0):
        inside = torch.get_num_threads()
    assert inside == 1 and torch.get_num_threads() == before
    with pytest.raises(sandbox.TimeLimitExceeded):
        with sandbox.time_limit(0.3):
            while True:
                pass
    assert torch.get_num_threads() == before


@needs_sandbox
def test_a_call_that_waits_for_the_cpu_is_not_late(tmp_path):
    """Time limits count the worker's CPU time, read by the grader: a call that got no CPU for
    longer than its limit (a machine busy with other gradings) is not a timeout."""
    import threading

    with worker(BUSY_WORK) as student:
        assert student.call("work", 10).ok
        stopper = threading.Thread(target=stall, args=(descendants(student.process.pid), 12.0, 0.3))
        stopper.start()
        outcome = student.call("work", 1_000_000, seconds=10.0)  # a few seconds of CPU, stalled for 12 s
        stopper.join()
    assert outcome.ok and outcome.value == pytest.approx(1_000_000 * 50 ** 0.5), outcome


@needs_sandbox
def test_a_check_whose_worker_stalls_past_the_idle_limit_is_run_again_in_a_fresh_one(monkeypatch):
    """A timeout costs points only when the check also times out in a fresh worker."""
    import threading

    from autograder.engine.grade import grade_part
    from autograder.trust import student as student_module

    monkeypatch.setattr(student_module, "IDLE_SECONDS", 2.0, raising=False)
    spec = UNITS["01_attention"]
    source = (ROOT / "tests" / "submissions" / "01_attention" / "correct_loops.py").read_text()
    with worker(source) as student:
        first = descendants(student.process.pid)
        threading.Thread(target=stall, args=(first, 12.0), daemon=True).start()
        results = grade_part(spec, "softmax", student)
        assert student.process.pid != first[0]  # the check ran again, in a new worker
    assert all(r.passed for r in results), [r.message for r in results if not r.passed]


def test_a_reply_that_does_not_answer_the_request_is_refused():
    source = """
import os, sys
def forge():
    import channel  # the worker's own wire format, already loaded
    fd = int(sys.argv[2])
    os.write(fd, channel.pack({"ok": True, "value": 15, "rid": -1}, []))
    return 0
"""
    with worker(source) as student:
        outcome = student.call("forge")
    assert not outcome.ok and "another request" in outcome.error, outcome


@pytest.mark.parametrize("case", ["deep_json", "huge_header"])
def test_a_reply_header_is_bounded_before_it_is_parsed(case):
    if case == "deep_json":
        head = b"[" * 200_000 + b"]" * 200_000
    else:
        head = b'{"pad": "' + b"x" * (channel.MAX_HEADER_BYTES + 10) + b'"}'
    with pytest.raises(channel.ChannelError):
        channel.unpack(struct.pack(">I", len(head)) + head)


def test_a_callback_cannot_make_the_grader_allocate_gigabytes(tmp_path):
    """A student's argument to the grader's function (the reference causal_mask, here asked for a
    20000 x 20000 mask) costs that call, within a cap, in a process that stays small."""
    script = tmp_path / "callback.py"
    script.write_text(f"""
import resource, sys
sys.path.insert(0, {str(ROOT)!r})
from autograder.engine.reference import load_reference
from autograder.trust.student import Student
ref = load_reference("02_masking")
student = Student([("answer", "def attend(n):\\n    return int(causal_mask(n).sum())\\n")])
student.start()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
outcome = student.call("attend", 20000, stubs={{"causal_mask": ref.causal_mask}}, seconds=30)
small = student.call("attend", 50, stubs={{"causal_mask": ref.causal_mask}})
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
student.close()
print(outcome.error)
print(small.value)
print((after - before) // 1024)
""")
    proc = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    error, small, grown_mb = proc.stdout.strip().splitlines()[-3:]
    assert "MemoryError" in error or "memory" in error, proc.stdout
    assert int(small) == 50 * 51 // 2  # the next call is served as usual
    assert int(grown_mb) < 1300, f"the grader grew by {grown_mb} MB"
