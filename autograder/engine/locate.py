"""What the step locators share (`Part.locate`, engine/grade.locate_step): reading a student's
output on designed inputs, and the sentences for the steps every attention shares (its scale, its
mask). Each returns None where the step is right, else the sentence that starts "the <step>."."""

from __future__ import annotations

import numpy as np

from .compare import describe


def close(got, want, tol: float = 1e-6) -> bool:
    return got is not None and got.shape == np.shape(want) and bool(np.allclose(got, want, rtol=tol, atol=tol))


def shown(a) -> str:
    return np.array2string(np.asarray(a, dtype=float), precision=3, suppress_small=True, separator=", ")


def what(value) -> str:
    return f"of shape {value.shape}" if isinstance(value, np.ndarray) else describe(value)


def scale_named(c: float, d_k: int, d_model: int | None = None) -> str:
    known = [(1.0, "not scaled at all"), (1 / d_k, "divided by d_k (or by sqrt(d_k) twice)"),
             (np.sqrt(d_k), "multiplied by sqrt(d_k)")]
    if d_model is not None:
        known += [(1 / d_model, "divided by d_model"), (1 / np.sqrt(d_model), "divided by sqrt(d_model)")]
    for value, name in known:
        if abs(c - value) < 1e-3 * max(1.0, value):
            return name
    return f"multiplied by {c:.4g}"


def located_scale(weights, d_k: int, raw: float, setting: str, d_model: int | None = None) -> str | None:
    """A row of weights over [key with raw score `raw`, keys with raw score 0...]: None when its
    ratio says 1/sqrt(d_k) scaled the scores, else the sentence."""
    if weights is None or not np.all(np.isfinite(weights)) or weights[1] <= 0 or weights[0] <= 0:
        return None
    used = float(np.log(weights[0] / weights[1]) / raw)
    if abs(used - 1 / np.sqrt(d_k)) < 1e-3:
        return None
    return (f"the scale. {setting}: your weights {shown(weights)} mean the scores were "
            f"{scale_named(used, d_k, d_model)} ({used:.4g} times QKᵀ), where the contract divides by sqrt(d_k) = "
            f"{np.sqrt(d_k):g}")


def located_mask(weights, mask, setting: str) -> str | None:
    """Weights for equal scores under `mask` (True: may attend): uniform over each row's allowed keys."""
    want = mask / mask.sum(axis=-1, keepdims=True)
    if close(weights, want):
        return None
    if weights is None or weights.shape != want.shape:
        return f"the mask. {setting}: the weights came back as {describe(weights)}, expected shape {want.shape}"
    partial = ~mask.all(axis=-1)  # rows that hide some key
    if np.allclose(np.nan_to_num(weights[partial][mask[partial]]), 0, atol=1e-6):
        return (f"the mask's meaning. {setting}: your weights are 0 exactly where the mask is True; True marks a key "
                "that may be attended, False one that is hidden")
    uniform = np.full(want.shape, 1 / want.shape[-1])
    if close(weights, uniform):
        return (f"the mask. {setting}: every key gets weight {1 / want.shape[-1]:.3g}, as if there were no mask: fill "
                "the scores where the mask is False with -inf before the softmax")
    if not np.allclose(weights.sum(axis=-1), 1, atol=1e-6) and np.allclose(weights.sum(axis=-2), 1, atol=1e-6):
        return (f"the softmax's axis. {setting}: your weights' columns sum to 1, their rows to "
                f"{shown(weights.sum(axis=-1))}: the softmax normalised over the queries; each query's weights over "
                "the keys (the last axis) should sum to 1")
    if not np.allclose(weights.sum(axis=-1), 1, atol=1e-6):
        return (f"the mask. {setting}: the hidden keys get weight 0 but the rows sum to {shown(weights.sum(axis=-1))}: "
                "hide them in the scores (-inf) before the softmax, not in the weights after it")
    if mask.shape[-1] == mask.shape[-2] and not (mask == np.swapaxes(mask, -1, -2)).all():
        flipped = np.swapaxes(mask, -1, -2)
        with np.errstate(invalid="ignore", divide="ignore"):
            as_flipped = flipped / flipped.sum(axis=-1, keepdims=True)
        if close(np.nan_to_num(weights), np.nan_to_num(as_flipped)):
            return (f"the mask's axes. {setting}: your weights follow the mask transposed: its rows are the queries "
                    "and its columns the keys, as the scores' are (mask[i, j]: may query i attend to key j?)")
    if np.abs(weights[~mask]).max() > 1e-6:
        return (f"the mask. {setting}: hidden keys still get weight (up to {np.abs(weights[~mask]).max():.3g}): fill "
                "their scores with -inf (or a very negative number), not 0 or a small one")
    return f"the mask. {setting}: row by row the weights should be {shown(want)}; yours are {shown(weights)}"
