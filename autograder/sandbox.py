"""Running a student's code without letting it take the grader down with it.

`time_limit` stops code that runs too long (an infinite loop costs that check, not the
whole notebook); `quiet` keeps the student's prints and warnings out of the grade cell's
streams, because nbgrader scores a grade cell 0 if anything at all reaches stderr.
"""

from __future__ import annotations

import contextlib
import io
import signal
import threading
import warnings

import numpy as np


class TimeLimitExceeded(BaseException):
    """Raised inside student code that ran too long.

    A BaseException, so that a student's `except Exception:` cannot swallow it.
    """


@contextlib.contextmanager
def time_limit(seconds: float):
    """Interrupt the block after `seconds` (main thread only; elsewhere, no limit).

    The timer re-fires every 0.25 s, so code that catches the first interrupt with a bare
    `except:` is stopped by the next one.
    """
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return

    def interrupt(signum, frame):
        raise TimeLimitExceeded(seconds)

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.25)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def quiet():
    """Swallow stdout, stderr, Python warnings and NumPy floating-point warnings."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
        stack.enter_context(contextlib.redirect_stderr(io.StringIO()))
        stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("ignore")
        stack.enter_context(np.errstate(all="ignore"))
        yield


def run_student(fn, *args, seconds: float, **kwargs):
    """Call `fn` quietly under a time limit. Exceptions propagate to the caller."""
    with quiet(), time_limit(seconds):
        return fn(*args, **kwargs)
