"""Timing and peak memory of attention implementations against sequence length.

One piece of code makes chapter 07's figures, exercise 07's comparison with the student's own
versions, and `python3 course.py bench attention`: each passes in the implementations to compare,
`fn(q, k, v)` with `(B, H, T, d)` inputs. The two PyTorch ones are here, because they are not what
the exercises ask for: `math_attention` (PyTorch's reference composite, which writes the whole
score matrix) and `fused_attention` (the FlashAttention kernel, forced).

Peak memory is measured the same way on every device: the most bytes of tensor storage alive at
once among those the call allocates (its inputs are not counted), followed through a
`TorchDispatchMode`. On a GPU `torch.cuda.max_memory_allocated` is reported beside it.
"""

from __future__ import annotations

import statistics
import time
import weakref

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def fused_attention(q, k, v, causal=True):
    """PyTorch's FlashAttention kernel (`scaled_dot_product_attention` with the flash backend forced)."""
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def math_attention(q, k, v, causal=True):
    """PyTorch's plain composite: the whole (T, T) score matrix in memory, like naive attention."""
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({torch.get_num_threads()} threads)"


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class PeakMemory:
    """The peak of live tensor storage allocated inside the `with` block, in bytes."""

    def __init__(self):
        self.live = self.peak = 0
        self.seen: set[int] = set()

    def __enter__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        tracker = self

        class Track(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                for value in out if isinstance(out, tuple | list) else (out,):
                    if isinstance(value, torch.Tensor):
                        tracker._allocated(value)
                return out

        self.mode = Track()
        self.mode.__enter__()
        return self

    def _allocated(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key in self.seen or storage.nbytes() == 0:
            return  # a view of storage already counted (or of an input)
        self.seen.add(key)
        size = storage.nbytes()
        self.live += size
        self.peak = max(self.peak, self.live)

        def release(tracker=self, key=key, size=size):
            tracker.live -= size
            tracker.seen.discard(key)

        weakref.finalize(storage, release)

    def __exit__(self, *exc):
        self.mode.__exit__(*exc)
        return False


def inputs(B, H, T, d, dtype=torch.float32, device="cpu", seed=0):
    generator = torch.Generator(device=device).manual_seed(seed)
    return tuple(torch.randn(B, H, T, d, dtype=dtype, device=device, generator=generator) for _ in range(3))


def time_call(fn, args, device, warmup=2, repeats=5) -> float:
    """Median seconds of fn(*args), synchronising a GPU around each timed call."""
    for _ in range(warmup):
        fn(*args)
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        fn(*args)
        synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(implementations: dict, lengths, B=1, H=8, d=64, dtype=torch.float32, device=None, causal=True,
            memory_limit_bytes=None, repeats=5, log=None) -> list[dict]:
    """One row per (implementation, T): milliseconds (median) and peak bytes allocated by the call.

    An implementation whose (T, T) scores would pass `memory_limit_bytes` is skipped at that T
    and longer (recorded with `skipped`), so a sweep never runs the machine out of memory.
    """
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    rows = []
    for T in lengths:
        q, k, v = inputs(B, H, T, d, dtype, device)
        for name, fn in implementations.items():
            scores_bytes = B * H * T * T * torch.finfo(dtype).bits // 8
            # the plain path holds the scores, the probabilities and float32 softmax temporaries at once
            if memory_limit_bytes and name.startswith("naive") and scores_bytes * 4 > memory_limit_bytes:
                rows.append({"implementation": name, "T": T, "ms": None, "peak_bytes": None, "skipped": True})
                continue
            args = (q, k, v)
            seconds = time_call(lambda *a, fn=fn: fn(*a, causal=causal), args, device, repeats=repeats)
            with torch.no_grad(), PeakMemory() as tracker:
                fn(*args, causal=causal)
            row = {"implementation": name, "T": T, "ms": 1000 * seconds, "peak_bytes": tracker.peak, "skipped": False}
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
                base = torch.cuda.memory_allocated(device)
                fn(*args, causal=causal)
                synchronize(device)
                row["cuda_peak_bytes"] = torch.cuda.max_memory_allocated(device) - base
            rows.append(row)
            if log:
                log(row)
        del q, k, v
    return rows


def plot(rows: list[dict], title: str, axes=None):
    """Two panels: milliseconds and peak memory against T, one line per implementation."""
    import matplotlib.pyplot as plt

    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(10, 4))
    names = list(dict.fromkeys(r["implementation"] for r in rows))
    for name in names:
        mine = [r for r in rows if r["implementation"] == name and not r["skipped"]]
        T = [r["T"] for r in mine]
        axes[0].plot(T, [r["ms"] for r in mine], marker="o", label=name)
        axes[1].plot(T, [r["peak_bytes"] / 2**20 for r in mine], marker="o", label=name)
    for ax, label in zip(axes, ("milliseconds per call (median)", "peak memory allocated (MiB)"), strict=True):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length T")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    axes[0].figure.suptitle(title)
    axes[0].figure.tight_layout()
    return axes
