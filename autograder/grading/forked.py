"""One function run in a forked child, for the class-grading workers (`nbgrader/autograde.py`) and
the hidden-test runs they start (`run.GradingRun`): both fork from a process that has already
imported what the child needs, instead of paying a fresh interpreter's start-up.

`Forked(run)` forks; the child runs `run()` with its stdout and stderr sent back through a
pipe, and exits with what it returns. The parent gets the little of `subprocess.Popen` its
callers use: `communicate(timeout) -> (output, None)`, `kill()` and `returncode`.
"""

from __future__ import annotations

import gc
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable


class Forked:
    def __init__(self, run: Callable[[], int], own_group: bool = False):
        """`own_group`: the child leads a process group of its own (so whatever it starts can be
        killed with it, by `kill`) and is killed if this process dies."""
        for stream in (sys.stdout, sys.stderr):
            stream.flush()  # or the child would write this process's buffered text again
        read_end, write_end = os.pipe()
        # The child's garbage collections then leave this process's objects alone: walking
        # them would write to, and so copy, every page they sit on (a fifth of a grading's CPU).
        gc.freeze()
        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                os.close(read_end)
                if own_group:
                    os.setsid()
                    _die_with_parent()
                null = os.open(os.devnull, os.O_RDONLY)
                os.dup2(null, 0)
                os.dup2(write_end, 1)
                os.dup2(write_end, 2)
                os.close(write_end)
                code = int(run())
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        os.close(write_end)
        os.set_blocking(read_end, False)
        self.pid, self.own_group, self.returncode = pid, own_group, None
        self._read_end, self._chunks = read_end, []
        self._selector = selectors.DefaultSelector()
        self._selector.register(read_end, selectors.EVENT_READ)

    def communicate(self, timeout: float | None = None) -> tuple[str, None]:
        """The child's output, once it has exited; TimeoutExpired past `timeout` (it runs on)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = 0.25 if deadline is None else min(deadline - time.monotonic(), 0.25)
            if left <= 0:
                raise subprocess.TimeoutExpired("forked run", timeout)
            # Wake up on output (the child's last words come just before it exits), or every
            # quarter second to see whether it has exited (a process it started may hold the pipe).
            if self._read_end is not None and self._selector.select(left):
                self._read()
            elif self._read_end is None:
                time.sleep(left)
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.returncode = os.waitstatus_to_exitcode(status)
        while self._read_end is not None and self._read():
            pass
        self._close_pipe()
        return b"".join(self._chunks).decode("utf-8", errors="replace"), None

    def kill(self) -> None:
        """Kill the child (and, with `own_group`, everything in its group) and reap it."""
        try:
            if self.own_group:
                os.killpg(self.pid, signal.SIGKILL)
            elif self.returncode is None:
                os.kill(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        self._close_pipe()

    def _read(self) -> bool:
        """Read what is there; False at the end of the output (or when nothing is there)."""
        try:
            chunk = os.read(self._read_end, 65536)
        except BlockingIOError:
            return False
        if chunk:
            self._chunks.append(chunk)
            return True
        self._close_pipe()  # end of file
        return False

    def _close_pipe(self) -> None:
        if self._read_end is not None:
            self._selector.close()
            os.close(self._read_end)
            self._read_end = None


def _die_with_parent() -> None:
    """Linux: be killed when the process that forked this child dies."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
