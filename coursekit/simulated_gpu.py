"""A stand-in for a GPU, so that a timer's synchronisation can be checked on a machine without one.

Unit 07's grader builds a `SimulatedGPU` where the student's `time_fn` runs. Calling it queues the
next of the given durations of work and returns at once, as a kernel launch does; the work is done
that long after the queue empties. While it is installed, `torch.cuda.is_available()` says yes and
`torch.cuda.synchronize()` waits until the queued work is done; `on_device()` is a tensor that says
it lives on a CUDA device (`.is_cuda`, `.device`, `.get_device()`). A timer that synchronises times
the work; one that does not times only the launches, which take next to nothing.
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
        self.busy_until = time.perf_counter()  # when the queued work is done
        self._saved: dict = {}
        self.install()

    def __call__(self, *args):
        """Queue the next duration of work behind whatever is queued already; return at once."""
        duration = self.durations[min(self.calls, len(self.durations) - 1)]
        self.calls += 1
        self.busy_until = max(self.busy_until, time.perf_counter()) + duration

    def synchronize(self, device=None):
        """What torch.cuda.synchronize does: wait until the queued work is done."""
        wait = self.busy_until - time.perf_counter()
        if wait > 0:
            time.sleep(wait)

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
