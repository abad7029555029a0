"""A clock the grader controls, on which a timer (unit 07's `time_fn`) is timed.

A timer's grade must depend on its answer alone, never on how busy the machine is, so the grader
does not time a timer on real time. While one call runs on a `VirtualClock`, the clocks a timer
reads (`time.perf_counter`, `perf_counter_ns`, `monotonic`, `monotonic_ns`, `time`, `time_ns`,
and `timeit.default_timer`, which is `perf_counter`; also any of those the code bound to a name
of its own before the call, `from time import perf_counter`, or as a default argument of the
called function) read the virtual clock instead. It stands still (computing takes no time on
it) and moves only when

- a function of the grader's that the timed code calls returns a `Took`: how long that call
  "took". In the sandboxed worker the function runs in the grader, and the reply to its callback
  carries the seconds (`advance`), which the worker's stub applies before returning; in the
  grader's own process (the reference, a catalogued wrong variant) `run` wraps the function so
  that its `Took` is applied. The grader keeps the function, and so counts its calls itself.
- the timed code sleeps: `time.sleep(s)` moves the clock by s at once, without sleeping (so
  `coursekit.simulated_gpu`, whose `torch.cuda.synchronize` sleeps until its queued work is
  done, moves it to the moment the work is done).

Only the thread that makes the call is on the virtual clock: any other (one of the grader's
process, one a submission started) reads and sleeps on real time, so it never sees the clock
jump, nor spins through sleeps that take no time. What `install` replaced is put back by
`uninstall`, whatever the call did meanwhile (raised, rebound `time.perf_counter` itself).

Both sides use this file: the worker (it sits beside main.py in the sandbox, imported as
`virtual_clock`) for the submission's call, and the grader (`autograder.worker.virtual_clock`)
for its own trusted code, so that both answers are exact and can be compared exactly. The real
functions are taken when this module is imported: in the worker, before any of the submission's
code runs, so nothing the submission rebinds later is taken for a real clock.
"""

from __future__ import annotations

import _thread
import math
import time
import timeit
import types

CLOCKS = ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns")
REAL = {name: getattr(time, name) for name in (*CLOCKS, "sleep")}
REAL_DEFAULT_TIMER = timeit.default_timer  # time.perf_counter itself
NS = 10**9
MAX_SECONDS = 2**63 / NS  # past this, the real time.sleep raises OverflowError too


class Took:
    """What a grader's function returns to say that its call took `seconds` on the virtual clock
    (and returned `value`)."""

    __slots__ = ("seconds", "value")

    def __init__(self, seconds: float, value=None):
        self.seconds, self.value = float(seconds), value

    def __repr__(self):
        return f"Took({self.seconds!r})"


class VirtualClock:
    def __init__(self):
        self.elapsed_ns = 0  # how far the clock has moved since it was made
        # Where its readings start: the real ones, to the whole second, so that they look like the
        # real clocks' (time.time() a date of today) and a difference of two is exact but for the
        # float rounding of the readings themselves.
        self.monotonic_base_ns = REAL["monotonic_ns"]() // NS * NS
        self.epoch_base_ns = REAL["time_ns"]() // NS * NS
        self.thread: int | None = None  # the thread on this clock while it is installed
        self._undo: list = []

    # ------------------------------------------------------------ moving it

    def advance(self, seconds) -> None:
        value = float(seconds)
        if not 0.0 <= value <= MAX_SECONDS:  # NaN fails this too
            raise ValueError(f"the virtual clock cannot move by {value!r} seconds")
        self.elapsed_ns += round(value * NS)

    def apply(self, value):
        """A grader's function's result: a `Took` moves the clock and gives its value."""
        if isinstance(value, Took):
            self.advance(value.seconds)
            return value.value
        return value

    def timed(self, fn):
        """`fn`, calling which moves this clock by the `Took` it returns (trusted code only: in the
        worker, the reply to a callback carries the seconds instead)."""
        def call(*args, **kwargs):
            return self.apply(fn(*args, **kwargs))

        return call

    # ------------------------------------------------------------ what the timed code reads

    def _here(self) -> bool:
        return self.thread is not None and _thread.get_ident() == self.thread

    def perf_counter(self):
        return (self.monotonic_base_ns + self.elapsed_ns) / NS if self._here() else REAL["perf_counter"]()

    def perf_counter_ns(self):
        return self.monotonic_base_ns + self.elapsed_ns if self._here() else REAL["perf_counter_ns"]()

    def monotonic(self):
        return (self.monotonic_base_ns + self.elapsed_ns) / NS if self._here() else REAL["monotonic"]()

    def monotonic_ns(self):
        return self.monotonic_base_ns + self.elapsed_ns if self._here() else REAL["monotonic_ns"]()

    def time(self):
        return (self.epoch_base_ns + self.elapsed_ns) / NS if self._here() else REAL["time"]()

    def time_ns(self):
        return self.epoch_base_ns + self.elapsed_ns if self._here() else REAL["time_ns"]()

    def sleep(self, seconds):
        """time.sleep: on this clock, it moves the clock instead of waiting (and refuses what the
        real one refuses)."""
        if not self._here():
            return REAL["sleep"](seconds)
        if isinstance(seconds, str | bytes | bytearray | complex):
            raise TypeError(f"'{type(seconds).__name__}' object cannot be interpreted as an integer")
        value = float(seconds)
        if math.isnan(value):
            raise ValueError("Invalid value NaN (not a number)")
        if value < 0:
            raise ValueError("sleep length must be non-negative")
        if value > MAX_SECONDS:
            raise OverflowError("sleep length is too large")
        self.advance(value)
        return None

    # ------------------------------------------------------------ installing it

    def install(self, namespaces=(), functions=()) -> None:
        """Put this clock in place of the real ones for the calling thread: in the `time` and
        `timeit` modules, in `namespaces` (any global that *is* a real clock function: a name the
        code bound before the call) and in the default arguments of `functions` (the called
        function, whose globals count as a namespace too). `uninstall` puts everything back."""
        if self.thread is not None:
            raise RuntimeError("this virtual clock is installed already")
        self.thread = _thread.get_ident()
        virtual = {name: getattr(self, name) for name in REAL}
        replace = {id(REAL[name]): virtual[name] for name in REAL}  # by identity: never == on the code's objects
        for name in REAL:
            self._set_in(vars(time), name, virtual[name])
        self._set_in(vars(timeit), "default_timer", virtual["perf_counter"])
        spaces = {id(space): space for space in namespaces if type(space) is dict}
        for fn in functions:
            fn = fn.__func__ if type(fn) is types.MethodType else fn
            if type(fn) is not types.FunctionType:
                continue
            spaces.setdefault(id(fn.__globals__), fn.__globals__)
            if type(fn.__defaults__) is tuple and any(id(v) in replace for v in fn.__defaults__):
                self._swap_attr(fn, "__defaults__", tuple(_swapped(v, replace) for v in fn.__defaults__))
            if type(fn.__kwdefaults__) is dict and any(id(v) in replace for v in fn.__kwdefaults__.values()):
                self._swap_attr(fn, "__kwdefaults__", {k: _swapped(v, replace) for k, v in fn.__kwdefaults__.items()})
        for space in spaces.values():
            for key, value in list(space.items()):
                if id(value) in replace and _is_real(value):
                    self._set_in(space, key, replace[id(value)])

    def uninstall(self) -> None:
        """Put back everything `install` replaced, as it was before (never raises; again, nothing)."""
        self.thread = None
        while self._undo:
            restore = self._undo.pop()
            try:
                restore()
            except Exception:  # noqa: BLE001 - a namespace the timed code made unwritable: its own process
                pass

    def _set_in(self, space: dict, key: str, value) -> None:
        missing = key not in space
        previous = space.get(key)
        self._undo.append(lambda: space.pop(key, None) if missing else space.__setitem__(key, previous))
        space[key] = value

    def _swap_attr(self, obj, name: str, value) -> None:
        previous = getattr(obj, name)
        self._undo.append(lambda: setattr(obj, name, previous))
        setattr(obj, name, value)

    def __enter__(self) -> VirtualClock:
        self.install()
        return self

    def __exit__(self, *exc) -> bool:
        self.uninstall()
        return False

    def run(self, fn, args=(), kwargs=None, namespaces=()):
        """fn(*args, **kwargs) in this process on this clock, installed for the call alone, the
        grader's functions among the arguments moving it by their `Took` (see `timed`): how the
        grader runs its own trusted timers."""
        args = tuple(self.timed(a) if _graders_function(a) else a for a in args)
        kwargs = {k: self.timed(v) if _graders_function(v) else v for k, v in (kwargs or {}).items()}
        self.install(namespaces, (fn,))
        try:
            return fn(*args, **kwargs)
        finally:
            self.uninstall()


def _is_real(value) -> bool:
    return any(value is real for real in REAL.values())


def _swapped(value, replace: dict):
    return replace[id(value)] if id(value) in replace and _is_real(value) else value


def _graders_function(value) -> bool:
    return callable(value) and not isinstance(value, type)
