"""Comparing a student's result with an expected one, and saying in words what differs.

Every function here returns None when the two agree and otherwise one short sentence a
student can act on: the shape, NaNs, a property such as rows summing to one, or the
largest error and where it is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Tolerance:
    rtol: float = 1e-4  # loose enough for float32 arithmetic, tight enough for any real bug
    atol: float = 1e-6


def as_array(value):
    """A student's result as a float array, or None if it is not array-like."""
    if isinstance(value, tuple | list) and value and not np.isscalar(value[0]):
        return None  # a tuple of arrays where one array was expected
    try:
        value = plain(value)
        array = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        return None
    return array


def plain(value):
    """A torch tensor as a NumPy array (detached, on the CPU, half precision widened);
    anything else as it is."""
    if hasattr(value, "detach") and hasattr(value, "dtype"):
        value = value.detach().cpu()
        if str(value.dtype) in ("torch.bfloat16", "torch.float16"):
            value = value.float()
        return value.numpy()
    return value


def describe(value) -> str:
    if hasattr(value, "what"):  # a result that could not cross from the student's worker
        return value.what
    if isinstance(value, tuple | list):
        return f"a {type(value).__name__} of {len(value)} items"
    return f"a {type(value).__name__}"


def compare_arrays(actual, expected, tol: Tolerance, label: str = "the output") -> str | None:
    expected = np.asarray(plain(expected), dtype=float)
    got = as_array(actual)
    if got is None:
        return f"{label} is {describe(actual)}, expected an array of shape {expected.shape}"
    if got.shape != expected.shape:
        hint = ""
        if got.ndim >= 2 and got.shape[:-2] + got.shape[-2:][::-1] == expected.shape:
            hint = " (the last two axes are swapped: a transpose too many or too few?)"
        return f"{label} has shape {got.shape}, expected {expected.shape}{hint}"
    bad_finite = np.isfinite(got) != np.isfinite(expected)
    if bad_finite.any():
        where = tuple(int(i) for i in np.argwhere(bad_finite)[0])
        return (
            f"{label} holds {got[where]} at index {where} where {expected[where]:.4g} was expected"
            " (NaN or inf usually means an overflow in exp, or a row with nothing to attend to)"
        )
    if np.allclose(got, expected, rtol=tol.rtol, atol=tol.atol, equal_nan=True):
        return None
    error = np.where(np.isfinite(expected), np.abs(got - expected), 0.0)
    where = tuple(int(i) for i in np.unravel_index(np.argmax(error), error.shape))
    return (
        f"{label} differs: the largest error is {error[where]:.3g} at index {where} "
        f"(got {got[where]:.6g}, expected {expected[where]:.6g})"
    )


def compare_rows_sum_to_one(weights, axis: int = -1, label: str = "the weights",
                            atol: float = 1e-4) -> str | None:
    got = as_array(weights)
    if got is None:
        return None  # the shape/type comparison reports this better
    sums = got.sum(axis=axis)
    off = np.abs(sums - 1.0)
    if not np.all(np.isfinite(off)) or off.max() > atol:
        worst = np.nanargmax(np.where(np.isfinite(off), off, np.inf))
        where = tuple(int(i) for i in np.unravel_index(worst, off.shape))
        return f"the rows of {label} do not sum to one (row {where} sums to {sums[where]:.4g})"
    return None


def compare_masked_zero(weights, mask, label: str = "the weights", atol: float = 1e-6) -> str | None:
    got = as_array(weights)
    if got is None or mask is None:
        return None
    allowed = np.broadcast_to(np.asarray(mask, dtype=bool), got.shape)
    leaked = (~allowed) & (np.abs(got) > atol)
    if leaked.any():
        where = tuple(int(i) for i in np.argwhere(leaked)[0])
        return (
            f"the mask is not respected: {label} at {where} is {got[where]:.3g}, "
            "but the mask forbids that position (it should be exactly 0)"
        )
    return None
