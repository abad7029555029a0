"""The pool of workers that grade many submissions: a local process pool (`LocalEngine`) or a
Dask cluster (`DaskEngine`), each given the function a task runs, and `warm_up_checks`, which
readies a worker of the feedback service to fork its checks."""

from __future__ import annotations

import time

_WARM_CHECKS: set[str] = set()  # the units whose checks this worker forks (feedback service)


def warm_up_checks(unit: str) -> None:
    """For the feedback service's pool: the hidden tests of `unit` run in a child forked from
    this worker, which has pytest and the unit's graders imported (`run.prepare_forked_runs`)."""
    if unit not in _WARM_CHECKS:
        from . import run

        run.prepare_forked_runs(unit)
        _WARM_CHECKS.add(unit)


# ---------------------------------------------------------------- engines


class LocalEngine:
    """A local process pool: `concurrent.futures.ProcessPoolExecutor`."""

    def __init__(self, workers: int):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # A fresh interpreter per worker ("spawn"), not a fork of this one and its open gradebook.
        self.pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
        self.workers = workers

    def submit(self, task: dict, function):
        return self.pool.submit(function, task)

    def as_completed(self, futures):
        from concurrent.futures import as_completed

        return as_completed(futures)

    @staticmethod
    def outcome(future) -> dict:
        return future.result()

    def close(self, cancel: bool = False) -> None:
        self.pool.shutdown(wait=not cancel, cancel_futures=cancel)


class DaskEngine:
    """A Dask cluster (`--scheduler tcp://host:8786`), or a `distributed.LocalCluster`."""

    def __init__(self, address):
        from distributed import Client

        self.client = Client(address)
        self.workers = max(1, sum(w.get("nthreads", 1) for w in self.client.scheduler_info()["workers"].values()))

    def submit(self, task: dict, function):
        # pure=False: a resubmitted task is graded again, not answered from Dask's cache.
        key = f"{function.__name__}-{task['unit']}-{task.get('student', '')}-{time.monotonic_ns()}"
        return self.client.submit(function, {**task, "fork": False}, pure=False, key=key)

    def as_completed(self, futures):
        from distributed import as_completed

        return as_completed(futures)

    @staticmethod
    def outcome(future) -> dict:
        return future.result()

    def close(self, cancel: bool = False) -> None:
        self.client.close()
