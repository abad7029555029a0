"""The grader's side of the trust line: a submission's code, running in a sandboxed worker.

`Submission.open(path)` reads a notebook or `.py` file (as data: the grader never runs it)
and starts a worker (`autograder/trust/worker/main.py`) in the sandbox, which runs the code
cells one by one. Then `student.call("softmax", x)` sends `x` across, the worker calls
the student's `softmax`, and what comes back is data decoded without running anything:
arrays, tensors, numbers, strings, and tuples, lists and dicts of them. A class stays in
the worker: `student.new("Block", 16, 4)` returns a `Handle`, and `handle.call(x)`,
`handle.method("load_state_dict", sd)`, `handle.attr("weight")` drive it from here.

Every request has a time limit in CPU seconds, which the grader reads from /proc (so a
machine busy with other work does not make a correct answer late), and a wall-clock
backstop many times longer for code that waits instead of computing. A worker that misses
one, dies, or answers garbage is killed (with everything it started) and replaced by a
fresh one that runs the submission's cells again, skipping any cell that never finished.
A worker that cannot be started at all is the grader's failure (`SandboxUnavailable`),
never the student's.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import zygote
from .budget import Budget, Meter
from .sandbox import (
    CELL_SECONDS,
    Limits,
    SandboxedProcess,
    SandboxUnavailable,
    TimeLimitExceeded,
    blocked_seconds,
    memory_cap,
    own_thread_clock,
    quiet,
    sandbox_problem,
    time_limit,
)
from .submission import code_cells
from .worker import channel
from .worker.main import STAND_INS  # library stubs of this module travel with the call
from .worker.virtual_clock import Took, VirtualClock

WORKER_DIR = zygote.WORKER_DIR
GRACE_SECONDS = 3.0  # the worker's own alarm should stop a call; this much CPU time after, we kill it
# Code that waits rather than computes (a sleep, a read that never returns) uses no CPU time:
# it is stopped once it has computed nothing for IDLE_SECONDS (a process on a machine many
# times oversubscribed still gets a share of a core every second), and in any case after
# WALL_FACTOR times its limit in wall-clock time, never sooner than WALL_MIN_SECONDS.
IDLE_SECONDS = 20.0
WALL_FACTOR = 12.0
WALL_MIN_SECONDS = 60.0
START_SECONDS = 120.0  # from starting the sandbox to the worker's hello (a second, unloaded)
START_ATTEMPTS = 3
CALLBACK_MEMORY_BYTES = 1 << 30  # what one call of the grader's function may allocate here
MAX_RESTARTS = 20
# The largest file `Student.fresh_worker` carries from one worker to the next (a checkpoint): it is
# read into the grader's memory, then written into the next sandbox's 128 MB scratch folder.
CARRIED_FILE_BYTES = 16 << 20


def launch_worker(limits: Limits, hidden: tuple[str, ...],
                  imports: tuple[str, ...] = ()) -> tuple[SandboxedProcess, int, int]:
    """A sandbox with the worker in it, just started: (the process, the fd its requests are
    written to, the fd its replies are read from). Forked from the zygote of workers that import
    `imports` where zygotes work (`zygote.py`), else started afresh. Raises SandboxUnavailable."""
    forked = zygote.forked_worker(limits, tuple(hidden), tuple(imports))
    if forked is not None:
        return forked
    request_r, request_w = os.pipe()
    reply_r, reply_w = os.pipe()
    try:
        # Inside the sandbox the worker sees its own files and nothing else of autograder/.
        script = zygote.WORKER_SCRIPT if sandbox_problem() is None else str(WORKER_DIR / "main.py")
        argv = [sys.executable, "-I", "-B", script, str(request_r), str(reply_w)]
        process = SandboxedProcess(argv, limits=limits, pass_fds=(request_r, reply_w), mounts=zygote.WORKER_MOUNTS,
                                   hidden=tuple(hidden))
    except SandboxUnavailable:
        for fd in (request_w, reply_r):
            os.close(fd)
        raise
    finally:
        os.close(request_r)
        os.close(reply_w)
    os.set_blocking(request_w, False)
    os.set_blocking(reply_r, False)
    return process, request_w, reply_r


# ---------------------------------------------------------------- a worker started ahead
# What a worker does before it runs any submission (bubblewrap's start, Python's, the imports of
# a unit's checks and notebook: a second or two with PyTorch) is the same for every submission,
# so a long-lived grader (the check line's warm grader, `warm_grader.py`) does it ahead, while
# nobody waits. Such a worker is given to one Student, which then runs one submission in it; it
# is never given to another, and a Student that restarts its worker starts a fresh one.

PREPARE_RID = 0  # the rid of the prepare request sent ahead (a Student's own requests count from 1)


class PreparedWorker:
    """A worker started, and asked to import `imports`, before any submission is known."""

    def __init__(self, limits: Limits, hidden: tuple[str, ...], imports: tuple[str, ...]):
        self.key = (limits, tuple(hidden), tuple(imports))
        self.process, self.request_fd, self.reply_fd = launch_worker(limits, tuple(hidden), tuple(imports))
        self.waiting_for = ["hello", "prepared"]  # the messages still to come, in order
        try:  # a few bytes into an empty pipe: it never blocks; the worker reads it after its hello
            channel.send(self.request_fd, {"op": "prepare", "imports": list(imports), "rid": PREPARE_RID}, [],
                         time.monotonic() + 10)
        except channel.ChannelError:
            self.discard()
            raise SandboxUnavailable("the worker started ahead did not take its first request") from None

    def ready(self) -> bool:
        return not self.waiting_for

    def advance(self, deadline: float) -> str | None:
        """Read the next message its start owes: None, or what went wrong."""
        try:
            reply, _ = channel.receive(self.reply_fd, deadline)
        except channel.ChannelError as err:
            return f"no answer from the worker ({err})"
        expected = self.waiting_for.pop(0)
        if expected == "hello" and reply.get("op") != "hello":
            return "the worker's first message was not its hello"
        if expected == "prepared" and not (reply.get("rid") == PREPARE_RID and reply.get("ok")):
            return "the worker did not finish its imports"
        return None

    def finish(self, deadline: float) -> str | None:
        """Wait for the rest of its start: None once it is ready, or what went wrong."""
        while self.waiting_for:
            problem = self.advance(deadline)
            if problem is not None:
                return problem
        return None

    def hand_over(self) -> None:
        """Forget it here, without stopping it: a process forked from this one has it now."""
        for fd in (self.request_fd, self.reply_fd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.request_fd = self.reply_fd = -1

    def discard(self) -> None:
        """Stop it, and everything in its sandbox."""
        self.process.kill()
        self.hand_over()


_spare: PreparedWorker | None = None


def offer_spare(worker: PreparedWorker | None) -> None:
    """The worker the next Student of this process (or of a process forked from it) adopts, if
    it asks for the same limits, hidden files and imports; None stops one offered and not taken."""
    global _spare
    if _spare is not None and _spare is not worker:
        _spare.discard()
    _spare = worker


def hand_over_spare() -> PreparedWorker | None:
    """Just after a fork whose child is to adopt the spare: it is the child's now. Returns it,
    for the parent to stop (and reap) once the child is done."""
    global _spare
    spare, _spare = _spare, None
    if spare is not None:
        spare.hand_over()
    return spare


def take_spare(limits: Limits, hidden: tuple[str, ...], imports: tuple[str, ...]) -> PreparedWorker | None:
    """The spare, once (it is never offered twice), if it was made for these; else None."""
    global _spare
    spare, _spare = _spare, None
    if spare is not None and spare.key != (limits, tuple(hidden), tuple(imports)):
        spare.discard()
        return None
    return spare


# ---------------------------------------------------------------- what a call gives back


@dataclass
class Outcome:
    """What one call of student code came to: a value, an error, or a timeout."""

    value: object = None
    error: str | None = None  # "ValueError: shapes do not match"
    error_type: str | None = None  # "ValueError"
    where: str | None = None  # "softmax, line 4": the student's line that raised
    timed_out: bool = False
    # what the machine may have caused, and a fresh worker may not repeat: a wait without any
    # computing (no CPU for IDLE_SECONDS), or a worker that died or garbled its answer. A call
    # that used up its CPU time did so by itself, and would again.
    retry: bool = False
    args_after: tuple = ()
    kwargs_after: dict = field(default_factory=dict)
    arg_grads: list = field(default_factory=list)  # with `backward`: each argument's .grad
    # with `measure_memory`: {"peak_bytes": the most memory the call added at once, read from /proc
    # by the grader, "contained": whether nothing else could run in a new process meanwhile}
    # from a worker, or {"census": [[shape, count], ...] of the tensors created} from trusted code
    footprint: dict = field(default_factory=dict)
    # the submission had used up its grading's budget (budget.py): `error` says so; nothing more runs
    over_budget: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None and not self.timed_out


class Handle:
    """An object that lives in the worker (a student's `nn.Module`, say)."""

    def __init__(self, student: Student, ident: int, type_name: str, generation: int):
        self.student, self.id, self.type_name, self.generation = student, ident, type_name, generation

    def __repr__(self):
        return f"<{self.type_name} in the student's worker>"

    def call(self, *args, seconds: float | None = None, keep: bool = False, stubs: dict | None = None,
             forbid: tuple = (), backward=None, **kwargs) -> Outcome:
        return self.student._call({"handle": self.id}, args, kwargs, seconds=seconds, keep=keep, handle=self,
                                  stubs=stubs, forbid=forbid, backward=backward)

    def method(self, name: str, *args, seconds: float | None = None, keep: bool = False, stubs: dict | None = None,
               forbid: tuple = (), **kwargs) -> Outcome:
        return self.student._call({"handle": self.id, "method": name}, args, kwargs, seconds=seconds,
                                  keep=keep, handle=self, stubs=stubs, forbid=forbid)

    def attr(self, name: str) -> Outcome:
        return self.student._getattr(self, name)

    def grads(self) -> Outcome:
        """{parameter name: its .grad tensor, or None} of a module."""
        return self.student._simple(self, {"op": "grads", "handle": self.id})


class Unsendable:
    """A result that cannot cross as data (a generator, an object of the student's own)."""

    def __init__(self, what: str):
        self.what = what

    def __repr__(self):
        return f"<{self.what}>"


# ---------------------------------------------------------------- the worker


class WorkerFailed(Exception):
    pass


class Student:
    """A submission's code, running in a sandboxed worker; see the module docstring."""

    def __init__(self, cells: list[tuple[str, str]], *, limits: Limits | None = None,
                 call_seconds: float = 5.0, cell_seconds: float = CELL_SECONDS, hidden: tuple[str, ...] = (),
                 imports: tuple[str, ...] = (), budget: Budget | None = None):
        self.cells = cells
        self.limits = limits or Limits()
        self.call_seconds = call_seconds
        self.cell_seconds = cell_seconds
        self.hidden = tuple(hidden)  # course files the sandbox shows empty (see Unit.hidden)
        self.imports = tuple(imports)  # modules the worker imports before any timed call
        self.next_rid = 0
        self.notes: list[str] = []  # what went wrong while loading, for people
        self.skipped: set[int] = set()  # cells that never finished: not run again
        self.process: SandboxedProcess | None = None
        self.generation = 0  # bumped at every restart: older handles are void
        self.restarts = 0
        self.callbacks: dict = {}  # the grader's functions one call may call back, by key
        self.remote: dict[int, RemoteModel] = {}  # by handle id: models whose layers run here
        # What the submission's code has spent of its budget, in every worker it had (None: no budget).
        self.meter = Meter(budget)
        self._baseline: float | None = None  # the live worker's CPU time when the submission's code began

    @property
    def exhausted(self) -> str | None:
        """Why nothing more of the submission's code runs: its budget is used up (or None)."""
        return self.meter.exceeded

    def usage(self) -> dict:
        """The budget and what was spent of it, for the grading report."""
        return self.meter.report(self._live_cpu())

    def _live_cpu(self) -> float:
        """CPU time the live worker has used on the submission's code (not on its own start)."""
        if self.process is None or self._baseline is None:
            return 0.0
        used = self.process.total_cpu_seconds()
        return max(0.0, used - self._baseline) if used is not None else 0.0

    @classmethod
    def open(cls, path: str | Path, **kwargs) -> Student:
        student = cls(code_cells(path), **kwargs)
        student.start()
        return student

    # ------------------------------------------------------------ life cycle

    def start(self) -> None:
        """A fresh worker that has run the submission's cells. Raises SandboxUnavailable when
        no worker comes up (the machine's problem: it says nothing about the submission). Once
        the submission's budget is used up, nothing starts."""
        self.close()
        if self.exhausted:
            return
        self.generation += 1
        spare = take_spare(self.limits, self.hidden, self.imports)
        if spare is None or not self._adopt(spare):
            problem = "no attempt"
            for attempt in range(START_ATTEMPTS):
                if attempt:
                    time.sleep(0.5 * 2 ** (attempt - 1))
                problem = self._start_worker()
                if problem is None:
                    break
                self.close()
            else:
                raise SandboxUnavailable(f"the worker that runs the submission could not start: {problem}")
            try:
                self._request({"op": "prepare", "imports": list(self.imports)}, [], 120.0)
            except WorkerFailed as err:  # no student code has run yet: this is the machine's doing
                self.close()
                raise SandboxUnavailable(
                    f"the worker that runs the submission failed before running it: {err}") from None
        # From here on, what the worker computes is the submission's (its start and imports were not).
        self._baseline = self.process.total_cpu_seconds() or 0.0
        self._load()

    def _start_worker(self) -> str | None:
        """Start the sandbox and wait for the worker's hello: None, or why it did not come."""
        try:
            self.process, self.request_fd, self.reply_fd = launch_worker(self.limits, self.hidden, self.imports)
        except SandboxUnavailable as err:
            return str(err)
        try:  # sent before any student code runs: nothing the submission does can stop it
            hello, _ = channel.receive(self.reply_fd, time.monotonic() + START_SECONDS)
            problem = None if hello.get("op") == "hello" else "the worker's first message was not its hello"
        except channel.ChannelError as err:
            problem = f"no hello from the worker ({err})"
        if problem is not None and isinstance(self.process, zygote.ForkedSandbox):
            zygote.forks_fail(problem)  # the next attempt starts a worker afresh
        return problem

    def _adopt(self, spare: PreparedWorker) -> bool:
        """Take over a worker started before this submission was known: wait for what is left of
        its start (its hello, its imports). False, with nothing kept, if it did not come up."""
        self.process, self.request_fd, self.reply_fd = spare.process, spare.request_fd, spare.reply_fd
        problem = spare.finish(time.monotonic() + START_SECONDS)
        if problem is None:
            return True
        if isinstance(spare.process, zygote.ForkedSandbox):
            zygote.forks_fail(problem)
        self.close()
        return False

    def _load(self) -> None:
        for index, (label, source) in enumerate(self.cells):
            if index in self.skipped:
                continue
            try:
                reply, _ = self._request({"op": "exec", "label": label, "source": source,
                                          "seconds": self.cell_seconds}, [], self.cell_seconds)
            except WorkerFailed as err:
                if self.exhausted:
                    self._note(f"{label} was stopped: {self.exhausted}")
                    return
                self.skipped.add(index)
                self._note(f"{label} {err}; it was skipped")
                self._restart_quietly()
                return
            if not reply.get("ok"):
                if reply.get("timed_out"):
                    # Stopped by its alarm, possibly in the middle of an import: start again
                    # without it, so nothing half-made is left for the checks.
                    self.skipped.add(index)
                    self._note(f"{label} was still running after {self.cell_seconds:g} s of computing; stopped it")
                    self._restart_quietly()
                    return
                self._note(f"{label} raised {str(reply.get('error'))[:300]}")

    def _restart_quietly(self) -> None:
        """A fresh worker that reruns the cells, skipping the ones that never finished.

        After MAX_RESTARTS the worker stays down: every later call fails at once with a
        plain message, and the remaining checks score 0 rather than take forever; so it does
        once the submission's budget is used up."""
        if self.exhausted:
            self.close()
            return
        self.restarts += 1
        if self.restarts > MAX_RESTARTS:
            self.close()
            self._note(f"your code crashed or hung {MAX_RESTARTS} times; the remaining checks were not run")
            return
        self.start()

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def close(self) -> None:
        if self.process is not None:
            self.meter.cpu += self._live_cpu()  # this worker's account is closed: read it before it goes
            self._baseline = None
            self.process.kill()
            self.process = None
            for fd in (self.request_fd, self.reply_fd):
                try:
                    os.close(fd)
                except OSError:
                    pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # ------------------------------------------------------------ requests

    def _request(self, header: dict, blobs: list[bytes], seconds: float):
        """Send one request and wait for its reply, serving callbacks meanwhile.

        `seconds` is CPU time, the worker's (read from /proc, so nothing the worker says is
        believed), plus GRACE_SECONDS for its own alarm to act; code that waits instead is
        stopped after IDLE_SECONDS without computing, or at the wall-clock backstop. Once the
        submission's code has begun (after the worker's own start), every request also draws
        on the run's budget (budget.py): the sandbox's CPU time, the grader's time answering
        its callbacks, and the time its main thread spent blocked; past the budget the worker
        is stopped and nothing more of the submission runs."""
        if self.exhausted:
            raise WorkerFailed(self.exhausted)
        if self.process is None or not self.process.alive():
            raise WorkerFailed("stopped: the process running your code had exited")
        self.next_rid += 1
        rid = self.next_rid
        wall = max(WALL_MIN_SECONDS, WALL_FACTOR * seconds)
        began = time.monotonic()
        deadline = began + wall
        started = self.process.cpu_seconds()
        progress = {"cpu": started, "at": began, "measured": began}
        metered = self.meter.budget is not None and self._baseline is not None
        clock = self.process.main_thread_clock() if metered else None
        ours = own_thread_clock() if metered else None
        # wall-clock time spent here answering the worker's callbacks, less this thread's own time
        # on (or waiting for) a CPU meanwhile, which `ours` counts already
        answering = {"seconds": 0.0}
        target = header.get("target") if isinstance(header.get("target"), dict) else {}
        doing = (f"{header['label']} ran" if header.get("op") == "exec" else
                 f"`{target['name']}` was being checked" if isinstance(target.get("name"), str) else "your code ran")

        def blocked(now: float) -> float:
            """Seconds the worker's main thread has been blocked on its own account during this
            request (sandbox.blocked_seconds): not while this process was busy, answering it
            or reading its reply, even on a machine so busy that this process waits for a CPU."""
            current = self.process.main_thread_clock() if clock is not None else None
            if current is None:
                return 0.0  # no scheduler statistics here: waiting is not metered (README)
            return blocked_seconds(now - began, clock, current, ours, own_thread_clock(), answering["seconds"])

        # A request that ends within one patience tick is not metered while it runs: the next one
        # is refused at once if this one's CPU time went over.
        if metered and self.meter.over(self._live_cpu(), 0.0, doing):
            self.close()
            raise WorkerFailed(self.exhausted)

        def patience():
            used = self.process.cpu_seconds()
            now = time.monotonic()
            if started is not None and used is not None and used - started > seconds + GRACE_SECONDS:
                raise channel.ChannelTimeout(f"did not finish within {seconds:g} s of computing time")
            if metered and self.meter.over(self._live_cpu(), blocked(now), doing):
                raise channel.ChannelTimeout(self.meter.exceeded)
            if used != progress["cpu"]:
                progress.update(cpu=used, at=now)
            elif now - progress["at"] > IDLE_SECONDS:
                raise channel.ChannelTimeout(f"waited {IDLE_SECONDS:g} s without computing")

        try:
            channel.send(self.request_fd, {**header, "rid": rid}, blobs, deadline, patience)
            while True:
                reply, reply_blobs = channel.receive(self.reply_fd, deadline, patience)
                if reply.get("rid") != rid:
                    raise channel.ChannelError("a reply to another request")
                if reply.get("op") == "callback":
                    at, cpu, active = time.monotonic(), time.process_time(), own_thread_clock()
                    try:
                        self._serve_callback(reply, reply_blobs, deadline, patience)
                    finally:
                        answering["seconds"] += time.monotonic() - at
                        after = own_thread_clock()
                        if active is not None and after is not None:
                            answering["seconds"] -= (after[0] - active[0]) + (after[1] - active[1])
                        if metered:  # the grader's work, done at the submission's request
                            self.meter.cpu += time.process_time() - cpu
                    progress["at"] = time.monotonic()  # it was waiting for the grader meanwhile
                    # Measured between callbacks too, as often as the channel's own tick: a
                    # submission that calls back without a pause never leaves the channel idle
                    # long enough for one (a generation calls back for every layer it runs).
                    if progress["at"] - progress["measured"] >= channel.TICK:
                        patience()
                        progress["measured"] = progress["at"]
                    continue
                return reply, reply_blobs
        except channel.ChannelTimeout as err:
            if self.exhausted:
                self.meter.waiting += blocked(time.monotonic())
                metered = False  # counted: the finally below has nothing more to add
                self.close()
                raise WorkerFailed(self.exhausted) from None
            if "computing time" in str(err):
                why = str(err)
            else:  # waiting, not computing: idle too long, or past the wall-clock backstop
                waited = str(err) if "without computing" in str(err) else f"waited {wall:g} s in all"
                why = f"did not finish: it {waited} (a sleep, or a read that never returns?)"
            raise WorkerFailed(why) from None
        except channel.ChannelClosed:
            raise WorkerFailed("stopped: the process running your code exited (os._exit, sys.exit in a "
                               "thread, a crash or a memory limit)") from None
        except channel.ChannelError as err:
            raise WorkerFailed(f"stopped: the process running your code sent something unreadable ({err})") \
                from None
        finally:
            if metered and self.process is not None:
                self.meter.waiting += blocked(time.monotonic())

    def _serve_callback(self, header, blobs, deadline, patience) -> None:
        key = header.get("fn")
        key = tuple(key) if isinstance(key, list) else key
        fn = self.callbacks.get(key)
        if fn is None and isinstance(key, tuple) and len(key) == 2 and key[0] == "remote":
            model = next((m for m in self.remote.values() if m.key == key[1]), None)
            fn = model.layer if model is not None else None
        reply_blobs: list[bytes] = []
        if fn is None:
            reply = {"ok": False, "error": "no such function"}
        else:
            try:
                args = channel.decode(header.get("args"), blobs)
                kwargs = channel.decode(header.get("kwargs"), blobs)
                if type(args) is not tuple or type(kwargs) is not dict:
                    raise channel.ChannelError("malformed call")
                generators: list = []
                args = tuple(_ground_generator(a, generators) for a in args)
                kwargs = {k: _ground_generator(v, generators) for k, v in kwargs.items()}
                # The arguments are the student's: `causal_mask(20000)` would have the reference
                # allocate gigabytes here. Past the cap the reference fails, and so does that call.
                with quiet(), time_limit(60.0), memory_cap(CALLBACK_MEMORY_BYTES):
                    value = fn(*args, **kwargs)
                took = None
                if isinstance(value, Took):  # how long the call took on the worker's virtual clock: it moves it
                    took, value = value.seconds, value.value
                if channel.payload_bytes(value) > channel.MAX_MESSAGE_BYTES // 2:  # checked before copying it
                    raise MemoryError("the result is larger than the grader sends back")
                reply = {"ok": True, "value": channel.encode(value, reply_blobs),
                         "generator_states": channel.encode([g.get_state() for g in generators], reply_blobs)}
                if took is not None:
                    reply["advance"] = took
            except channel.ChannelError as err:
                reply, reply_blobs = {"ok": False, "error": f"TypeError: {err}"}, []
            except MemoryError as err:
                why = str(err) or "the arguments ask for more memory than the grader allows one call"
                reply, reply_blobs = {"ok": False, "error": why, "type": "MemoryError"}, []
            except Exception as err:  # noqa: BLE001 - the reference raised on the student's arguments
                if "can't allocate memory" in str(err) or "not enough memory" in str(err):
                    err = MemoryError("the arguments ask for more memory than the grader allows one call")
                reply, reply_blobs = {"ok": False, "error": str(err)[:300], "type": type(err).__name__}, []
        channel.send(self.request_fd, {**reply, "rid": header.get("rid")}, reply_blobs, deadline, patience)

    def _encode_args(self, args, kwargs, blobs):
        def as_callback(value):
            if callable(value):
                key = len(self.callbacks) + 1
                self.callbacks[key] = value
                return channel.Ref("fn", key)
            if isinstance(value, Handle):
                return channel.Ref("obj", value.id)
            return None

        return (channel.encode(tuple(args), blobs, as_callback),
                channel.encode(dict(kwargs), blobs, as_callback))

    def _outcome(self, reply, blobs) -> Outcome:
        if not reply.get("ok"):
            if reply.get("unsendable"):
                return Outcome(value=Unsendable(f"a value the grader cannot read ({reply.get('error')})"))
            after = ((), {})
            if "args_after" in reply:  # a call that raised, with the inputs as it left them
                try:
                    after = (channel.decode(reply["args_after"], blobs), channel.decode(reply["kwargs_after"], blobs))
                except (channel.ChannelError, KeyError):
                    pass
            return Outcome(error=str(reply.get("error", "failed"))[:400], error_type=str(reply.get("type") or ""),
                           where=reply.get("where") if isinstance(reply.get("where"), str) else None,
                           timed_out=bool(reply.get("timed_out")), args_after=after[0], kwargs_after=after[1])
        types = reply.get("types") if isinstance(reply.get("types"), dict) else {}
        try:
            decoded = {key: self._wrap(channel.decode(reply[key], blobs), types)
                       for key in ("value", "args_after", "kwargs_after", "arg_grads") if key in reply}
        except channel.ChannelError as err:
            return Outcome(value=Unsendable(f"a value the grader cannot read ({err})"))
        return Outcome(value=decoded.get("value"), args_after=decoded.get("args_after", ()),
                       kwargs_after=decoded.get("kwargs_after", {}), arg_grads=decoded.get("arg_grads", []))

    def _wrap(self, value, types):
        """Refs to held objects become Handles; everything else is plain data already."""
        if isinstance(value, channel.Ref):
            name = str(types.get(str(value.id), "object"))[:200]
            return Handle(self, value.id, name, self.generation)
        if type(value) in (tuple, list):
            return type(value)(self._wrap(v, types) for v in value)
        if type(value) is dict:
            return {k: self._wrap(v, types) for k, v in value.items()}
        return value

    def _call(self, target: dict, args, kwargs, *, seconds: float | None = None, stubs: dict | None = None,
              forbid: tuple = (), return_args: bool = False, keep: bool = False, handle: Handle | None = None,
              backward=None, measure_memory: bool = False) -> Outcome:
        if handle is not None and handle.generation != self.generation:
            return Outcome(error="the object was lost when your code had to be restarted")
        seconds = self.call_seconds if seconds is None else seconds
        stubs = stubs or {}
        # A stub is the reference's function, called back here, or a library function's
        # dotted name, which the worker imports itself.
        library = {name: fn for name, fn in stubs.items() if isinstance(fn, str)}
        stubs = {name: fn for name, fn in stubs.items() if not isinstance(fn, str)}
        self.callbacks = {("ref", name): fn for name, fn in stubs.items()}
        blobs: list[bytes] = []
        encoded_args, encoded_kwargs = self._encode_args(args, kwargs, blobs)
        header = {"op": "call", "target": target, "args": encoded_args, "kwargs": encoded_kwargs,
                  "stubs": sorted(stubs), "library_stubs": library, "forbid": list(forbid), "seconds": seconds,
                  "return_args": return_args, "keep": keep}
        if any(dotted.startswith(STAND_INS + ".") for dotted in library.values()):
            # Sent with the call that needs it, never a file in the sandbox: its functions are
            # answers to unit 08, which the submission must not find while its own are graded.
            header["stand_ins"] = (WORKER_DIR / "stand_ins.py").read_text()
        if backward is not None:
            header["backward"] = channel.encode(backward, blobs)
        process = self.process
        measured = measure_memory and process is not None and process.reset_peak_memory()
        before = process.memory().get("rss") if measured else None
        try:
            with process.no_new_processes() if measured else contextlib.nullcontext(False) as contained:
                reply, reply_blobs = self._request(header, blobs, seconds)
                after = process.memory().get("peak") if measured else None
        except WorkerFailed as err:
            if self.exhausted:  # nothing is run again: the rest of the run has no budget left
                return Outcome(error=self.exhausted, timed_out=True, over_budget=True)
            timed_out = "did not finish" in str(err)
            self._restart_quietly()
            return Outcome(error=str(err), timed_out=timed_out, retry="computing time" not in str(err))
        finally:
            self.callbacks = {}
        outcome = self._outcome(reply, reply_blobs)
        if measure_memory:
            outcome.footprint = {"peak_bytes": after - before if before is not None and after is not None else None,
                                 "contained": bool(contained)}
        if outcome.timed_out:
            # Interrupted by its alarm, maybe in the middle of an import or a library's own
            # state: the next call starts from a fresh worker.
            self._restart_quietly()
        return outcome

    def _getattr(self, handle: Handle, name: str) -> Outcome:
        return self._simple(handle, {"op": "getattr", "handle": handle.id, "attr": name})

    def _simple(self, handle: Handle, header: dict) -> Outcome:
        """A request about a held object that runs no student method of our choosing."""
        if handle.generation != self.generation:
            return Outcome(error="the object was lost when your code had to be restarted")
        try:
            reply, blobs = self._request(header, [], self.call_seconds)
        except WorkerFailed as err:
            self._restart_quietly()
            return Outcome(error=str(err))
        return self._outcome(reply, blobs)

    # ------------------------------------------------------------ what the tests use

    def kind(self, name: str) -> str:
        """"missing", "function", "class", or the type name of whatever `name` is (as the
        worker says: it only decides which message a missing answer gets)."""
        for _ in range(2):  # once more in a fresh worker, as for a check
            try:
                reply, _ = self._request({"op": "describe", "name": name}, [], 10.0)
                break
            except WorkerFailed:
                self._restart_quietly()
        else:
            return "missing"
        kind = reply.get("kind")
        return str(kind)[:100] if isinstance(kind, str) else "missing"

    def source(self) -> str:
        """The submission's code as the grader read it (the cells the worker runs)."""
        return "\n\n".join(source for _, source in self.cells)

    def call(self, name: str, *args, seconds: float | None = None, stubs: dict[str, Callable] | None = None,
             forbid: tuple = (), return_args: bool = False, keep: bool = False, backward=None,
             measure_memory: bool = False, **kwargs) -> Outcome:
        """Call the student's function `name`. `stubs` maps contract names to the
        reference functions that stand in for the student's own during this call; with
        `backward`, the result is backpropagated from that gradient and each argument's
        `.grad` comes back in `arg_grads`; with `measure_memory`, the grader measures the
        most memory the worker added during the call (`footprint`), while no new process
        or thread may start in the sandbox."""
        return self._call({"name": name}, args, kwargs, seconds=seconds, stubs=stubs, forbid=forbid,
                          return_args=return_args, keep=keep, backward=backward, measure_memory=measure_memory)

    def call_on_virtual_clock(self, name: str, *args, seconds: float | None = None, stubs: dict | None = None,
                              forbid: tuple = (), **kwargs) -> Outcome:
        """`call`, with the worker's clocks on a clock the grader moves, for this call alone
        (worker/virtual_clock.py): a timer's answer is then what the grader's functions among the
        arguments say their calls took (a `Took`), however busy the machine. The target carries
        the flag, so that the request is built as every call's is."""
        return self._call({"name": name, "clock": "virtual"}, args, kwargs, seconds=seconds, stubs=stubs,
                          forbid=forbid)

    def record(self, **fields) -> Outcome:
        """A plain record (types.SimpleNamespace) of `fields`, held in the worker: a
        configuration that does not depend on the student's own config class."""
        blobs: list[bytes] = []
        header = {"op": "record", "fields": channel.encode(dict(fields), blobs)}
        try:
            reply, reply_blobs = self._request(header, blobs, self.call_seconds)
        except WorkerFailed as err:
            self._restart_quietly()
            return Outcome(error=str(err))
        return self._outcome(reply, reply_blobs)

    def new(self, class_name: str, *args, seconds: float | None = None, stubs: dict | None = None,
            forbid: tuple = (), **kwargs) -> Outcome:
        """Construct the student's class; the outcome's value is a Handle."""
        return self._call({"name": class_name}, args, kwargs, seconds=seconds, keep=True, stubs=stubs,
                          forbid=forbid)

    def make(self, dotted: str, *args, seconds: float | None = None, **kwargs) -> Outcome:
        """Build one of the course's own objects in the worker (`coursekit.gpt.GPT`, a
        `torch.Generator`): something the student's function is handed, not the student's."""
        return self._call({"make": dotted}, args, kwargs, seconds=seconds, keep=True)

    def remote_model(self, fields: dict, state: dict, spec: dict, autograd: bool = False) -> Outcome:
        """The course's GPT with these weights, for the student's code to drive, its weights kept
        here: the worker holds a shell (worker/main.py: remote_gpt) whose every layer asks this
        process to compute it, and the calls named in `spec` are recorded (watch.call_record).
        What the student's code does with the model is then seen here, call by call, whatever
        it does in its own process. With `autograd`, each layer's output is linked to its input
        and parameters in the worker's autograd graph, as a real layer's is (see remote_gpt).
        The outcome's value is a Handle."""
        from .watch import trusted_gpt

        # a key no model of this grading has had (handles of a worker that was replaced stay here)
        key = max((m.key for m in self.remote.values()), default=0) + 1
        model = RemoteModel(trusted_gpt(fields, state), dict(spec), key=key)
        blobs: list[bytes] = []
        header = {"op": "remote_model", "fields": channel.encode(dict(fields), blobs), "key": model.key,
                  "autograd": bool(autograd)}
        try:
            reply, reply_blobs = self._request(header, blobs, self.call_seconds)
        except WorkerFailed as err:
            self._restart_quietly()
            return Outcome(error=str(err))
        outcome = self._outcome(reply, reply_blobs)
        if isinstance(outcome.value, Handle):
            self.remote[outcome.value.id] = model
        return outcome

    def remote_records(self, handle: Handle) -> list:
        model = self.remote.get(handle.id) if handle.generation == self.generation else None
        return list(model.records) if model is not None else []

    def remote_state(self, handle: Handle) -> tuple[dict, dict]:
        model = self.remote[handle.id].model
        return model.state_dict(), {name: p.grad for name, p in model.named_parameters()}

    # ------------------------------------------------------------ a new process, as a resumed job's

    def scratch_folder(self) -> str:
        """The worker's private scratch folder as it sees it, with a trailing slash: where a file
        that `fresh_worker` carries over is written."""
        return (self.process.scratch_folder() if self.process is not None else "/scratch") + "/"

    def fresh_worker(self, names: tuple[str, ...], limit: int = CARRIED_FILE_BYTES) -> dict[str, str]:
        """Go on in a fresh worker that has run the submission's cells again, as a job resumed
        after a restart would, holding the files `names` of this worker's scratch folder and
        nothing else of this worker: each is read here, from outside the worker (a plain file of at
        most `limit` bytes: never unpickled, nor run), and written into the new worker's scratch
        folder once its cells have run. The new worker has its own /tmp, /scratch and /dev/shm,
        network and IPC; its environment is the grader's; the old one is killed first, and the
        handles it held are void (`generation`). It is not a restart: it counts as none.

        Returns {name: why that file stayed behind} for each that did not cross."""
        left: dict[str, str] = {}
        carried: dict[str, bytes] = {}
        for name in names:
            if self.process is None or not self.process.alive():
                left[name] = "the process that was to write it had stopped"
                continue
            data, why = self.process.read_scratch(name, limit)
            if data is None:
                left[name] = why or "it could not be read"
            else:
                carried[name] = data
        if self.process is None and self.restarts > MAX_RESTARTS:
            return {name: "your code's process stays down (see the notes)" for name in names}
        self.start()
        for name, data in carried.items():
            why = self.process.write_scratch(name, data) if self.process is not None else "no process took it"
            if why is not None:
                left[name] = why
        return left


class RemoteModel:
    """The grader's half of a remote model: the real weights, and the record of the calls."""

    def __init__(self, model, spec: dict, key: int):
        self.model, self.spec, self.key = model, spec, key
        self.records: list = []
        self.layers = {name for name, module in model.named_modules() if not list(module.children())}

    def layer(self, name, x, training=False):
        """One layer of the model, run here on the student's input."""
        import torch

        from .watch import MAX_WATCH_RECORDS, call_record

        if name not in self.layers:
            raise AttributeError(f"the model has no layer {name!r}")
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"model.{name} takes a tensor, not {type(x).__name__}")
        module = self.model.get_submodule(name)
        module.train(bool(training))
        with torch.no_grad():
            output = module(x)
        if name in self.spec and len(self.records) < MAX_WATCH_RECORDS:
            self.records.append(call_record(name, self.spec[name], x, output))
        return output


# ---------------------------------------------------------------- trusted code, for the course's own tests


class InProcessStudent:
    """The `Student` interface over trusted functions in this process.

    Only for the course's own tests of the graders, where the "submission" is a catalogued
    wrong variant or the reference itself: code the course wrote. Values still go through
    the wire format both ways, so a check sees exactly what it would see from a worker.
    Never give it a student's code.
    """

    def __init__(self, namespace: dict):
        self.namespace = namespace
        self.notes: list[str] = []

    def kind(self, name: str) -> str:
        value = self.namespace.get(name, _MISSING)
        if value is _MISSING:
            return "missing"
        if isinstance(value, type):
            return "class"
        return "function" if callable(value) else type(value).__name__


    def call(self, name: str, *args, seconds: float | None = None, stubs: dict | None = None,
             forbid: tuple = (), return_args: bool = False, keep: bool = False, backward=None,
             measure_memory: bool = False, **kwargs) -> Outcome:
        return self._run(self.namespace[name], args, kwargs, seconds=seconds, stubs=stubs, forbid=forbid,
                         return_args=return_args, keep=keep, backward=backward, census=measure_memory)

    def call_on_virtual_clock(self, name: str, *args, seconds: float | None = None, stubs: dict | None = None,
                              forbid: tuple = (), **kwargs) -> Outcome:
        """`call` on a virtual clock of this process, the same clock the worker's is (see Student's)."""
        return self._run(self.namespace[name], args, kwargs, seconds=seconds, stubs=stubs, forbid=forbid,
                         clock=VirtualClock())

    def new(self, class_name: str, *args, seconds: float | None = None, stubs: dict | None = None,
            forbid: tuple = (), **kwargs) -> Outcome:
        return self._run(self.namespace[class_name], args, kwargs, seconds=seconds, stubs=stubs, forbid=forbid,
                         keep=True)

    def record(self, **fields) -> Outcome:
        import types

        return Outcome(value=LocalHandle(self, types.SimpleNamespace(**fields)))

    def make(self, dotted: str, *args, seconds: float | None = None, **kwargs) -> Outcome:
        from .worker.main import trusted_factory

        return self._run(trusted_factory(dotted), args, kwargs, seconds=seconds, keep=True)

    def remote_model(self, fields: dict, state: dict, spec: dict, autograd: bool = False) -> Outcome:
        """Trusted code here: the real model (autograd-linked as it is), watched by hooks
        (watch.install_watch)."""
        from .watch import install_watch, trusted_gpt

        handle = LocalHandle(self, trusted_gpt(fields, state))
        handle.records = []
        handle.hooks = install_watch(handle.obj, spec, handle.records)
        return Outcome(value=handle)

    def remote_records(self, handle: LocalHandle) -> list:
        return list(round_trip(list(getattr(handle, "records", []))))

    def remote_state(self, handle: LocalHandle) -> tuple[dict, dict]:
        return handle.obj.state_dict(), {name: p.grad for name, p in handle.obj.named_parameters()}

    def fresh_worker(self, names: tuple[str, ...], limit: int = CARRIED_FILE_BYTES) -> dict[str, str]:
        """Nothing: the course's own code keeps nothing between its calls that a new process would
        lose, and it writes its files to a real folder of this process's (see Student.fresh_worker)."""
        return {}

    def _run(self, fn, args, kwargs, *, seconds=None, stubs=None, forbid=(), return_args=False, keep=False,
             backward=None, census=False, clock: VirtualClock | None = None) -> Outcome:
        import contextlib

        from .watch import TensorCensus
        from .worker.main import error_text, library_function, unforbid
        from .worker.main import forbid as forbid_shortcuts

        stubs = {name: library_function(v) if isinstance(v, str) else v for name, v in (stubs or {}).items()}
        args, kwargs = round_trip((tuple(args), dict(kwargs)))
        swapped = _swap_globals(fn, stubs or {})
        forbidden = forbid_shortcuts(forbid)
        counter = TensorCensus() if census else None
        try:
            # Trusted code: the limit only stops a variant that never ends. It counts this
            # process's CPU time, every thread of it (PyTorch's own among them): generous.
            with quiet(), time_limit(max(seconds or 0.0, 60.0)):
                with counter.mode() if counter is not None else contextlib.nullcontext():
                    if clock is not None:
                        value = clock.run(fn, args, kwargs, namespaces=(self.namespace,))
                    else:
                        value = fn(*args, **kwargs)
                if backward is not None:
                    value.backward(round_trip(backward))
        except TimeLimitExceeded:
            return Outcome(error="did not finish in time", timed_out=True)
        except BaseException as err:  # noqa: BLE001 - a variant may raise on purpose
            after = ((), {})
            if return_args:
                try:
                    after = round_trip((args, kwargs))
                except channel.ChannelError:
                    pass
            return Outcome(error=error_text(err), error_type=type(err).__name__, args_after=after[0],
                           kwargs_after=after[1])
        finally:
            unforbid(forbidden)
            _restore_globals(fn, swapped)
        if keep:
            return Outcome(value=LocalHandle(self, value))
        try:
            grads = round_trip([getattr(a, "grad", None) for a in args]) if backward is not None else []
            value = round_trip(value)
            after = round_trip((args, kwargs)) if return_args else ((), {})
        except channel.ChannelError as err:
            return Outcome(value=Unsendable(f"a value the grader cannot read ({err})"))
        return Outcome(value=value, args_after=after[0], kwargs_after=after[1], arg_grads=grads,
                       footprint={"census": counter.largest()} if counter is not None else {})

    def close(self) -> None:
        pass


class LocalHandle:
    """A `Handle` over an object of trusted code in this process (see InProcessStudent)."""

    def __init__(self, student: InProcessStudent, obj):
        self.student, self.obj = student, obj
        self.type_name = f"{type(obj).__module__}.{type(obj).__qualname__}"

    def call(self, *args, keep=False, **kwargs) -> Outcome:
        return self.student._run(self.obj, args, kwargs, keep=keep, **_options(kwargs))


    def method(self, name, *args, keep=False, **kwargs) -> Outcome:
        try:
            bound = getattr(self.obj, name)
        except AttributeError as err:
            return Outcome(error=f"AttributeError: {err}", error_type="AttributeError")
        return self.student._run(bound, args, kwargs, keep=keep, **_options(kwargs))

    def attr(self, name) -> Outcome:
        try:
            value = self.obj
            for part in name.split("."):
                value = getattr(value, part)
        except AttributeError as err:
            return Outcome(error=f"AttributeError: {err}", error_type="AttributeError")
        try:
            return Outcome(value=round_trip(value))
        except channel.ChannelError:
            return Outcome(value=LocalHandle(self.student, value))

    def grads(self) -> Outcome:
        return Outcome(value=round_trip({n: p.grad for n, p in self.obj.named_parameters()}))


def _options(kwargs: dict) -> dict:
    """The grader's own options among a handle call's keyword arguments."""
    return {key: kwargs.pop(key) for key in ("seconds", "stubs", "forbid", "backward") if key in kwargs}


_MISSING = object()


def _ground_generator(value, generators: list):
    """A worker's torch.Generator arrives as {"__generator_state__": state}: rebuild it here."""
    if type(value) is dict and set(value) == {"__generator_state__"}:
        import torch

        generator = torch.Generator()
        generator.set_state(value["__generator_state__"])
        generators.append(generator)
        return generator
    return value


def round_trip(value):
    """`value` encoded and decoded as the wire would, functions passed through as they are."""
    held: list = []

    def hold(obj):
        # Functions, objects held by handles, and generators pass through as themselves.
        if isinstance(obj, LocalHandle):
            obj = obj.obj
        elif not callable(obj) and type(obj).__name__ != "Generator":
            return None
        held.append(obj)
        return channel.Ref("fn", len(held) - 1)

    blobs: list[bytes] = []
    decoded = channel.decode(channel.encode(value, blobs, hold), blobs)

    def resolve(v):
        if isinstance(v, channel.Ref):
            return held[v.id]
        if type(v) in (tuple, list):
            return type(v)(resolve(x) for x in v)
        if type(v) is dict:
            return {k: resolve(x) for k, x in v.items()}
        return v

    return resolve(decoded)


def _namespace_of(fn) -> dict | None:
    """The globals `fn` reads contract names from: a function's own, a method's function's,
    or a class's module."""
    target = getattr(fn, "__func__", fn)
    if hasattr(target, "__globals__"):
        return target.__globals__
    module = sys.modules.get(getattr(target, "__module__", None) or "")
    return vars(module) if module is not None else None


def _swap_globals(fn, stubs: dict) -> dict:
    namespace = _namespace_of(fn) if stubs else None
    if namespace is None:
        return {}
    saved = {}
    for name, value in stubs.items():
        saved[name] = namespace.get(name, _MISSING)
        namespace[name] = value
    saved["__namespace__"] = namespace
    return saved


def _restore_globals(fn, saved: dict) -> None:
    if not saved:
        return
    namespace = saved.pop("__namespace__", None)
    for name, value in saved.items():
        if value is _MISSING:
            namespace.pop(name, None)
        else:
            namespace[name] = value
