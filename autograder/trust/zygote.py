"""Workers forked from a zygote: the grader's side (`worker/zygote.py` is the sandbox's).

A worker's start (bubblewrap, Python, NumPy, PyTorch, torch._dynamo: one to two and a half
seconds of CPU) is the same for every submission. A zygote does it once: a sandboxed process that
has imported what one kind of worker needs (a unit's `worker_setup`) and runs no student code.
Each worker is then a fork of it that has made itself a sandbox of its own, nested in the
zygote's (new namespaces, private folders, its own /proc, no capability, the unprivileged user;
see worker/zygote.py), and serves one submission: it is never reused, and what a submission does
in it reaches neither the zygote nor another fork.

`forked_worker(limits, hidden, imports)` is what `student.launch_worker` asks first: a new worker,
as (ForkedSandbox, request fd, reply fd), exactly what a freshly started one gives, from the zygote
of that kind kept by this process (started at the first request, or ahead by `prepare_zygote`).
Processes forked from this one (a grading run forked by the warm grader or a class-grading worker)
use the zygotes they inherit: a fork request is one message, and the zygote answers on the new
worker's own pipe, never on the shared socket. Where zygotes cannot work (no sandbox, a kernel
that refuses nested namespaces, AUTOGRADER_ZYGOTE=0), it returns None and workers start afresh.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

from . import sandbox
from .sandbox import Limits, SandboxedProcess, SandboxUnavailable, _PidsCgroup, read_proc
from .worker import channel

WORKER_DIR = Path(__file__).resolve().parent / "worker"
WORKER_FILES = ("main.py", "channel.py", "virtual_clock.py", "zygote.py")
WORKER_MOUNTS = tuple((str(WORKER_DIR / name), f"/opt/grader-worker/{name}") for name in WORKER_FILES)
WORKER_SCRIPT = "/opt/grader-worker/main.py"
READY_SECONDS = 120.0  # from starting the zygote to the end of its imports (2-3 s, unloaded)
FORK_SECONDS = 30.0  # from asking for a fork to the sandbox's report of it (milliseconds)
# A fork that dies before it reports (seen in the test suite beside eight busy loops, not alone)
# is tried once more from a new zygote before the worker starts afresh.
FORK_ATTEMPTS = 2


def enabled() -> bool:
    """Whether workers are forked from zygotes here: only inside the sandbox, and unless
    AUTOGRADER_ZYGOTE=0 says otherwise (a machine whose kernel misbehaves with them)."""
    return os.environ.get("AUTOGRADER_ZYGOTE", "1") != "0" and sandbox.sandbox_problem() is None


class ZygoteFailed(RuntimeError):
    """This zygote gives no more workers (it did not come up, or it died): workers start afresh."""


class Zygote:
    def __init__(self, limits: Limits, hidden: tuple[str, ...], imports: tuple[str, ...]):
        self.limits = limits
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            argv = [sys.executable, "-I", "-B", WORKER_SCRIPT, "--zygote", str(theirs.fileno()),
                    str(limits.tmp_bytes), str(limits.processes), json.dumps(list(imports))]
            self.process = SandboxedProcess(argv, limits=limits, pass_fds=(theirs.fileno(),), mounts=WORKER_MOUNTS,
                                            hidden=tuple(hidden), zygote=True)
        except SandboxUnavailable:
            ours.close()
            raise
        finally:
            theirs.close()
        self.control = ours
        self.ready = False

    def wait_ready(self, seconds: float = READY_SECONDS) -> None:
        """Until its imports are done; ZygoteFailed if it does not come up, or says it cannot fork."""
        if self.ready:
            return
        self.control.settimeout(seconds)
        try:
            message = self.control.recv(256)
        except OSError as err:
            raise ZygoteFailed(f"no word from the zygote ({err})") from None
        if message != b"ready":
            raise ZygoteFailed(message.decode(errors="replace") or "the zygote ended before it was ready")
        self.ready = True

    def fork(self) -> tuple[ForkedSandbox, int, int]:
        """A new worker, nested in its own sandbox: (its process, its request fd, its reply fd)."""
        self.wait_ready()
        request_r, request_w = os.pipe()
        reply_r, reply_w = os.pipe()
        try:
            socket.send_fds(self.control, [b"fork"], [request_r, reply_w])
        except OSError as err:
            for fd in (request_w, reply_r):
                os.close(fd)
            raise ZygoteFailed(f"the zygote took no request ({err})") from None
        finally:
            os.close(request_r)
            os.close(reply_w)
        os.set_blocking(request_w, False)
        os.set_blocking(reply_r, False)
        try:
            try:
                report, _ = channel.receive(reply_r, time.monotonic() + FORK_SECONDS)
            except channel.ChannelError as err:
                raise ZygoteFailed(f"the fork ended before it reported: {err}") from None
            if report.get("op") == "unfit":
                raise ZygoteFailed(f"the fork could not make its sandbox: {report.get('why')}")
            nested = int(report["pid"]) if report.get("op") == "forked" else None
            host = self._host_pid(nested, time.monotonic() + FORK_SECONDS) if nested is not None else None
            if host is None:
                raise ZygoteFailed("the zygote's fork did not report itself")
            sandbox = ForkedSandbox(self.limits, host)
            try:
                channel.send(request_w, {"op": "go"}, [], time.monotonic() + FORK_SECONDS)
            except channel.ChannelError as err:
                sandbox.kill()
                raise ZygoteFailed(f"the fork's init ended before its go: {err}") from None
        except (channel.ChannelError, KeyError, TypeError, ValueError, ZygoteFailed) as err:
            for fd in (request_w, reply_r):  # an unreported fork waits for its go: this ends it
                os.close(fd)
            raise ZygoteFailed(f"no worker from the zygote ({err})") from None
        return sandbox, request_w, reply_r

    def _host_pid(self, nested: int, deadline: float) -> int | None:
        """The process the zygote numbers `nested`, as numbered here (/proc's NSpid). Looked for
        again until `deadline`: while C exits, G moves from under it to bubblewrap's init."""
        while True:
            for pid in self.process.sandbox_pids():
                with contextlib.suppress(OSError):
                    for line in read_proc(f"/proc/{pid}/status").splitlines():
                        if line.startswith("NSpid:"):
                            ids = line.split()[1:]
                            # here, bubblewrap's namespace (the zygote's), the fork's own (where it is 1)
                            if len(ids) >= 3 and ids[1] == str(nested):
                                return pid
                            break
            if time.monotonic() > deadline or not self.process.alive():
                return None
            time.sleep(0.001)

    def alive(self) -> bool:
        return self.process.alive()

    def close(self) -> None:
        self.process.kill()
        self.control.close()


class ForkedSandbox(SandboxedProcess):
    """A worker forked from a zygote, seen from here as a SandboxedProcess is: its init is G (PID 1 of
    its own namespace, `init_pid`), the worker H its child (`main_pid`); /proc is read the same
    way. It is not this process's child: the zygote's sandbox reaps it."""

    def __init__(self, limits: Limits, init_pid: int):  # noqa: D107 - no sandbox to start: it is there
        self.limits, self.zygote, self.scratch, self.sandboxed = limits, False, None, True
        self.parent = os.getpid()
        self.init_pid, self._main_pid = init_pid, None
        self.cgroup = _PidsCgroup(limits.processes)  # root: a cap of its own (its RLIMIT_NPROC elsewhere)
        if self.cgroup.path is not None:
            try:
                (self.cgroup.path / "cgroup.procs").write_text(str(init_pid))
            except OSError as err:
                self.kill()
                raise ZygoteFailed(f"the fork could not be given its process cap ({err})") from None

    @property
    def pid(self) -> int:
        return self.init_pid

    def alive(self) -> bool:
        pid = self.main_pid() or self.init_pid
        try:
            state = read_proc(f"/proc/{pid}/stat").rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            return False
        return state not in ("Z", "X")

    def _open_scratch(self) -> int:
        # Through the worker's root: its init, made undumpable by its new user namespace, is not
        # readable by a grader that is not root.
        root = os.open(f"/proc/{self.main_pid()}/root", os.O_RDONLY | os.O_DIRECTORY)
        try:
            return os.open("scratch", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=root)
        finally:
            os.close(root)

    def kill(self, reap: bool = True) -> None:
        """Kill its init: Linux ends everything in its PID namespace with it."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.init_pid, signal.SIGKILL)
        self.cgroup.kill_all()


# ---------------------------------------------------------------- one zygote per kind of worker

_zygotes: dict[tuple, Zygote] = {}
_unfit: str | None = None  # why zygotes cannot work here, once one has said so
last_failure: str | None = None  # why the last fork gave no worker (that worker started afresh)


def _zygote(limits: Limits, hidden: tuple[str, ...], imports: tuple[str, ...]) -> Zygote | None:
    global _unfit
    if _unfit is not None or not enabled():
        return None
    key = (limits, tuple(hidden), tuple(imports))
    zygote = _zygotes.get(key)
    if zygote is not None and not zygote.alive():
        _discard(key)
        zygote = None
    if zygote is None:
        # Ready before it is kept: a process forked from this one then never waits for a word
        # that this one has read already.
        try:
            zygote = Zygote(limits, hidden, imports)
        except SandboxUnavailable as err:
            _unfit = str(err)
            return None
        try:
            zygote.wait_ready()
        except ZygoteFailed as err:
            zygote.close()
            _unfit = str(err)
            return None
        _zygotes[key] = zygote
    return zygote


def _discard(key: tuple) -> None:
    zygote = _zygotes.pop(key, None)
    if zygote is not None:
        zygote.close()


def prepare_zygote(limits: Limits, hidden: tuple[str, ...], imports: tuple[str, ...]) -> None:
    """Start the zygote of this kind now (if there is none), so a later worker need not wait for it."""
    _zygote(limits, hidden, imports)


def forked_worker(limits: Limits, hidden: tuple[str, ...], imports: tuple[str, ...]):
    """A new worker from this kind's zygote, or None (then start one afresh): see the docstring."""
    global last_failure
    for _ in range(FORK_ATTEMPTS):
        zygote = _zygote(limits, hidden, imports)
        if zygote is None:
            return None
        try:
            return zygote.fork()
        except ZygoteFailed as err:
            last_failure = str(err)  # kept for a test's report
            _discard((limits, tuple(hidden), tuple(imports)))  # the next attempt starts another
    return None  # the worker starts afresh, graded alike


def forks_fail(why: str) -> None:
    """A fork came up without a working worker in it (no submission's code had run): forks do not
    work here. Every worker from now on starts afresh."""
    global _unfit
    _unfit = f"a fork of the zygote did not come up: {why}"
    close_all()


def close_all() -> None:
    """Stop every zygote this process started (its sandboxes die with it anyway)."""
    for key in list(_zygotes):
        _discard(key)
