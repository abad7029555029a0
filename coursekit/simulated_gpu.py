"""A stand-in for a GPU, so that a timer's synchronisation can be checked on a machine without one.

Unit 07's grader builds a `SimulatedGPU` where the student's `time_fn` runs. Calling it queues the
next of the given durations of work and returns at once, as a kernel launch does; the work is done
that long after the queue empties. While it is installed, `torch.cuda.is_available()` says yes and
`torch.cuda.synchronize()` waits until the queued work is done; `on_device()` is a tensor that says
it lives on a CUDA device (`.is_cuda`, `.device`, `.get_device()`). A timer that synchronises times
the work; one that does not times only the launches, which take next to nothing.

It keeps time with `time.perf_counter_ns` and waits with `time.sleep`, read when they are called:
on the grader's virtual clock (autograder/trust/worker/virtual_clock.py), which those read while a timer
is graded, a launch takes no time at all and `synchronize` moves the clock to the moment the queued
work is done, so what a timer measures is exact. Anywhere else it really waits.
"""

from __future__ import annotations

import time

import torch


class OnTheDevice(torch.Tensor):
    """A CPU tensor that reports itself on CUDA device 0 (only what a timer asks is faked)."""

    __torch_function__ = torch._C._disabled_torch_function_impl  # results are plain tensors again

    @property
    def is_cuda(self):
        return True

    @property
    def device(self):
        return torch.device("cuda", 0)

    def get_device(self):
        return 0


class SimulatedGPU:
    def __init__(self, durations):
        self.durations = [float(seconds) for seconds in durations]
        self.calls = 0  # launches so far
        # When the queued work is done (perf_counter_ns), None before the first launch: the clock is
        # not read here, since the timer may run on another clock than the one it is built on.
        self.busy_until_ns: int | None = None
        self._saved: dict = {}
        self.install()

    def __call__(self, *args):
        """Queue the next duration of work behind whatever is queued already; return at once."""
        duration = self.durations[min(self.calls, len(self.durations) - 1)]
        self.calls += 1
        now = time.perf_counter_ns()
        start = now if self.busy_until_ns is None else max(self.busy_until_ns, now)  # an idle GPU starts now
        self.busy_until_ns = start + round(duration * 1e9)

    def synchronize(self, device=None):
        """What torch.cuda.synchronize does: wait until the queued work is done."""
        if self.busy_until_ns is None:
            return
        wait_ns = self.busy_until_ns - time.perf_counter_ns()
        if wait_ns > 0:
            time.sleep(wait_ns / 1e9)

    def on_device(self) -> torch.Tensor:
        return torch.zeros(4).as_subclass(OnTheDevice)

    def install(self) -> None:
        fakes = {"is_available": lambda: True, "synchronize": self.synchronize, "device_count": lambda: 1,
                 "current_device": lambda: 0}
        for name, fake in fakes.items():
            self._saved.setdefault(name, getattr(torch.cuda, name))
            setattr(torch.cuda, name, fake)

    def restore(self) -> None:
        """Put torch.cuda's own functions back."""
        for name, original in self._saved.items():
            setattr(torch.cuda, name, original)
        self._saved = {}
