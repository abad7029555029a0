"""The check line's warm grader: one long-lived process per user and course folder that grades
the check lines of a clone of the course, so that a check pays for its own checks and not for
starting Python, pytest and PyTorch (twice: here and in the sandbox) while the student waits.

    python -m autograder warm-grader SOCKET [--unit UNIT]

`coursekit.feedback` starts it (the first check line, or `course.py lab` as the lab opens)
and asks it over a Unix socket in the user's cache folder: one JSON line per connection,
{"unit", "part", "path"} (a saved notebook), answered with exactly what
`python -m autograder feedback UNIT PATH --part PART` prints. It answers its own user only.

What a check is does not change. Each is the same trusted pytest run as ever (`run.GradingRun`),
forked from this process, which has pytest, the graders and PyTorch imported
(`run.prepare_forked_runs`); the submission runs in a sandboxed worker of its own. What moves is
when the work that is the same for every submission is done: the worker was started, and did its
imports, before the check came (`student.PreparedWorker`), while nobody waited. It holds one
submission: once a check has used it, it is killed, and the next check's worker is started after
the answer is sent. The process exits after IDLE_SECONDS without a check, or when its socket
is taken away (a newer course tree: `coursekit.feedback` names the socket after the sources).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import selectors
import socket
import struct
import sys
import time
from pathlib import Path

IDLE_SECONDS = 20 * 60.0  # a lab left open over lunch starts it again at its next check
REQUEST_BYTES = 64 * 1024  # one request line: a unit, a part and a path
REQUEST_SECONDS = 10.0  # to send that line, once connected


class WarmGrader:
    def __init__(self, socket_path: Path, unit: str | None = None):
        from ..grading import run
        from ..paths import COURSE_UNITS

        self.socket_path = socket_path
        self.spare = None  # the worker started ahead (student.PreparedWorker), and its unit
        self.spare_unit: str | None = None
        for name in [unit] if unit else COURSE_UNITS:  # pytest, the graders and what they import
            run.prepare_forked_runs(name, zygote=False)  # a unit's zygote comes with its first worker
        self.warmed = {unit} if unit else set(COURSE_UNITS)
        if unit:
            self.prepare(unit)

    # ------------------------------------------------------------ the worker started ahead

    def prepare(self, unit: str) -> None:
        """Start the next check's worker for `unit` (a no-op when there is one)."""
        from ..grading.plugin import worker_setup
        from ..trust.sandbox import Limits, SandboxUnavailable
        from ..trust.student import PreparedWorker

        if self.spare is not None and self.spare_unit == unit:
            return
        self.drop_spare()
        try:
            self.spare, self.spare_unit = PreparedWorker(Limits(), **worker_setup([unit])), unit
        except SandboxUnavailable:
            self.spare = None  # the check starts its own, and says so if it cannot either

    def drop_spare(self) -> None:
        if self.spare is not None:
            self.spare.discard()
        self.spare = self.spare_unit = None

    def settle(self) -> None:
        """Read what the spare's start has sent (its hello, then the end of its imports)."""
        if self.spare is not None and not self.spare.ready():
            if self.spare.advance(time.monotonic() + 60.0) is not None:
                self.drop_spare()  # it did not come up: the next check starts a fresh one

    # ------------------------------------------------------------ one check

    def check(self, unit: str, part: str, path: str) -> dict:
        from ..grading import run
        from ..trust import student
        from ..units import UNITS
        from .reports import answer

        if unit not in self.warmed:
            run.prepare_forked_runs(unit, zygote=False)
            self.warmed.add(unit)
        if unit in UNITS and self.spare_unit != unit:
            self.prepare(unit)  # here, not in the run: its zygote is then kept for the next check
        if self.spare is not None and self.spare_unit == unit:
            student.offer_spare(self.spare)  # the grading run forked for this check adopts it
            self.spare = self.spare_unit = None
        try:
            data = Path(path).read_bytes()
        except OSError as err:
            return {"error": f"the saved notebook could not be read ({err.strerror})", "kind": "student"}
        try:
            return answer(unit, data, part, Path(path).name)
        finally:
            student.offer_spare(None)  # a worker offered but not forked with is stopped with the run

    # ------------------------------------------------------------ the socket

    def serve(self, idle: float = IDLE_SECONDS) -> None:
        from ..grading import run

        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()  # a dead grader's (the lock says no live one has it)
        old_mask = os.umask(0o077)
        try:
            listener.bind(str(self.socket_path))
        finally:
            os.umask(old_mask)
        listener.listen(16)
        identity = self.socket_path.stat().st_ino
        selector = selectors.DefaultSelector()
        selector.register(listener, selectors.EVENT_READ, "listener")
        last = time.monotonic()
        try:
            while time.monotonic() - last < idle:
                # While the spare is starting, its messages are read as they come (between checks).
                starting = self.spare.reply_fd if self.spare is not None and not self.spare.ready() else None
                if starting is not None:
                    selector.register(starting, selectors.EVENT_READ, "spare")
                events = selector.select(timeout=5.0)
                if starting is not None:
                    selector.unregister(starting)
                for key, _ in events:
                    if key.data == "spare":
                        self.settle()
                        continue
                    connection, _ = listener.accept()
                    with connection:
                        unit = self.answer_connection(connection)
                    last = time.monotonic()
                    if unit:  # after the answer: neither slows the check it follows
                        self.prepare(unit)
                        run.rehearse_once(unit)  # the trusted half of the unit's grading, for the next run
                try:
                    if self.socket_path.stat().st_ino != identity:
                        return  # another grader has the socket now
                except FileNotFoundError:
                    return
        finally:
            self.drop_spare()
            selector.close()
            listener.close()
            with contextlib.suppress(FileNotFoundError):
                if self.socket_path.stat().st_ino == identity:
                    self.socket_path.unlink()

    def answer_connection(self, connection: socket.socket) -> str | None:
        """Read one request, answer it; the unit it was about (None for a status request)."""
        connection.settimeout(REQUEST_SECONDS)
        received = b""
        with contextlib.suppress(OSError):
            while b"\n" not in received and len(received) < REQUEST_BYTES:
                chunk = connection.recv(4096)
                if not chunk:
                    break
                received += chunk
        credentials = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        if struct.unpack("3i", credentials)[1] != os.getuid():  # the socket's mode keeps all but root out
            self.send(connection, {"error": "this grader answers the user who started it only", "kind": "grader"})
            return None
        try:
            request = json.loads(received.split(b"\n", 1)[0])
            assert isinstance(request, dict)
        except (ValueError, AssertionError):
            return None
        if request.get("op") == "status":
            self.send(connection, {"pid": os.getpid(), "unit": self.spare_unit,
                                   "worker": self.spare.process.pid if self.spare is not None else None,
                                   "ready": bool(self.spare is not None and self.spare.ready())})
            return None
        unit, part, path = (str(request.get(k, "")) for k in ("unit", "part", "path"))
        try:
            result = self.check(unit, part or "all", path)
        except Exception as err:  # noqa: BLE001 - the grader's own failure: said as such, never a score
            result = {"error": f"the warm grader failed ({type(err).__name__}: {err})", "kind": "grader"}
        self.send(connection, result)
        from ..units import UNITS

        return unit if unit in UNITS else None

    @staticmethod
    def send(connection: socket.socket, message: dict) -> None:
        connection.settimeout(60.0)
        with contextlib.suppress(OSError):  # the check line gave up waiting: it asks again
            connection.sendall(json.dumps(message).encode())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder warm-grader", description=__doc__.split("\n")[0])
    parser.add_argument("socket", help="the Unix socket to listen on")
    parser.add_argument("--unit", default=None, help="the unit to start a worker for at once")
    parser.add_argument("--idle", type=float, default=IDLE_SECONDS, help="exit after this many seconds unasked")
    args = parser.parse_args(argv)
    path = Path(args.socket)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # One grader per socket: the lock is held for the process's life, so a second one started by
    # a check line at the same moment sees it and leaves.
    lock = open(path.with_suffix(".lock"), "a")  # noqa: SIM115 - held until exit
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0
    WarmGrader(path, args.unit).serve(args.idle)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
