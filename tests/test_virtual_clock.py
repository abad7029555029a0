"""Unit 07's `time_fn` is timed on a clock the grader controls (autograder/trust/worker/virtual_clock.py).

A timer's grade must depend on its answer alone, never on how busy the machine is: while the
grader times a timer, the clocks the timer can read stand still but for what the grader's own
function says each of its calls took, and `time.sleep` moves them instead of sleeping. Here:
the clock itself (installed, moved, put back, names bound before grading swapped and swapped
back), the simulated GPU on it, and correct, wrong and hostile timers graded through the real
sandboxed worker, eight times beside four busy loops per core among them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import timeit
from pathlib import Path

import pytest

from autograder.engine.grade import grade_part
from autograder.trust.student import Student
from autograder.units import UNITS

UNIT = UNITS["07_flash_training"]
SUBMISSIONS = Path(__file__).parent / "submissions" / "07_flash_training"
FULL = UNIT.part("time_fn").points  # 5
REAL = {name: getattr(time, name) for name in ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns",
                                                "time", "time_ns", "sleep")}


def worker(source: str) -> Student:
    """Student code, in a sandboxed worker as in real grading (as tests/test_worker.py starts one)."""
    student = Student([("answer", source)])
    student.start()
    return student


def time_fn_points(student) -> tuple[float, list[str]]:
    results = grade_part(UNIT, "time_fn", student)
    return sum(r.points for r in results), [r.message for r in results if not r.passed]


def assert_real_clocks():
    for name, real in REAL.items():
        assert getattr(time, name) is real, f"time.{name} was not put back"
    assert timeit.default_timer is REAL["perf_counter"], "timeit.default_timer was not put back"


# ---------------------------------------------------------------- the clock, in this process


def test_the_clocks_stand_still_but_for_sleeps_and_what_the_grader_says_a_call_took():
    from autograder.trust.worker.virtual_clock import Took, VirtualClock

    with VirtualClock() as clock:
        start = {name: getattr(time, name)() for name in REAL if name != "sleep"}
        default = timeit.default_timer()
        sum(range(200_000))  # computing takes no time on it
        assert time.perf_counter() == start["perf_counter"] and time.time_ns() == start["time_ns"]
        time.sleep(0.25)
        clock.advance(0.125)
        assert clock.apply(Took(0.5, value="answer")) == "answer"
        assert time.perf_counter_ns() - start["perf_counter_ns"] == 875_000_000
        assert time.monotonic_ns() - start["monotonic_ns"] == 875_000_000
        assert time.time_ns() - start["time_ns"] == 875_000_000
        assert time.perf_counter() - start["perf_counter"] == pytest.approx(0.875, abs=1e-9)
        assert time.monotonic() - start["monotonic"] == pytest.approx(0.875, abs=1e-9)
        assert timeit.default_timer() - default == pytest.approx(0.875, abs=1e-9)
        # time.time() is a float of about 1.7e9 seconds: its own steps are a quarter of a microsecond
        assert time.time() - start["time"] == pytest.approx(0.875, abs=1e-6)
        with pytest.raises(ValueError):
            time.sleep(-1)
        with pytest.raises(TypeError):
            time.sleep("1")
    assert_real_clocks()


def test_names_bound_before_the_call_read_the_clock_during_it_and_are_put_back():
    from autograder.trust.worker.virtual_clock import VirtualClock

    namespace = {"perf_counter": time.perf_counter, "timer": timeit.default_timer, "ns": time.perf_counter_ns,
                 "sleep": time.sleep, "unrelated": len, "number": 3}
    before = dict(namespace)

    def timer(fn, *, clock=time.monotonic, ns=time.time_ns):
        start, start_ns = clock(), ns()
        fn()
        return clock() - start, ns() - start_ns

    clock = VirtualClock()
    seconds, nanoseconds = clock.run(timer, (lambda: time.sleep(0.5),), namespaces=(namespace,))
    assert seconds == pytest.approx(0.5, abs=1e-9) and nanoseconds == 500_000_000
    assert namespace == before and all(namespace[k] is before[k] for k in before)
    assert timer.__kwdefaults__ == {"clock": time.monotonic, "ns": time.time_ns}

    clock = VirtualClock()
    clock.install(namespaces=(namespace,))
    try:
        assert namespace["perf_counter"] is not before["perf_counter"]
        start = namespace["perf_counter"]()
        namespace["sleep"](2.0)
        assert namespace["timer"]() - start == pytest.approx(2.0, abs=1e-9)
        assert namespace["unrelated"] is len and namespace["number"] == 3
    finally:
        clock.uninstall()
    assert all(namespace[k] is before[k] for k in before)
    assert_real_clocks()


def test_the_clock_is_put_back_whatever_the_timed_code_does():
    from autograder.trust.worker.virtual_clock import VirtualClock

    namespace = {"perf_counter": time.perf_counter}

    def vandal():
        time.perf_counter = lambda: 0.0
        time.sleep = lambda seconds: None
        timeit.default_timer = None
        namespace["perf_counter"] = "gone"
        raise RuntimeError("broke the clocks")

    with pytest.raises(RuntimeError, match="broke the clocks"):
        VirtualClock().run(vandal, namespaces=(namespace,))
    assert_real_clocks()
    assert namespace["perf_counter"] is REAL["perf_counter"]


def test_another_thread_stays_on_real_time():
    from autograder.trust.worker.virtual_clock import VirtualClock

    seen = {}

    def elsewhere():
        start = time.perf_counter()
        time.sleep(0.05)  # a real sleep: a submission's background thread does not spin through free sleeps
        seen["slept"] = time.perf_counter() - start

    with VirtualClock():
        start = time.perf_counter()
        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join()
        assert time.perf_counter() == start  # the other thread's sleep did not move this thread's clock
    assert seen["slept"] >= 0.05


def test_the_simulated_gpu_launches_in_no_time_and_synchronize_moves_the_clock_to_the_end_of_its_work():
    import torch

    from autograder.trust.worker.virtual_clock import VirtualClock
    from coursekit.simulated_gpu import SimulatedGPU

    gpu = SimulatedGPU([0.05, 0.09, 0.03])  # built before the call, as the grader builds it
    try:
        with VirtualClock():
            start = time.perf_counter_ns()
            gpu()
            gpu()
            assert time.perf_counter_ns() == start  # launches only queue work
            torch.cuda.synchronize()
            assert time.perf_counter_ns() - start == 140_000_000
            torch.cuda.synchronize()  # nothing queued: no time
            time.sleep(0.1)  # the GPU idles meanwhile: the next launch starts now, not at the last one's end
            gpu()
            torch.cuda.synchronize()
            assert time.perf_counter_ns() - start == 270_000_000
    finally:
        gpu.restore()
    assert_real_clocks()


# ---------------------------------------------------------------- timers, through the sandboxed worker

TIMER = """
{imports}
import statistics

import torch


def time_fn(fn, *args, warmup=3, repeats=10):
    on_gpu = any(isinstance(a, torch.Tensor) and a.is_cuda for a in args)
    for _ in range(warmup):
        fn(*args)
    times = []
    for _ in range(repeats):
        if on_gpu:
            torch.cuda.synchronize()
        start = {now}
        fn(*args)
        if on_gpu:
            torch.cuda.synchronize()
        times.append(({now} - start){unit})
    return statistics.median(times)
"""

CLOCKS = {  # how a correct timer may read the time: (imports, the reading, what makes it seconds)
    "time.perf_counter()": ("import time", "time.perf_counter()", ""),
    "from time import perf_counter": ("from time import perf_counter", "perf_counter()", ""),
    "time.perf_counter_ns()": ("import time", "time.perf_counter_ns()", " / 1e9"),
    "timeit.default_timer": ("from timeit import default_timer as timer", "timer()", ""),
    "time.monotonic()": ("import time", "time.monotonic()", ""),
    "time.time()": ("import time", "time.time()", ""),
}


def timer_source(clock: str) -> str:
    imports, now, unit = CLOCKS[clock] if clock in CLOCKS else clock
    return TIMER.format(imports=imports, now=now, unit=unit)


@pytest.mark.parametrize("clock", list(CLOCKS))
def test_a_correct_timer_gets_full_marks_on_every_clock_the_grader_controls(clock):
    with worker(timer_source(clock)) as student:
        points, failed = time_fn_points(student)
    assert points == FULL, failed


@pytest.mark.parametrize("load", [0.0, 0.036])
def test_a_timer_on_a_clock_the_grader_cannot_reach_is_told_which_clocks_to_use(load):
    """`load`: real seconds that a busy machine adds to each reading of such a clock (36 ms was seen
    beside eight busy loops, and the hint, then decided on the real value, was left out)."""
    source = timer_source(("from datetime import datetime", "datetime.now()", f".total_seconds() + {load}"))
    with worker(source) as student:
        points, failed = time_fn_points(student)
    assert points == 0, failed
    assert failed and all("time.perf_counter()" in message and "datetime.now()" in message for message in failed), \
        failed


def test_a_timer_whose_real_time_answers_happen_to_double_is_still_told_which_clocks_to_use():
    """Under load a real-clock timer answers a few microseconds, in whole microseconds for
    datetime.now(): 3 us then 5 us was once taken for "twice the answer when every call takes twice
    as long", and the hint was left out. Here the timer's answers are those numbers, in turn."""
    source = """
ANSWERS = [3e-6, 5e-6]
calls = 0


def time_fn(fn, *args, warmup=3, repeats=10):
    global calls
    for _ in range(warmup + repeats):
        fn(*args)
    calls += 1
    return ANSWERS[(calls - 1) % 2]
"""
    with worker(source) as student:
        points, failed = time_fn_points(student)
    assert points == 0, failed
    assert failed and all("time.perf_counter()" in message and "datetime.now()" in message for message in failed), \
        failed


@pytest.mark.parametrize("change, told", [
    (("statistics.median(times)", "max(times)"), "400.0 ms is the slowest of the timed calls"),
    (("statistics.median(times)", "sum(times) / (warmup + repeats)"),
     "92.5 ms is the total of the timed calls divided by every call, warm-up included"),
    (("range(warmup)", "range(warmup + 1)"), "fn was called 9 times, expected 8"),
])
def test_an_uncatalogued_timer_is_told_what_its_answer_is(change, told):
    """Where no catalogued mistake explains the answer, the message says what it is, from the
    check's own durations: which calls were timed, what was taken of them."""
    with worker(timer_source("time.perf_counter()").replace(*change)) as student:
        points, failed = time_fn_points(student)
    assert points < FULL and any(told in message for message in failed), failed


def test_a_timer_that_warms_up_without_the_arguments_is_told_so():
    source = timer_source("time.perf_counter()").replace("        fn(*args)\n    times", "        fn()\n    times")
    with worker(source) as student:
        points, failed = time_fn_points(student)
    assert points == FULL - 1 and len(failed) == 1 and "did not get the extra arguments" in failed[0] \
        and "call 1 (" in failed[0], failed


def test_the_worker_clock_moves_by_what_the_graders_function_says_and_is_put_back():
    from autograder.units.flash_training import KnownDurations

    source = """
import time
from time import perf_counter_ns as ns

def measure(fn):
    start, start_ns = time.perf_counter(), ns()
    fn()
    time.sleep(0.125)
    fn()
    return time.perf_counter() - start, ns() - start_ns

def clock_types():
    return [type(f).__name__ for f in (time.perf_counter, ns, time.sleep, time.monotonic)]
"""
    with worker(source) as student:
        fn = KnownDurations([0.25, 0.5])
        outcome = student.call_on_virtual_clock("measure", fn)
        assert outcome.ok, outcome.error
        seconds, nanoseconds = outcome.value
        assert nanoseconds == 875_000_000 and seconds == pytest.approx(0.875, abs=1e-9) and fn.calls == 2
        assert student.call("clock_types").value == ["builtin_function_or_method"] * 4  # the real ones again


HOSTILE = """
import time
from time import perf_counter

REAL = (time.perf_counter, time.sleep, time.monotonic)

def time_fn(fn, *args, warmup=3, repeats=10):
    global perf_counter
    time.perf_counter = lambda: 0.0
    time.sleep = lambda seconds: None
    perf_counter = None
    fn(*args)
    raise RuntimeError("broke the clocks")

def clocks_are_real():
    return [time.perf_counter is REAL[0], time.sleep is REAL[1], time.monotonic is REAL[2], perf_counter is REAL[0]]
"""


def test_a_timer_that_breaks_the_clocks_and_raises_costs_its_own_checks_and_the_clocks_are_put_back():
    with worker(HOSTILE) as student:
        points, failed = time_fn_points(student)
        assert points == 0 and len(failed) == len(UNIT.part("time_fn").checks)
        assert all("broke the clocks" in message for message in failed), failed
        assert student.call("clocks_are_real").value == [True, True, True, True]


# ---------------------------------------------------------------- the figure: a busy machine

BUSY_PER_CORE = 4
ROUNDS = 8


@pytest.fixture
def busy_loops():
    """Four busy-looping processes per core, killed after the test (only these, by their ids), each
    in a session of its own: where the kernel shares the CPU between sessions first (autogroup),
    loops in the test's own session would hardly slow the sandbox, which has a session of its own."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL,
                                 start_new_session=True)
                for _ in range(BUSY_PER_CORE * (os.cpu_count() or 1))]
    try:
        yield len(spinners)
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait()


def test_a_correct_timer_keeps_full_marks_beside_busy_loops(busy_loops):
    student = Student.open(SUBMISSIONS / "correct_einsum_tiles.py")
    try:
        scores = []
        for _ in range(ROUNDS):
            points, failed = time_fn_points(student)
            scores.append((points, failed))
    finally:
        student.close()
    figures = [points for points, _ in scores]
    print(f"time_fn of correct_einsum_tiles.py beside {busy_loops} busy loops, graded {ROUNDS} times: "
          f"{', '.join(f'{p:g}/{FULL:g}' for p in figures)}")
    assert figures == [FULL] * ROUNDS, [failed for _, failed in scores if failed]


CORRECT_TIMER = """
import statistics
import time

import torch


def time_fn(fn, *args, warmup=3, repeats=10):
    on_gpu = any(isinstance(a, torch.Tensor) and a.is_cuda for a in args)
    for _ in range(warmup):
        fn(*args)
    times = []
    for _ in range(repeats):
        if on_gpu:
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn(*args)
        if on_gpu:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
"""


@pytest.mark.parametrize("old, new, check, told", [
    ("warmup=3, repeats=10", "warmup=1, repeats=5", "defaults", "the contract's defaults are warmup=3 and repeats=10"),
    (None, None, "gpu_argument", "look for a GPU tensor in every argument"),
])
def test_a_timer_with_other_defaults_or_that_looks_at_the_first_argument_only_loses_that_check(old, new, check, told):
    """Both kept full marks once (the fresh set): the defaults were never used, and the GPU tensor was
    always fn's first argument."""
    student = worker(CORRECT_TIMER)
    try:
        assert time_fn_points(student) == (FULL, [])
    finally:
        student.close()
    source = CORRECT_TIMER
    if old is None:  # synchronise only when the first argument is on the GPU
        assert "for a in args" in source
        source = source.replace("for a in args", "for a in args[:1]")
    else:
        assert old in source
        source = source.replace(old, new)
    student = worker(source)
    try:
        results = grade_part(UNIT, "time_fn", student)
    finally:
        student.close()
    failed = {r.name.split("/")[1]: r.message for r in results if not r.passed}
    assert set(failed) == {check} and told in failed[check], failed
