"""A timer that synchronises after each timed call but not before the first, so the warm-up's
queued GPU work is timed with it. Only what the graded part runs is here."""

import time

import numpy as np
import torch


def time_fn(fn, *args, warmup=3, repeats=10):
    for _ in range(warmup):
        fn(*args)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(*args)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))
