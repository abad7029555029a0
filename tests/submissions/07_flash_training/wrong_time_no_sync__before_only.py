"""A timer that synchronises before each timed call but not after it: the clock stops when fn has
only queued its work. Only what the graded part runs is here."""

import time

import numpy as np
import torch


def time_fn(fn, *args, warmup=3, repeats=10):
    for _ in range(warmup):
        fn(*args)
    times = []
    for _ in range(repeats):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))
