"""The feedback service for a class: `python3 course.py feedback-server [UNIT...]`, and the
instructor's table of it, `python3 course.py feedback-report UNIT`.

    python3 course.py feedback-server --add-students ada,ben [--csv tokens.csv]   # hand these out
    python3 course.py feedback-server 01_attention 02_masking --host 0.0.0.0 --port 8765
    python3 course.py feedback-report 01_attention

A student's check line (`coursekit.feedback`) sends the saved notebook with the student's
token and gets back what the grade cells would show after `nbgrader autograde`: each part's
points, messages and the catalogued mistakes named, never test code or reference values.

    POST /api/check?unit=01_attention&part=softmax      (part: a graded part, or "all"; none: "all")
         Authorization: Bearer <token>    Content-Length: <bytes>    body: the .ipynb file itself
        200 the report of `feedback.feedback_for`
        400 not a notebook / another unit's notebook / no such part / no unit named / an empty body
        401 no token, or not one of this class's      404 a unit this service does not grade
        411 no Content-Length (a chunked body)        413 over 4 MB
        429 over the limit ("retry_after": seconds), 4 checks of this student already in line, or
            32 requests of this token open at once (none of these counted)
        503 busy, too many connections, or the grader itself failed (not counted against the student)
        every error is {"error": "<one sentence>"}
    GET /api/health   {"ok": true, "units": [...]}

Built on tornado: Jupyter Server is built on it, so it is in every course environment
already, and it is asynchronous, so a check waiting for its grading holds no thread; a
thousand students waiting cost the service nothing but their sockets.

What one student sends costs that student, never a classmate:

- Nothing is paid before it is known that the request will be served. The token, the unit
  and part (in the address), the size (`Content-Length`) and the limit are checked from the
  request line and headers, before any of the body is read or kept. A refusal is answered at
  once when the client waits before sending its body (`Expect: 100-continue`); otherwise its
  body is read and dropped a chunk at a time, never kept, and then answered, because a
  client that sends its whole body before it reads (urllib: the check line) would get a reset
  connection, not the sentence, if the service closed it with the body unread. That reading is
  the student's own budget, `DRAIN_PER_MINUTE` (16 MiB a minute); past it, and for every
  "too many" refusal (which only a flood gets), the answer comes after `TARPIT_SECONDS` (1 s)
  with the body unread, and the connection is closed.
- The body is counted as it arrives: past `feedback.MAX_NOTEBOOK_VALUES` (50,000) JSON
  values, an upper bound read off the raw bytes, it is refused before it is parsed (an
  exercise notebook has about 3,000; a 4 MB body of a million empty cells would hold the event
  loop for 0.2-1 s). The rest is joined, hashed and checked in a thread of its own, one at a
  time (json.loads holds the GIL, so the bound is what keeps the event loop's stall to tens
  of milliseconds), and the bytes go to the grading pool as received.
- One check per student at a time. A student's later checks wait behind their own, in the
  order sent, up to `PER_STUDENT` (4) in line; past that one is refused, not counted. Free
  grading workers go to the students with a check ready in turn (round robin), so one
  student's pile never delays another's first check. `--queue` (default 200) caps the checks
  in line in all, but refuses only a student who already has one in line: a student with
  nothing pending is always taken. A waiting check's body is not read until its turn. A token
  may have `OPEN_PER_TOKEN` (32) requests open at once (from its headers received to its
  answer sent: its checks in line and its refusals being read).
- Memory. The bodies held at once (being read, checked or graded) are at most `BODY_MEMORY`
  (64 MiB) in all, and one per student; a check waits for room rather than being refused.
  At most `MAX_CONNECTIONS` (1000) connections are open; past that a new one is answered 503
  and closed unread. A connection holds at most its headers (64 KB) and one 64 KB chunk of
  body, and waits 60 s at most for its headers, or for its body once its turn has come. So the
  service's resident memory stays under its start (about 65 MB) plus `BODY_MEMORY` plus
  `CONNECTION_MEMORY` (100 KB) a connection: at most about 230 MB. Measured on two cores: 200
  connections of one token, each announcing a 4 MB notebook and never finishing it, add
  15-17 MB (`tests/test_feedback_server.py`; the code before this design added 852 MB); 990
  connections of 33 tokens doing the same add 139 MB (64 MiB of it bodies).
- SQLite runs in write-ahead mode without an fsync per commit (`db`): the records
  are written on the event loop, and a commit there took 8-25 ms on a disk.

- The token decides who the student is; nothing in a request can name a student. Tokens are
  made by `--add-students`; the database keeps only their hashes. (Where the course runs on
  JupyterHub, the hub's own authentication would do the same; it is not built here.)
- Each student may check each part of each unit `--limit` times per `--window` seconds
  (default 10 an hour; "all" counts against every part of its unit and needs room in each),
  counted from the database, so a restart resets nothing. The count and the record that takes
  the slot are written in one synchronous step on the event loop, as soon as the headers are
  in: two requests at once cannot both take the last slot. Checks the grader failed on, and
  refused ones, do not count.
- Every admitted check is recorded (`db`): who, when, which unit and part, what
  became of it, the score and the mistakes named per part, the notebook's sha256. Refusals
  are counted, one row per student, minute and outcome.
- Grading runs on the class-grading pool (`pool.LocalEngine`, or `DaskEngine` with
  `--scheduler`), with `feedback.check_task`: the same trusted run, and the same sandboxed
  worker for the student's code, as `nbgrader autograde`.

The load test (`tools/load_test.py`, `course.py bench feedback`) measures it with a class and an
attacker beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import signal
import sys
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import tornado.httpserver
import tornado.iostream
import tornado.netutil
import tornado.web

from ..engine.report import plural
from . import db as records
from . import reports
from .db import DEFAULT_DB, Database, write_tokens_csv

DEFAULT_PORT = 8765
DEFAULT_LIMIT = 10
DEFAULT_WINDOW = 3600.0
DEFAULT_QUEUE = 200
# The body is the notebook itself.
MAX_BODY_BYTES = reports.MAX_NOTEBOOK_BYTES
# Bodies up to this are read (and dropped, a chunk at a time) after a refusal; tornado itself
# refuses anything larger (its max_body_size), unread.
DRAIN_BYTES = 8 * MAX_BODY_BYTES
PER_STUDENT = 4  # a student's checks in line: one being graded, the rest waiting behind it
OPEN_PER_TOKEN = 32  # a token's requests open at once (its checks in line, its refusals being read)
TARPIT_SECONDS = 1.0  # how long a flood's refusal (too many, or past DRAIN_PER_MINUTE) waits, its body unread
DRAIN_PER_MINUTE = 16 * 1024 * 1024  # a student's refused bodies read (and dropped) a minute, so they get the sentence
ANONYMOUS_DRAINS = 16  # bodies without a valid token read (and dropped) at once, so that they get the sentence
BODY_MEMORY = 64 * 1024 * 1024  # the bodies held at once, in all
MAX_CONNECTIONS = 1000
CONNECTION_MEMORY = 100 * 1024  # what one open connection may cost the service at most (measured: see above)
REQUEST_SECONDS = 60  # the wait for a request's headers, and for its body once its turn has come
TOKEN_SECONDS = 10.0  # how long a token's student (or its absence) is remembered
WATCH_SECONDS = 0.05  # how often the event loop's own lateness is measured (Service.stall)
TOO_MANY_CONNECTIONS = json.dumps({"error": "the feedback service has too many connections open right now: "
                                            "try again in a minute (this check did not count)"}).encode()


def shown(text: str) -> str:
    """A field a student sent, as it may appear in the instructor's log: escaped, short."""
    return ascii(text)[1:-1][:60] or "-"


def in_words(seconds: float) -> str:
    minutes = int((seconds + 59) // 60)
    return f"{minutes} minute{'s' if minutes != 1 else ''}"


class Refused(Exception):
    """A request answered with an error: its status, its sentence, and what to record."""

    def __init__(self, status: int, message: str, outcome: str = records.BAD_INPUT, **extra):
        super().__init__(message)
        self.status, self.message, self.outcome, self.extra = status, message, outcome, extra


class Grading:
    """The pool the checks run on, with `feedback.check_task`: a LocalEngine that is made anew
    if a worker dies (so one lost worker cannot take the service down), or a DaskEngine."""

    def __init__(self, workers: int | None = None, scheduler: str | None = None, engine=None):
        self.scheduler = scheduler
        self.engine = engine or self._make(workers or os.cpu_count() or 1)
        # What the service hands out at once: the pool's own size (a Dask cluster's threads),
        # else the number asked for (a stand-in pool in the tests).
        self.workers = getattr(self.engine, "workers", None) or workers or os.cpu_count() or 1
        self.lock = threading.Lock()

    def _make(self, workers: int | None = None):
        from ..grading.pool import DaskEngine, LocalEngine

        return DaskEngine(self.scheduler) if self.scheduler else LocalEngine(workers or self.workers)

    def warm_up(self, units: list[str]) -> None:
        """Start every local worker and import each unit's graders there, before the first
        student (workers = tasks submitted at once, so the pool starts all of them)."""
        from ..grading.pool import LocalEngine

        if isinstance(self.engine, LocalEngine):
            futures = [self.engine.submit({"units": units}, warm_up_worker) for _ in range(self.workers)]
            for future in futures:
                future.result()

    def submit(self, task: dict):
        """The future of `task` (a DaskEngine passes it `fork: False`)."""
        try:
            return self.engine.submit(task, reports.check_task)
        except BrokenProcessPool:  # a local worker died: the checks in flight were answered 503
            with self.lock:
                self.engine.close(cancel=True)
                self.engine = self._make()
            return self.engine.submit(task, reports.check_task)

    def close(self) -> None:
        from ..grading.pool import LocalEngine

        processes = []
        if isinstance(self.engine, LocalEngine):
            processes = [p.pid for p in (getattr(self.engine.pool, "_processes", None) or {}).values()]
        self.engine.close(cancel=True)
        # A shutdown without waiting leaves a check being graded running (a notebook that waits
        # holds its worker up to the run's 30 minutes), and this interpreter's exit would wait
        # for it: end those workers, and the runs they started, now.
        kill_trees(processes)


def kill_trees(pids: list[int]) -> None:
    """SIGKILL each of `pids` and every process descended from it (read from /proc)."""
    if not pids:
        return
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                # The field after the name, which is in parentheses and may hold spaces.
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    doomed, frontier = set(), set(pids)
    while frontier:
        doomed |= frontier
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - doomed
    for pid in doomed:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def warm_up_worker(task: dict) -> None:
    from ..grading.pool import warm_up_checks

    time.sleep(0.2)  # so each of the tasks submitted together lands on a worker of its own
    for unit in task["units"]:
        warm_up_checks(unit)


# ---------------------------------------------------------------- whose turn it is


class Ticket:
    """One admitted check, from its headers to its answer: what it waits for and what it holds."""

    def __init__(self, student: int, size: int):
        self.student, self.size = student, size
        self.turn = self.memory = self.worker = None  # the futures it waits on, while it waits
        self.holds_memory = self.holds_worker = self.left = False


class Turns:
    """Who goes next. Each student's checks wait in a line of their own and go one at a time;
    the check at the head of a line reads its body once there is room for it in `memory` bytes
    (first come, first served), then waits for a grading worker; free workers are handed to the
    students with a check ready in turn, so each student gets one worker at most and one
    student's pile never delays another's first check. Everything here runs on the event loop."""

    def __init__(self, workers: int, queue: int, per_student: int = PER_STUDENT, memory: int = BODY_MEMORY):
        self.workers, self.queue, self.per_student, self.memory = workers, queue, per_student, memory
        self.lines: dict[int, deque[Ticket]] = {}
        # Students whose last check used up its grading's budget (a notebook that waits or computes
        # for the whole budget): their next check gets a worker only when no classmate's is ready,
        # so a run of slow checks costs their sender's time, not the class's.
        self.over_budget: set[int] = set()
        self.waiting = 0  # tickets in all the lines
        self.wanting: deque[Ticket] = deque()  # heads of lines waiting for memory
        self.ready: deque[Ticket] = deque()  # heads whose notebook is in and checked, waiting for a worker
        self.buffered = self.grading = 0

    def pending(self, student: int) -> int:
        return len(self.lines.get(student, ()))

    def refusal(self, student: int) -> Refused | None:
        """Why this student's next check cannot wait in line (None: it can)."""
        mine = self.pending(student)
        if mine >= self.per_student:
            return Refused(429, f"you already have {mine} checks waiting for the graders, each behind the one "
                                "before it: wait for their answers before you send another (this one did not count)",
                           records.TOO_MANY)
        if mine and self.waiting >= self.queue:
            # Only a student who already has a check waiting: a classmate's first is always taken.
            return Refused(503, "the feedback service is busy with the whole class's checks: try again in a minute "
                                "(this one did not count)", records.BUSY)
        return None

    def join(self, student: int, size: int) -> Ticket:
        ticket = Ticket(student, size)
        self.lines.setdefault(student, deque()).append(ticket)
        self.waiting += 1
        return ticket

    async def my_turn(self, ticket: Ticket) -> bool:
        """Wait until the student's checks before this one are answered and there is room for
        its body; False if it left meanwhile."""
        if self.lines[ticket.student][0] is not ticket:
            ticket.turn = asyncio.get_running_loop().create_future()
            await ticket.turn
            if ticket.left:
                return False
        if self.wanting or self.buffered + ticket.size > self.memory:
            ticket.memory = asyncio.get_running_loop().create_future()
            self.wanting.append(ticket)
            await ticket.memory
            return not ticket.left
        self.buffered += ticket.size
        ticket.holds_memory = True
        return True

    def graded(self, student: int, over_budget: bool) -> None:
        """What the student's last check came to: over its budget, or not (see `over_budget`)."""
        if over_budget:
            self.over_budget.add(student)
        else:
            self.over_budget.discard(student)

    def _next_ready(self) -> Ticket:
        """The ticket that gets the next free worker: the first in turn, unless its student's last
        check used up its budget and a classmate's is ready too."""
        for ticket in self.ready:
            if ticket.student not in self.over_budget:
                self.ready.remove(ticket)
                return ticket
        return self.ready.popleft()

    async def a_worker(self, ticket: Ticket) -> bool:
        """Wait for a grading worker, in turn with the other students; False if it left meanwhile."""
        if not self.ready and self.grading < self.workers:
            self.grading += 1
            ticket.holds_worker = True
            return True
        ticket.worker = asyncio.get_running_loop().create_future()
        self.ready.append(ticket)
        await ticket.worker
        return not ticket.left

    def leave(self, ticket: Ticket) -> None:
        """The check is answered (or gone): free what it holds, and let the next one go."""
        if ticket.left:
            return
        ticket.left = True
        for future in (ticket.turn, ticket.memory, ticket.worker):
            if future is not None and not future.done():
                future.set_result(None)  # its waiter sees `left` and returns
        if ticket in self.wanting:
            self.wanting.remove(ticket)
        if ticket in self.ready:
            self.ready.remove(ticket)
        if ticket.holds_memory:
            self.buffered -= ticket.size
        if ticket.holds_worker:
            self.grading -= 1
        line = self.lines[ticket.student]
        head = line[0] is ticket
        line.remove(ticket)
        self.waiting -= 1
        if not line:
            del self.lines[ticket.student]
        elif head and line[0].turn is not None and not line[0].turn.done():
            line[0].turn.set_result(None)
        self._hand_out()

    def _hand_out(self) -> None:
        while self.wanting and self.buffered + self.wanting[0].size <= self.memory:
            ticket = self.wanting.popleft()
            self.buffered += ticket.size
            ticket.holds_memory = True
            ticket.memory.set_result(None)
        while self.ready and self.grading < self.workers:
            ticket = self._next_ready()
            self.grading += 1
            ticket.holds_worker = True
            ticket.worker.set_result(None)


# ---------------------------------------------------------------- the service


class CappedHTTPServer(tornado.httpserver.HTTPServer):
    """tornado's HTTPServer with at most `max_connections` open: past that, a new connection
    is answered 503 with its sentence and closed, before anything of it is read."""

    max_connections = MAX_CONNECTIONS

    def handle_stream(self, stream: tornado.iostream.IOStream, address: tuple) -> None:
        if len(self._connections) < self.max_connections:
            return super().handle_stream(stream, address)
        head = (f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nCache-Control: no-store\r\n"
                f"Retry-After: 60\r\nConnection: close\r\nContent-Length: {len(TOO_MANY_CONNECTIONS)}\r\n\r\n")
        try:
            written = stream.write(head.encode() + TOO_MANY_CONNECTIONS)
        except tornado.iostream.StreamClosedError:
            return
        written.add_done_callback(lambda future: (future.exception(), stream.close()))


class Service:
    """The application: its units, database, pool and limits. `start()` serves it from a thread
    of its own (the tests, the benchmark); `main` serves it from the main thread."""

    def __init__(self, units: list[str], db: Database, grading: Grading, limit: int = DEFAULT_LIMIT,
                 window: float = DEFAULT_WINDOW, queue: int = DEFAULT_QUEUE, log=print,
                 per_student: int = PER_STUDENT, memory: int = BODY_MEMORY, max_connections: int = MAX_CONNECTIONS,
                 open_per_token: int = OPEN_PER_TOKEN):
        self.units, self.db, self.grading = list(units), db, grading
        self.limit, self.window, self.queue, self.log = limit, window, queue, log
        self.turns = Turns(grading.workers, queue, per_student, memory)
        self.max_connections, self.open_per_token = max_connections, open_per_token
        self.open_requests: dict[int, int] = {}  # student id -> requests from headers received to answer sent
        self.anonymous_drains = 0
        self.drained: dict[int, tuple[float, float]] = {}  # student id -> (bytes they may still drain, when)
        self.tokens: dict[str, tuple[float, tuple[int, str] | None]] = {}  # token -> (when looked up, student)
        # Joining, hashing and checking a body: one at a time, off the event loop.
        self.reader = ThreadPoolExecutor(1, thread_name_prefix="feedback-read")
        self.stall = 0.0  # the event loop's longest lateness, in seconds (see watch)
        # Every watch tick's lateness, the last few minutes of them: one long stall can be a busy
        # machine holding the whole process; work done on the loop shows as stalls again and again.
        self.lateness: deque[float] = deque(maxlen=4096)
        self.app = tornado.web.Application([(r"/api/check", CheckHandler, {"service": self}),
                                            (r"/api/health", HealthHandler, {"service": self})],
                                           default_handler_class=NotFoundHandler,
                                           log_function=lambda handler: None)  # one line per check: Service.log
        self.loop: asyncio.AbstractEventLoop | None = None
        self.server: CappedHTTPServer | None = None
        self.thread: threading.Thread | None = None
        self.watcher: asyncio.Task | None = None

    def listen(self, host: str, port: int) -> int:
        """Bind (in the running event loop); the port bound (`port` 0: a free one)."""
        self.loop = asyncio.get_running_loop()
        # max_buffer_size: what a connection may hold unread (headers, one 64 KB chunk of body).
        self.server = CappedHTTPServer(self.app, max_body_size=DRAIN_BYTES, idle_connection_timeout=REQUEST_SECONDS,
                                       body_timeout=REQUEST_SECONDS, max_buffer_size=1024 * 1024)
        self.server.max_connections = self.max_connections
        sockets = tornado.netutil.bind_sockets(port, host)
        self.server.add_sockets(sockets)
        self.watcher = self.loop.create_task(self.watch())
        return sockets[0].getsockname()[1]

    async def watch(self) -> None:
        """Measure the event loop's own lateness (what any request waits beside the others'
        work), and write the refusals counted, every few seconds."""
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            await asyncio.sleep(WATCH_SECONDS)
            late = loop.time() - started - WATCH_SECONDS
            self.stall = max(self.stall, late)
            self.lateness.append(late)
            if time.monotonic() - self.db.flushed >= records.REFUSAL_FLUSH_SECONDS:
                try:
                    self.db.flush()
                except Exception as err:  # noqa: BLE001 - a database busy a moment: the counts wait for the next
                    self.log(f"{time.strftime('%H:%M:%S')} could not write the refusals yet: {type(err).__name__}")

    def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Serve from a thread with an event loop of its own; the port bound."""
        bound, ready = [], threading.Event()
        self.stopped = None

        async def serve():
            self.stopped = asyncio.Event()
            bound.append(self.listen(host, port))
            ready.set()
            await self.stopped.wait()
            self.watcher.cancel()
            self.server.stop()
            await self.server.close_all_connections()

        self.thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True, name="feedback-service")
        self.thread.start()
        ready.wait(30)
        return bound[0]

    def stop(self) -> None:
        """Stop serving, and shut the pool and the database down."""
        try:
            if self.thread is not None and self.loop is not None:
                self.loop.call_soon_threadsafe(self.stopped.set)
                self.thread.join(30)
        finally:
            self.reader.shutdown(wait=False, cancel_futures=True)
            self.grading.close()
            self.db.close()

    # ------------------------------------------------------------ one check

    def may_drain(self, student_id: int, size: int) -> bool:
        """Whether the student's budget for bodies read only to be dropped (refused ones) has
        room for `size` bytes more: DRAIN_PER_MINUTE, refilled as time passes. A student whose
        check is refused gets the sentence; a flood of refused bodies is not read."""
        now = time.monotonic()
        level, then = self.drained.get(student_id, (DRAIN_PER_MINUTE, now))
        level = min(DRAIN_PER_MINUTE, level + (now - then) * DRAIN_PER_MINUTE / 60)
        allowed = level >= size
        self.drained[student_id] = (level - size if allowed else level, now)
        return allowed

    def student_for(self, token: str) -> tuple[int, str] | None:
        """The student whose token this is, looked up in the database at most every
        TOKEN_SECONDS per token (a flood of requests costs a dictionary look-up each, and a
        token made or voided by `--add-students` works, or stops, within that)."""
        now = time.monotonic()
        known = self.tokens.get(token)
        if known is None or now - known[0] > TOKEN_SECONDS:
            if len(self.tokens) >= 10_000:  # random tokens: forget them all rather than grow
                self.tokens.clear()
            known = self.tokens[token] = (now, self.db.student_for(token))
        return known[1]

    def admit(self, student_id: int, unit: str, part: str, size: int) -> tuple[Ticket, int]:
        """Take a place in the student's line and a slot of the limit for this check (or refuse
        it), and record it: one synchronous step, from the headers alone."""
        refused = self.turns.refusal(student_id)
        if refused:
            raise refused
        parts = reports.parts_asked(unit, part)
        wait = self.db.room(student_id, unit, parts, self.limit, self.window)
        if wait:
            asked = "every part" if part == reports.ALL else f"`{part}`"
            message = (f"you have used your {self.limit} check{'s' if self.limit != 1 else ''} of {asked} "
                       f"per {'hour' if self.window == 3600 else in_words(self.window)}: "
                       f"you can check it again in {in_words(wait)}")
            raise Refused(429, message, records.OVER_LIMIT, retry_after=int(wait + 0.999))
        ticket = self.turns.join(student_id, size)
        return ticket, self.db.open_check(student_id, unit, part, records.IN_FLIGHT, counts=True)

    async def grade(self, task: dict) -> dict:
        """Run `task` on the pool without holding a thread: the pool's own thread hands the
        result back to this event loop."""
        loop = asyncio.get_running_loop()
        waiting = loop.create_future()

        def settle(future) -> None:  # on the pool's thread (concurrent.futures) or Dask's
            try:
                outcome = {"value": self.grading.engine.outcome(future)}
            except Exception as err:  # noqa: BLE001 - a worker lost, a Dask error: handed back as an answer
                outcome = {"error": err}
            except BaseException as err:  # noqa: BLE001 - cancelled at shutdown
                outcome = {"error": RuntimeError(f"cancelled ({type(err).__name__})")}
            loop.call_soon_threadsafe(_settle, waiting, outcome)

        try:
            self.grading.submit(task).add_done_callback(settle)
        except Exception as err:  # noqa: BLE001 - a pool that cannot take work
            return {"ok": False, "kind": "grader", "error": f"the grading pool failed: {type(err).__name__}"}
        try:
            return await waiting
        except Exception as err:  # noqa: BLE001
            return {"ok": False, "kind": "grader",
                    "error": f"the grading worker failed: {type(err).__name__}: {str(err)[:200]}"}


def _settle(waiting: asyncio.Future, outcome: dict) -> None:
    if waiting.done():
        return
    if "error" in outcome:
        waiting.set_exception(outcome["error"])
    else:
        waiting.set_result(outcome["value"])


def read_notebook(unit: str, chunks: list[bytes]) -> tuple[bytes, str, str | None]:
    """In the reader thread: the body's bytes, their sha256, and why they are not a notebook of
    `unit` (None when they are). json.loads holds the GIL while it runs: what keeps that short
    is the bound on JSON values, checked as the body arrived."""
    data = b"".join(chunks)
    chunks.clear()
    return data, hashlib.sha256(data).hexdigest(), reports.notebook_problem(unit, data)


class JSONHandler(tornado.web.RequestHandler):
    def initialize(self, service: Service):
        self.service = service

    def send(self, status: int, payload: dict) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(payload))

    def write_error(self, status_code: int, **kwargs) -> None:  # tornado's own errors, and anything unforeseen
        message = {405: "use POST /api/check", 404: "there is nothing here: the service answers POST /api/check"}
        self.send(status_code, {"error": message.get(status_code, "the service could not answer that request")})

    def log_exception(self, typ, value, tb) -> None:
        if isinstance(value, tornado.web.HTTPError | tornado.iostream.StreamClosedError):
            return
        super().log_exception(typ, value, tb)  # a bug of ours: logged with its traceback, never sent


class NotFoundHandler(JSONHandler):
    def initialize(self, service: Service | None = None):
        self.service = service

    def prepare(self):
        raise tornado.web.HTTPError(404)


class HealthHandler(JSONHandler):
    def get(self):
        self.send(200, {"ok": True, "units": self.service.units})


def query_value(request, name: str) -> tuple[str, int]:
    """The last value of `name` in the query string (decoded, cut to 100 characters) and how
    many were given."""
    values = request.query_arguments.get(name, [])
    return (values[-1].decode("utf-8", "replace")[:100] if values else ""), len(values)


@tornado.web.stream_request_body
class CheckHandler(JSONHandler):
    """POST /api/check?unit=U&part=P. Everything that can refuse a check without its body is
    decided in `prepare`, from the headers; an admitted check's body is then read only when its
    turn has come (its student's checks before it answered, room for it in memory), counted as
    it arrives, and checked off the event loop.

    A refusal is answered at once when the client waits for leave to send its body (`Expect:
    100-continue`), or when the body is too large to be worth reading; otherwise its body is
    read and dropped first, a chunk at a time, since a client that sends its whole body before
    it reads (urllib, the check line) would see a reset connection, not the sentence, if the
    service closed it with the body unread (tornado closes a connection answered early)."""

    def initialize(self, service: Service):
        self.service = service
        self.student: tuple[int, str] | None = None
        self.unit = self.part = ""
        self.ticket: Ticket | None = None
        self.check_id: int | None = None  # the record taking the slot, while it is in flight
        self.chunks: list[bytes] | None = None  # None: the body is not wanted (refused, or gone)
        self.refusal: Refused | None = None  # decided, to be answered once the body is read
        self.values = self.received = 0
        self.grading = self.opened = self.anonymous_drain = False
        self.started = time.perf_counter()

    async def prepare(self):
        if self.request.method != "POST":
            return
        try:
            self.admit()
        except Refused as refused:
            return await self.refuse_unread(refused)
        if await self.service.turns.my_turn(self.ticket):
            self.chunks = []  # and tornado reads the body now

    def admit(self) -> None:
        """Who is asking, for what, and whether it is served: from the request line and headers."""
        headers = self.request.headers
        header = headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        token = token.strip()
        self.student = self.service.student_for(token) if scheme.lower() == "bearer" and token else None
        if self.student is None:
            raise Refused(401, "this check needs your own feedback token (ask your instructor for it)" if not header
                          else "that feedback token is not one of this class's: check that you copied the whole "
                               "token your instructor gave you")
        student_id = self.student[0]
        self.opened = True
        self.service.open_requests[student_id] = opened = self.service.open_requests.get(student_id, 0) + 1
        (unit, units), (part, parts) = query_value(self.request, "unit"), query_value(self.request, "part")
        self.unit, self.part = unit, part or reports.ALL
        if opened > self.service.open_per_token:
            raise Refused(429, f"your token has over {self.service.open_per_token} requests open at once: wait for "
                               "their answers before you send more (this one did not count)", records.TOO_MANY)
        served = ", ".join(self.service.units)
        if not units:
            raise Refused(400, f"name the unit in the address, as /api/check?unit=UNIT&part=PART with the notebook "
                               f"as the body (this service grades {served})")
        # The unit is only ever compared with the names served, never used to find a file.
        if units > 1 or unit not in self.service.units:
            raise Refused(404, f"this feedback service does not grade that unit; it grades {served}")
        if parts > 1:
            raise Refused(400, "the part must be the name of a graded part, or \"all\"")
        length = self.length()
        if length is None:
            raise Refused(411, "send the notebook with its Content-Length, as the check line does, not in chunks")
        if length > MAX_BODY_BYTES:
            raise Refused(413, reports.too_large_message(length))
        if length == 0:
            raise Refused(400, "there is no notebook in the request: send the saved .ipynb file as its body")
        try:
            self.ticket, self.check_id = self.service.admit(student_id, self.unit, self.part, length)
        except reports.NotGradable as err:  # an unknown part
            raise Refused(400, str(err)) from None

    def length(self) -> int | None:
        length = self.request.headers.get("Content-Length", "").strip()
        return int(length) if length.isdigit() else None

    async def refuse_unread(self, refused: Refused) -> None:
        """A refusal decided from the headers: count it, then answer it now (the body unread,
        the connection closed after the answer) or once the body has been read and dropped."""
        self.count(refused)
        length = self.length()
        chunked = "chunked" in self.request.headers.get("Transfer-Encoding", "").lower()
        if self.request.headers.get("Expect", "").lower() == "100-continue" or not length and not chunked:
            return self.answer(refused)  # no body is on its way
        if self.student is None:  # a drain for a student with a mistyped token, a few at a time
            drain = length is not None and length <= MAX_BODY_BYTES and \
                self.service.anonymous_drains < ANONYMOUS_DRAINS
            self.anonymous_drain = drain
            self.service.anonymous_drains += drain
            if not drain:
                return self.answer(refused)
        # "Too many" is what only a flood gets: never read, and answered late. Otherwise a body is
        # read and dropped within the student's budget for that, DRAIN_PER_MINUTE.
        elif refused.outcome == records.TOO_MANY or not (chunked or length <= DRAIN_BYTES) or \
                not self.service.may_drain(self.student[0], MAX_BODY_BYTES if chunked else length):
            return await self.answer_late(refused)
        self.refusal = refused  # answered by post(), once tornado has read (and data_received dropped) the body

    async def answer_late(self, refused: Refused) -> None:
        """Answer a flood's refusal after TARPIT_SECONDS, its body unread: each connection of a
        flood then costs the service one request a second, and only its own student's."""
        await asyncio.sleep(TARPIT_SECONDS)
        if not self._finished and not self.request.connection.stream.closed():
            self.answer(refused)

    def data_received(self, chunk: bytes):
        if self.chunks is None:
            return None  # refused, or gone: dropped
        self.received += len(chunk)
        # An upper bound on the values the parser would make, counted before it is asked to.
        self.values += chunk.count(b"{") + chunk.count(b"[") + chunk.count(b",")
        if self.values > reports.MAX_NOTEBOOK_VALUES:
            self.chunks = None
            refused = Refused(400, reports.too_complex_message())
            self.count(refused)
            self.leave_line()  # the student's next check need not wait for the rest of this body
            if self.service.may_drain(self.student[0], self.length() - self.received):
                self.refusal = refused
                return None
            return self.answer_late(refused)  # tornado reads no more of it meanwhile
        self.chunks.append(chunk)
        return None

    def count(self, refused: Refused) -> None:
        """Count a refusal for the student, when the student is known (a 401 has none); an
        admitted check gives up its record and its slot."""
        if self.student is None:
            return
        student_id, name = self.student
        if self.check_id is not None:
            self.service.db.drop_check(self.check_id, student_id, refused.outcome, refused.message)
            self.check_id = None
        else:
            self.service.db.refused(student_id, refused.outcome, refused.message)
        self.service.log(f"{time.strftime('%H:%M:%S')} {name} {shown(self.unit)} {shown(self.part)}: "
                         f"{refused.outcome} ({refused.status})")

    def answer(self, refused: Refused) -> None:
        if refused.status == 429 and "retry_after" in refused.extra:
            self.set_header("Retry-After", str(refused.extra["retry_after"]))
        self.send(refused.status, {"error": refused.message, **refused.extra})

    async def post(self):
        if self._finished:
            return
        if self.refusal is not None:
            return self.answer(self.refusal)
        if self.chunks is None:  # gone
            return
        chunks, self.chunks = self.chunks, None
        data, sha, problem = await asyncio.get_running_loop().run_in_executor(
            self.service.reader, read_notebook, self.unit, chunks)
        if self.ticket.left:  # the connection closed meanwhile
            return
        if problem:
            refused = Refused(413 if len(data) > MAX_BODY_BYTES else 400, problem)
            self.count(refused)
            return self.answer(refused)
        if not await self.service.turns.a_worker(self.ticket):
            return
        self.grading = True
        try:
            result = await self.service.grade({"unit": self.unit, "part": self.part, "notebook": data})
        finally:
            self.grading = False
        self.finish_check(result, sha, time.perf_counter() - self.started)

    def on_finish(self) -> None:
        self.release()

    def on_connection_close(self) -> None:
        super().on_connection_close()
        if self.grading or self._finished:
            return  # a check being graded finishes, and counts, all the same
        if self.check_id is not None:
            self.service.db.drop_check(self.check_id, self.student[0], records.GONE,
                                       "the connection closed before the check was graded")
            self.check_id = None
        self.chunks = None
        self.release()

    def leave_line(self) -> None:
        if self.ticket is not None:
            self.service.turns.leave(self.ticket)

    def release(self) -> None:
        """The request is answered, or gone: it holds nothing any more (called once or twice)."""
        self.leave_line()
        if self.opened:
            self.opened = False
            student_id = self.student[0]
            left = self.service.open_requests.get(student_id, 1) - 1
            if left:
                self.service.open_requests[student_id] = left
            else:
                self.service.open_requests.pop(student_id, None)
        if self.anonymous_drain:
            self.anonymous_drain = False
            self.service.anonymous_drains -= 1

    def finish_check(self, result: dict, sha: str, seconds: float) -> None:
        name, unit, part, check_id = self.student[1], self.unit, self.part, self.check_id
        self.check_id = None
        stamp = time.strftime("%H:%M:%S")
        if result.get("ok"):
            self.service.turns.graded(self.student[0], bool(result.get("over_budget")))
            report = result["report"]
            self.service.db.close_check(check_id, records.GRADED, True, report, sha256=sha,
                                        unexplained=result.get("unexplained"))
            named = sorted({m for p in report["parts"] for m in p["mistakes"]})
            self.service.log(f"{stamp} {name} {unit} {part}: graded {report['score']:g}/{report['max_score']:g}"
                             f"{' named ' + ','.join(named) if named else ''} in {seconds:.1f} s")
            return self.send(200, report)
        if result.get("kind") == "student":  # found while grading: it took the slot, like a graded check
            message = result["error"]
            self.service.db.close_check(check_id, records.BAD_INPUT, True, error=message, sha256=sha)
            self.service.log(f"{stamp} {name} {unit} {part}: bad input, found while grading ({ascii(message)[1:80]})")
            return self.send(400, {"error": message})
        message = ("the grader failed on this check; that is not your notebook's fault, and it did not count "
                   "against your checks: try again in a few minutes, and tell your instructor if it happens again")
        self.service.db.close_check(check_id, records.GRADER_FAILED, False, error=result.get("error"), sha256=sha)
        self.service.log(f"{stamp} {name} {unit} {part}: GRADER FAILED: {ascii(str(result.get('error')))[1:200]}")
        self.send(503, {"error": message})


# ---------------------------------------------------------------- command lines


def served_units(names: list[str]) -> list[str]:
    from ..units import UNITS

    unknown = [name for name in names if name not in UNITS]
    if unknown:
        raise SystemExit(f"no graded unit {', '.join(unknown)}; the units are {', '.join(UNITS)}")
    return list(names) or list(UNITS)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python3 course.py feedback-server",
                                     description="the feedback service for a class (see README.md)")
    parser.add_argument("units", nargs="*", help="the units it grades (default: every unit)")
    parser.add_argument("--host", default="127.0.0.1", help="0.0.0.0 to be reached from other machines")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--db", default=DEFAULT_DB, help=f"any SQLAlchemy URL (default {DEFAULT_DB})")
    parser.add_argument("--workers", type=int, default=None, help="local grading workers (default: the cores)")
    parser.add_argument("--scheduler", default=None, help="a Dask scheduler's address: grade on that cluster")
    parser.add_argument("--limit", type=int, default=DEFAULT_LIMIT, help="checks per student, per part, per window")
    parser.add_argument("--window", type=float, default=DEFAULT_WINDOW, help="the limit's window, in seconds")
    parser.add_argument("--queue", type=int, default=DEFAULT_QUEUE,
                        help="checks in line in all before a student who already has one in line is told busy")
    parser.add_argument("--add-students", default=None, metavar="A,B,...",
                        help="make a token for each student, print `student token` lines, and exit")
    parser.add_argument("--csv", default=None, help="with --add-students: also write the tokens to this CSV file")
    args = parser.parse_args(argv)
    db = Database(args.db)
    if args.add_students is not None:
        names = [name.strip() for name in args.add_students.split(",") if name.strip()]
        try:
            tokens = db.add_students(names)
        except ValueError as err:
            print(err, file=sys.stderr)
            return 2
        for name, token in tokens.items():
            print(name, token)
        if args.csv:
            write_tokens_csv(Path(args.csv), tokens)
            print(f"(also written to {args.csv}; it holds the tokens themselves: keep it private)", file=sys.stderr)
        return 0
    units = served_units(args.units)
    if args.limit < 1 or args.window <= 0 or args.queue < 1:
        print("--limit and --queue must be at least 1, and --window positive", file=sys.stderr)
        return 2
    left = db.abandon_in_flight()
    grading = Grading(args.workers, args.scheduler)
    service = Service(units, db, grading, args.limit, args.window, args.queue,
                      log=lambda line: print(line, flush=True))

    async def serve() -> None:
        port = service.listen(args.host, args.port)
        print(f"feedback service on http://{args.host}:{port}/api/check for {', '.join(units)}; "
              f"{args.limit} checks per part per {in_words(args.window)}; "
              f"grading on {'Dask at ' + args.scheduler if args.scheduler else plural(grading.workers, 'worker')}; "
              f"records in {args.db}" + (f" ({left} left in flight by the last run marked failed)" if left else ""),
              flush=True)
        await asyncio.Event().wait()

    def stop(signum, frame):  # `kill` (systemd's stop) shuts down as Ctrl-C does
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        if not args.scheduler:
            grading.warm_up(units)
        asyncio.run(serve())
    except KeyboardInterrupt:
        print("stopped", flush=True)
    except OSError as err:  # the port is taken, the host is not this machine's
        print(f"could not listen on {args.host}:{args.port}: {err.strerror or err}", file=sys.stderr)
        return 2
    finally:
        grading.close()
        db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


