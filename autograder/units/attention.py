"""Unit 01, attention (NumPy): the hidden checks and the misconception catalogue.

The reference is the solution notebook (`solutions/01_attention/attention.ipynb`); the
variants below are wrong on purpose, each built from the reference with one mistake.
"""

from __future__ import annotations

import numpy as np

from ..engine.compare import (
    Tolerance,
    as_array,
    compare_arrays,
    compare_masked_zero,
    compare_rows_sum_to_one,
    describe,
)
from ..engine.locate import close, located_mask, located_scale, shown, what
from ..engine.spec import Check, Inputs, Misconception, Part, SampleBug, StepFailed, Unit

# Stability checks push scores to ~1e4, where float32 arithmetic alone is off by ~1e-3.
LOOSE = Tolerance(rtol=1e-2, atol=1e-3)


def mask_of(inputs: Inputs):
    if "mask" in inputs.kwargs:
        return inputs.kwargs["mask"]
    return inputs.args[3] if len(inputs.args) > 3 else None


def random_mask(rng, n_q, n_k):
    """A boolean mask in which every query may attend to at least one key."""
    mask = rng.random((n_q, n_k)) < 0.6
    mask[np.arange(n_q), rng.integers(0, n_k, n_q)] = True
    return mask


# ---------------------------------------------------------------- what is graded


def graded() -> Unit:
    """The graded parts: each check, what it shows, and its points. What the checks use (their
    inputs, diagnoses and probes) and the catalogue of mistakes they name are below; this is
    called at the end of the module, once all of it is defined."""
    parts = (
        Part(
            "softmax",
            locate=locate_softmax,
            checks=(
                Check("random_2d", "softmax of a random (4, 7) array", 0.5, softmax_inputs((4, 7))),
                Check("integers", "softmax of an integer array (3, 5): the probabilities are floats", 0.5,
                      integer_softmax_inputs),
                Check("axis_argument", "softmax along axis=1 of a (3, 4, 5) array", 0.5,
                      softmax_inputs((3, 4, 5), axis=1)),
                # axis 0 of three: an axis moved to the end and swapped back (not moved back) shows only here
                Check("first_axis", "softmax along axis=0 of a (3, 4, 5) array", 0.5,
                      softmax_inputs((3, 4, 5), axis=0)),
                Check("large_inputs", "inputs near +1e4 and -1e4, and a row spread over thousands "
                      "(numerical stability)", 1,
                      large_softmax_inputs, tol=LOOSE),
                Check("inputs_unchanged", "the input array is not modified", 1,
                      softmax_inputs((3, 5)), kind="unchanged"),
            ),
        ),
        Part(
            "scaled_dot_product_attention",
            diagnose=diagnose_attention,
            uses=("softmax",),
            locate=locate_attention,
            checks=(
                Check("unbatched", "Q (3, 4), K (5, 4), V (5, 6) with no batch axes", 1,
                      attention_inputs((), 3, 5, 4, 6)),
                Check("batched", "Q (2, 3, 5, 4), K (2, 3, 7, 4), V (2, 3, 7, 6)", 1,
                      attention_inputs((2, 3), 5, 7, 4, 6)),
                Check("random_mask", "a random (5, 6) boolean mask broadcast over a batch of 2", 1,
                      attention_inputs((2,), 5, 6, 8, 3, mask="random")),
                Check("causal_mask", "a causal (6, 6) mask on inputs of shape (2, 2, 6, 8)", 1,
                      attention_inputs((2, 2), 6, 6, 8, 8, mask="causal")),
                Check("per_batch_mask", "a (3, 1, 4, 5) mask, different for each batch item", 1,
                      attention_inputs((3, 2), 4, 5, 6, 4, mask="per_batch")),
                Check("large_scores", "scores of size ~1e4 (numerical stability)", 0.5,
                      attention_inputs((2,), 4, 6, 16, 5, scale=100.0), tol=LOOSE),
                # A fill of -1000 (or -1e4) beats every allowed key here: only one far below any score holds.
                Check("mask_on_negative_scores", "a random mask on scores near -2e4 (is what fills the hidden "
                      "scores below every score? -inf is)", 0.5, negative_scores_inputs, tol=LOOSE),
                Check("inputs_unchanged", "Q, K, V and the mask are not modified", 1,
                      attention_inputs((2,), 4, 5, 3, 2, mask="random"), kind="unchanged"),
            ),
        ),
        Part(
            "self_attention",
            diagnose=diagnose_self_attention,
            uses=("softmax", "scaled_dot_product_attention"),
            locate=locate_self_attention,
            checks=(
                Check("unbatched", "x (6, 8) with W_q, W_k (8, 4) and W_v (8, 5)", 1,
                      self_attention_inputs((), 6, 8, 4, 5)),
                Check("batched", "x (2, 3, 6, 8) with W_q, W_k (8, 4) and W_v (8, 5)", 1,
                      self_attention_inputs((2, 3), 6, 8, 4, 5)),
                Check("causal_mask", "a causal mask on x (2, 6, 8)", 1,
                      self_attention_inputs((2,), 6, 8, 4, 3, causal=True)),
                Check("inputs_unchanged", "x and the weights are not modified", 1,
                      self_attention_inputs((2,), 5, 6, 3, 4, causal=True), kind="unchanged"),
            ),
        ),
    )

    return Unit(
        "01_attention",
        cell_seconds=10,  # NumPy on small arrays: every cell of the exercise runs in well under a second
        reference_cpu_seconds=0.1,  # 0.03 s measured (spec.Unit.reference_cpu_seconds)
        notebook_cpu_seconds=1.5,  # 1.26 s measured (spec.Unit.notebook_cpu_seconds)
        parts=parts,
        misconceptions=MISCONCEPTIONS,
        sample_bug=SampleBug("scaled_dot_product_attention", "/ np.sqrt(d_k)", "/ d_k", "scale_by_dk"),
    )


# ---------------------------------------------------------------- comparing results


def diagnose_attention(result, expected, inputs: Inputs, tol: Tolerance) -> str | None:
    """`(out, weights)` pairs: shapes first, then the weights' properties, then values."""
    if not isinstance(result, tuple | list) or len(result) != 2:
        return f"expected the pair `(out, weights)`, got {describe(result)}"
    (out, weights), (want_out, want_weights) = result, expected
    weights_problem = compare_arrays(weights, want_weights, tol, "`weights`")
    out_problem = compare_arrays(out, want_out, tol, "`out`")
    if weights_problem is None and out_problem is None:
        return None
    for problem in (weights_problem, out_problem):
        if problem and ("shape" in problem or "expected an array" in problem):
            return problem
    return (
        compare_rows_sum_to_one(weights, label="`weights`")
        or compare_masked_zero(weights, mask_of(inputs), label="`weights`")
        or weights_problem
        or out_problem
    )


def diagnose_self_attention(result, expected, inputs: Inputs, tol: Tolerance) -> str | None:
    """One output array; a catalogued variant's `(out, weights)` pair, taken as the expected
    result when a student's answer is matched against it, is compared as a pair."""
    if isinstance(expected, tuple):
        return diagnose_attention(result, expected, inputs, tol)
    return compare_arrays(result, expected, tol)


# ---------------------------------------------------------------- inputs


def softmax_inputs(shape, axis=None, scale=3.0):
    def make(rng):
        kwargs = {} if axis is None else {"axis": axis}
        return Inputs((rng.normal(0.0, scale, shape),), kwargs)

    return make


def integer_softmax_inputs(rng):
    return Inputs((rng.integers(-3, 4, (3, 5)),))


def large_softmax_inputs(rng):
    # One row near +1e4 (exp overflows to inf), one near -1e4 (exp underflows to 0), and one
    # spread over thousands: shifting by anything but the row's maximum (its minimum, say)
    # still overflows there.
    x = rng.normal(0.0, 5.0, (4, 6))
    x[0] += 1e4
    x[1] -= 1e4
    x[2] *= 400.0
    return Inputs((x,))


def attention_inputs(batch, n_q, n_k, d_k, d_v, mask=None, scale=1.0):
    def make(rng):
        Q = rng.normal(0.0, scale, (*batch, n_q, d_k))
        K = rng.normal(0.0, scale, (*batch, n_k, d_k))
        V = rng.normal(0.0, 1.0, (*batch, n_k, d_v))
        kwargs = {}
        if mask == "random":
            kwargs["mask"] = random_mask(rng, n_q, n_k)
        elif mask == "causal":
            kwargs["mask"] = np.tril(np.ones((n_q, n_k), dtype=bool))
        elif mask == "per_batch":
            kwargs["mask"] = np.stack([random_mask(rng, n_q, n_k) for _ in range(batch[0])])[:, None]
        return Inputs((Q, K, V), kwargs)

    return make


def negative_scores_inputs(rng):
    # Queries and keys point opposite ways: every scaled score is near -2e4. No batch axis: only the fill shows.
    Q = np.abs(rng.normal(0.0, 1.0, (4, 16))) * 100.0
    K = -np.abs(rng.normal(0.0, 1.0, (6, 16))) * 100.0
    V = rng.normal(0.0, 1.0, (6, 5))
    return Inputs((Q, K, V), {"mask": random_mask(rng, 4, 6)})


def self_attention_inputs(batch, n, d_model, d_k, d_v, causal=False):
    def make(rng):
        x = rng.normal(0.0, 1.0, (*batch, n, d_model))
        W_q, W_k = (rng.normal(0.0, d_model**-0.5, (d_model, d_k)) for _ in range(2))
        W_v = rng.normal(0.0, d_model**-0.5, (d_model, d_v))
        kwargs = {"mask": np.tril(np.ones((n, n), dtype=bool))} if causal else {}
        return Inputs((x, W_q, W_k, W_v), kwargs)

    return make


# ---------------------------------------------------------------- locating the step that is wrong
# When no catalogued mistake explains a failed part, these run the student's function on inputs
# made so that each step shows in the output (exponentials in known ratios, V the identity so
# that the output is the weight matrix, equal scores so that only the mask and the axis matter),
# and say which step first departs from the contract and what it computes instead.



def exact_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _sums_to_one_along(got) -> str | None:
    """Where an output of shape (1, 4) or bigger sums to 1, when not along the last axis."""
    if got.ndim >= 2 and np.allclose(got.sum(axis=0), 1, atol=1e-6) and not np.allclose(got.sum(axis=-1), 1):
        return "axis 0"
    if abs(float(got.sum()) - 1) < 1e-6 and not np.allclose(got.sum(axis=-1), 1):
        return "the whole array"
    return None


def locate_softmax(call) -> str | None:
    ratios = np.array([[1.0, 2.0, 3.0, 6.0]])
    x = np.log(ratios)  # exp(x) = [1, 2, 3, 6], whose sum is 12
    raw = call(x.copy())
    got = as_array(raw)
    if got is None or got.shape != x.shape:
        return (f"on x = log([[1, 2, 3, 6]]) (shape (1, 4)) it returned {what(got)}: the output has the "
                "input's shape")
    if not close(got, ratios / 12):
        dtype = getattr(raw, "dtype", None)
        if isinstance(raw, np.ndarray) and dtype.itemsize < 8 and close(got, ratios / 12, 1e-2):
            return (f"the precision. On x = log([[1, 2, 3, 6]]) your output, {shown(got)}, is right to {dtype}'s "
                    f"few digits and comes back as {dtype}: compute in float64 (np.asarray(x, dtype=float)); "
                    f"{dtype}'s round-off is more than the checks allow")
        along = _sums_to_one_along(got)
        if along:
            return (f"the axis. On x = log([[1, 2, 3, 6]]) your output {shown(got)} sums to 1 over {along}, not "
                    "along the last axis, which is the default (axis=-1)")
        if np.all(np.isfinite(got)) and got[0, 0] > 0 and close(got / got[0, 0], ratios, 1e-4):
            return (f"the normalisation. On x = log([[1, 2, 3, 6]]) your output {shown(got)} is proportional to "
                    f"exp(x) = [1, 2, 3, 6], as it should be, but the row sums to {got.sum():.4g}, not 1: divide "
                    "exp(x) by its sum along `axis`, and by nothing else")
        if np.all(got > 0) and got[0, 1] > got[0, 0]:
            power = float(np.log(got[0, 1] / got[0, 0]) / np.log(2.0))
            if close(got / got[0, 0], ratios ** power, 1e-3):
                return (f"the exponent. On x = log([[1, 2, 3, 6]]) your output is proportional to exp({power:.3g} x), "
                        "not exp(x): nothing should multiply x inside the exponential")
        return (f"the exponentials. On x = log([[1, 2, 3, 6]]) softmax is [1, 2, 3, 6] / 12 = {shown(ratios / 12)}; "
                f"yours gives {shown(got)}")
    x3 = np.log(np.arange(1.0, 13.0).reshape(2, 3, 2))
    try:
        got = as_array(call(x3.copy(), axis=1))
    except StepFailed as err:
        return (f"the axis argument. With x of shape (2, 3, 2) and axis=1 it raised {err}: keep the summed axis "
                "(keepdims=True) so that each slice along `axis` is divided by its own sum")
    if not close(got, exact_softmax(x3, axis=1)):
        moved = np.moveaxis(exact_softmax(x3, axis=1), 1, -1)
        if got is not None and got.shape == moved.shape and close(got, moved):
            return (f"the axes' order. With x of shape (2, 3, 2) and axis=1 each slice along axis 1 is right, but "
                    f"your output has shape {got.shape}: the axis moved to the end stays there; move it back "
                    "(np.moveaxis(result, -1, axis)) so that the output has the input's shape")
        if got is None or got.shape != x3.shape:
            return (f"the axis argument: with x of shape (2, 3, 2) and axis=1 it returned {what(got)}: keep the "
                    "summed axis (keepdims=True) so that the sum divides each slice along `axis`")
        sums = [ax for ax in range(3) if np.allclose(got.sum(axis=ax), 1.0, atol=1e-6)]
        reshaped = np.moveaxis(exact_softmax(x3, axis=1), 1, -1).reshape(x3.shape)
        if close(got, reshaped):
            return ("the axes' order. With x of shape (2, 3, 2) and axis=1 your output has the right shape, but its "
                    "entries sit in other places: the result computed along the last axis was reshaped to x's shape "
                    "(.reshape moves no axis); move the axis back instead (np.moveaxis(result, -1, axis))")
        if sums and sums[0] != 1:
            return (f"the axis argument: with axis=1 your output sums to 1 along axis {sums[0]}, not axis 1: use "
                    "`axis` in both the maximum and the sum")
        if abs(float(got.sum()) - 1) < 1e-6:
            return "the axis argument: with axis=1 your output sums to 1 over the whole array, not along axis 1"
        if 1 in sums:
            return ("the axis argument: with axis=1 your output sums to 1 along axis 1, as it should, but holds other "
                    "values than softmax along axis 1 (entries moved between slices, or the maximum taken along "
                    "another axis than `axis`?)")
        return ("the axis argument: with axis=1 the output should sum to 1 along axis 1; yours sums to 1 along no "
                "axis (is the maximum, or the sum, taken along another axis than `axis`?)")
    x0 = np.log(np.arange(1.0, 25.0).reshape(2, 3, 4))  # axis 0 of three distinct sizes
    got = as_array(call(x0.copy(), axis=0))
    if got is not None and got.shape != x0.shape:
        return (f"the axes' order. With x of shape (2, 3, 4) and axis=0 your output has shape {got.shape}: the axes "
                "come back in another order; whatever you move to compute along `axis`, move back to where it was "
                "(np.moveaxis(result, -1, axis) undoes np.moveaxis(x, axis, -1); a swap or a transpose does not, "
                "for three axes or more)")
    ints = np.array([[0, 1, 2], [3, 3, 3]])
    raw = call(ints.copy())
    if isinstance(raw, np.ndarray) and raw.shape == ints.shape and np.issubdtype(raw.dtype, np.integer):
        return (f"the output's dtype. On the integer array [[0, 1, 2], [3, 3, 3]] your output is {raw.dtype}, "
                f"{raw.tolist()}: probabilities are floats; an output made with np.empty_like(x) or np.zeros_like(x) "
                "keeps x's integer dtype (give it dtype=float, or start from np.asarray(x, dtype=float))")
    far = np.array([[0.0, 2000.0], [1000.0, 1000.0 + np.log(2)], [-1000.0, -1000.0 + np.log(2)]])
    want = np.array([[0.0, 1.0], [1 / 3, 2 / 3], [1 / 3, 2 / 3]])
    got = as_array(call(far.copy()))
    if not close(got, want, 1e-4):
        rows = ["[0, 2000]", "1000 + log([1, 2])", "-1000 + log([1, 2])"]
        bad = next((i for i in range(3) if got is None or got.shape != want.shape or not close(got[i], want[i], 1e-4)),
                   0)
        return (f"the stability shift. For the row {rows[bad]} softmax is {shown(want[bad])}; yours gives "
                f"{shown(got[bad]) if got is not None and got.shape == want.shape else describe(got)}: exp overflows "
                "(or every term underflows to 0) unless each row's own maximum along `axis` is subtracted before "
                "np.exp (not the minimum, the mean, or the whole array's maximum)")
    return None


def _pair(value):
    if not isinstance(value, tuple | list) or len(value) != 2:
        return None, None
    return as_array(value[0]), as_array(value[1])


def locate_attention(call) -> str | None:
    d_k = 9  # not 4: 1/sqrt(4) is 2/4, which a misplaced ** would also give
    Q, K = np.array([[1.0, 0], [0, 1], [1, 1]]), np.array([[1.0, 0], [0, 2]])  # 3 queries, 2 keys
    out, weights = _pair(call(Q, K, np.eye(2)))
    if weights is None:
        return None  # the pair itself is wrong: the checks' messages say so
    if weights.shape != (3, 2):
        return (f"the scores. With Q (3, 2) and K (2, 2) the weights should be (3, 2), one row per query and one "
                f"column per key (Q Kᵀ); yours are {weights.shape}")
    if np.allclose(weights.sum(axis=0), 1, atol=1e-6) and not np.allclose(weights.sum(axis=1), 1, atol=1e-6):
        return ("the softmax's axis. With 3 queries and 2 keys your weights' columns sum to 1, not their rows: "
                "each query's weights over the keys (the last axis) sum to 1")
    sums = weights.sum(axis=1)
    if np.allclose(sums, 1 / np.sqrt(2), atol=1e-6) and close(weights * np.sqrt(2), exact_softmax(Q @ K.T)):
        return (f"the scale. With 3 queries and 2 keys (d_k = 2) your weights' rows sum to {sums[0]:.4g} = "
                "1/sqrt(d_k), and are the softmax of the unscaled scores divided by sqrt(d_k): the scale divides the "
                "scores Q Kᵀ before the softmax, not the weights after it")
    if not np.allclose(sums, 1, atol=1e-6):
        return (f"the softmax. With 3 queries and 2 keys your weights' rows sum to {shown(weights.sum(axis=1))}, not "
                "1: the weights are the softmax of the scores over the keys (are they the scores themselves?)")
    # One query and two keys whose raw scores QKᵀ are [2, 0]: scaled, [2/3, 0]. V = I: out = weights.
    Q, K = np.zeros((1, d_k)), np.zeros((2, d_k))
    Q[0, 0], K[0, 0] = 2.0, 1.0
    _, weights = _pair(call(Q, K, np.eye(2)))
    where = located_scale(weights[0] if weights is not None and weights.shape == (1, 2) else None, d_k, 2.0,
                           f"With d_k = {d_k} and raw scores QKᵀ = [[2, 0]]")
    if where:
        return where
    _, weights = _pair(call(Q * 1500, K, np.eye(2)))  # raw scores [3000, 0]: scaled, [1000, 0]
    if weights is None or not close(weights, np.array([[1.0, 0.0]]), 1e-6):
        return (f"the softmax's stability. With scores of 1000 (raw QKᵀ = [[3000, 0]], d_k = {d_k}) the weights are "
                f"[[1, 0]]; yours are {shown(weights) if weights is not None else describe(weights)}: subtract each "
                "row's maximum score before exponentiating")
    _, weights = _pair(call(np.concatenate([Q, -Q]) * 1500, K, np.eye(2)))  # scores [1000, 0] and [-1000, 0]
    if weights is None or not close(weights, np.array([[1.0, 0.0], [0.0, 1.0]]), 1e-6):
        return (f"the softmax's shift. With two queries whose scores lie far apart, [1000, 0] and [-1000, 0] (raw "
                f"QKᵀ = ±3000, d_k = {d_k}), the weights are [[1, 0], [0, 1]]; yours are "
                f"{shown(weights) if weights is not None else describe(weights)}: subtract each row's own maximum "
                "(axis=-1, keepdims=True), not the largest score of the whole array")
    Q, K = np.array([[1.0, 0], [0, 1], [1, 1]]), np.array([[1.0, 0], [0, 2]])
    V = np.array([[1.0, 2.0, 3.0], [10.0, 20.0, 30.0]])
    out, weights = _pair(call(Q, K, V))
    scores = Q @ K.T / np.sqrt(2)
    if out is not None and close(out, exact_softmax(scores)) and close(weights, exact_softmax(scores) @ V):
        return ("the pair's order. With V of shape (2, 3) your function returns the weights first and the output "
                "second: return (out, weights), in that order")
    if close(weights, exact_softmax(scores)) and not close(out, weights @ V):
        return (f"the mix. The weights are right, but `out` is not weights @ V: for V = {shown(V)} it should be "
                f"{shown(weights @ V)}; yours is {shown(out) if out is not None else describe(out)}")
    _, weights = _pair(call(np.zeros((3, 2)), np.zeros((3, 2)), np.eye(3)))  # equal scores, no mask
    if (weights is not None and weights.shape == (3, 3) and np.all(np.isfinite(weights))
            and np.allclose(weights.sum(axis=-1), 1, atol=1e-6) and (weights < 1e-9).any()):
        return (f"the mask. With every score equal and no mask given (mask=None), each query should weigh the 3 keys "
                f"alike, 1/3 each; your weights are {shown(weights)}: keys were hidden though no mask was given. "
                "Apply a mask only when one is passed (if mask is not None), never a default one")
    mask = np.tril(np.ones((3, 3), dtype=bool))
    out, weights = _pair(call(np.zeros((3, 2)), np.zeros((3, 2)), np.eye(3), mask=mask))
    where = located_mask(weights, mask, "With every score equal and a causal mask, query i should spread its "
                          "weight evenly over keys 0..i")
    if where and close(out, mask / mask.sum(axis=-1, keepdims=True)):  # V = I: out is the weights the mix used
        return ("the weights returned. With every score equal, a causal mask and V the identity, your output is "
                f"right (out = weights @ V is the masked weights), but the weights you return are {shown(weights)}: "
                "return the weights the output was mixed with, after the mask and the softmax")
    if where:
        return where
    Qb, Kb = np.stack([Q, 2 * Q]), np.stack([K, K[::-1]])  # a batch of 2
    try:
        out, weights = _pair(call(Qb, Kb, np.stack([V, V])))
    except StepFailed as err:
        weights = err
    scores = Qb @ np.swapaxes(Kb, -1, -2)
    want = exact_softmax(scores / np.sqrt(2))
    if not close(weights if isinstance(weights, np.ndarray) else None, want):
        setting = "One set of queries alone is right, but with Q (2, 3, 2) and K (2, 2, 2) (a batch of 2)"
        got = weights if isinstance(weights, np.ndarray) and weights.shape == want.shape else None
        # Axes counted from the front read other axes once a batch axis is in front: which one?
        misreads = (
            ("the keys' transpose", exact_softmax(Qb @ Kb.T / np.sqrt(2)) if Kb.T.shape == Kb.shape else None,
             "transpose only K's last two axes (np.swapaxes(K, -1, -2)), not every axis (K.T)"),
            ("the softmax's axis", exact_softmax(scores / np.sqrt(2), axis=1),
             "the softmax runs over axis 1, the queries once a batch axis is in front: use axis=-1, the keys"),
            ("the scale", exact_softmax(scores / np.sqrt(Qb.shape[1])),
             "d_k read from Q.shape[1], the number of queries once a batch axis is in front: d_k = Q.shape[-1]"),
        )
        for step, theirs, fix in misreads:
            if got is not None and theirs is not None and close(got, theirs):
                return f"{step}. {setting}, your weights are those where {fix}"
        told = f"raised {weights}" if isinstance(weights, StepFailed) else (
            "gave other weights" if got is not None else f"gave weights {what(weights)}")
        return (f"batch axes. {setting} it {told}, where each batch item's weights, shape (2, 3, 2), are its own "
                "queries' against its own keys: count every axis you use from the end (-1, -2), so that axes in "
                "front change nothing (np.swapaxes(K, -1, -2), not K.T; softmax over axis -1; d_k = Q.shape[-1])")
    # A mask per batch item, (3, 1, 3, 3), broadcast over the heads' axis (2 of them): causal, all True, the
    # diagonal. Three items and two heads, so that a mask squeezed to (3, 3, 3) cannot broadcast by chance.
    masks = np.stack([np.tril(np.ones((3, 3), dtype=bool)), np.ones((3, 3), dtype=bool), np.eye(3, dtype=bool)])
    try:
        _, weights = _pair(call(np.zeros((3, 2, 3, 2)), np.zeros((3, 2, 3, 2)), np.eye(3), mask=masks[:, None]))
    except StepFailed as err:
        return (f"the mask's shape. With scores of shape (3, 2, 3, 3) and a mask of shape (3, 1, 3, 3), one per "
                f"batch item, it raised {err}: use the mask as it is given, where it broadcasts against the scores "
                "(np.where(mask, scores, -np.inf)); do not squeeze, reshape or index it")
    return located_mask(weights, np.broadcast_to(masks[:, None], (3, 2, 3, 3)),
                        "With every score equal and a mask of shape (3, 1, 3, 3), one per batch item (causal, all "
                        "True, the diagonal)")


def locate_self_attention(call) -> str | None:
    n = 5  # x (5, 5) = I, so d_model = 5; W_q, W_k (5, 2): d_k = 2; W_v = I: d_v = 5
    eye, zero, uniform = np.eye(n), np.zeros((n, 2)), np.full((n, n), 1 / n)
    causal = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]
    try:  # W_v (5, 3): the output has 3 columns, where the weights have 5
        narrow = as_array(call(eye, zero, zero, eye[:, :3]))
    except StepFailed:
        narrow = None
    if narrow is not None and narrow.shape == (n, n) and np.allclose(narrow.sum(axis=-1), 1, atol=1e-6):
        return (f"the output. With x (5, 5), W_q and W_k (5, 2) and W_v (5, 3) the output should be (5, 3), the "
                f"weights times the values; yours is (5, 5) and its rows sum to 1: it is the attention weights (row 0: "
                f"{shown(narrow[0])}). scaled_dot_product_attention returns the pair (out, weights): self_attention "
                "returns its first item, out, of shape (..., n, d_v)")
    # x = I and W_v = I: V = I, so the output is the weight matrix. W_q = W_k = 0: equal scores.
    got = as_array(call(eye, zero, zero, eye))
    if got is not None and got.shape == (n, 2):
        return ("the values. With W_k of shape (5, 2) and W_v of shape (5, 5) your output has 2 columns, not 5: the "
                "values are V = x @ W_v")
    if got is None or got.shape != (n, n):
        return (f"the output. With x (5, 5), W_q and W_k (5, 2) and W_v (5, 5) the output should be (5, 5); yours "
                f"is {what(got)}")
    if not close(got, uniform):
        if close(got - eye, uniform):
            return ("the output. With x and W_v the identity and W_q = W_k = 0, the output should be the (uniform) "
                    "weights, 0.2 everywhere; yours is that plus x: self_attention returns the attention's output "
                    "alone, with no residual (x + ...) added")
        hidden = np.nan_to_num(got) < 1e-9
        if hidden.any() and np.allclose(np.nan_to_num(got).sum(axis=-1), 1, atol=1e-6):
            pattern = ("causal, row i 1 / (i + 1) on keys 0..i" if close(got, causal)
                       else f"{shown(got)}, with {int(hidden.sum())} keys at weight 0")
            return ("the mask. With no mask given (mask=None), x and W_v the identity and W_q = W_k = 0 (every score "
                    f"equal), every query should weigh every key alike, 0.2 everywhere; your weights are {pattern}: "
                    "a mask was applied though none was given. Apply one only when it is passed (if mask is not "
                    "None), never a causal one by default")
        level = float(np.mean(got))
        if np.all(np.isfinite(got)) and level > 0 and close(got, np.full((n, n), level)):
            lower = np.tril(np.ones((n, n), dtype=bool))
            try:
                masked = as_array(call(eye, zero, zero, eye, mask=lower))
            except StepFailed:
                masked = None
            if masked is not None and masked.shape == (n, n) and masked[0, 0] > 0 and close(
                    masked, lower * masked[0, 0]):
                return ("the softmax's normalisation. With x and W_v the identity and W_q = W_k = 0 (every score "
                        f"equal) the output is the weights, 0.2 everywhere; yours is {level:.3g} everywhere (rows "
                        f"summing to {n * level:.3g}), and with a causal mask {masked[0, 0]:.3g} on every key a "
                        "row may read, however many it reads: the weights are not divided by their sum. Divide "
                        "the exponentials by their sum over the keys (e / e.sum(axis=-1, keepdims=True)), so "
                        "that each row of weights sums to 1")
        if close(got, np.zeros((n, n))):
            return ("the values. With x and W_v the identity and W_q = W_k = 0, the output should be the (uniform) "
                    "weights, 0.2 everywhere; yours is 0: the values are V = x @ W_v")
        return (f"the values. With x and W_v the identity and W_q = W_k = 0 (every score equal), the output should be "
                f"0.2 everywhere; yours is {shown(got)}: the values are V = x @ W_v, mixed by the weights")
    W_q, W_k = zero.copy(), zero.copy()
    W_q[:, 0] = 2.0  # every query is [2, 0]
    W_k[0, 0] = 1.0  # key 0 is [1, 0], the others 0: raw scores [2, 0, 0, 0, 0] in every row
    got = as_array(call(eye, W_q, W_k, eye))
    if got is not None and got.shape == (n, n):
        if close(got, uniform):
            return ("the scores. Queries that all match key 0 should weigh it most, but your weights are uniform: "
                    "the queries are x @ W_q, the keys x @ W_k, and the scores Q Kᵀ (not K Qᵀ)")
        where = located_scale(got[0], 2, 2.0, "With d_model = 5, d_k = 2 (W_q, W_k of shape (5, 2)) and raw scores "
                               "[2, 0, 0, 0, 0] in each row", d_model=n)
        if where:
            return where
    mask = np.tril(np.ones((n, n), dtype=bool))
    got = as_array(call(eye, zero, zero, eye, mask=mask))
    return located_mask(got, mask, "With every score equal and a causal mask (x and W_v the identity, so the "
                        "output is the weights), row i should be 1 / (i + 1) on keys 0..i") or _located_batch(call)


def _located_batch(call) -> str | None:
    """A batch of two sequences that differ (x = I and x = 2 I, every score equal): each item's
    output must be the one it gets alone (0.2 and 0.4 everywhere); a batch flattened into one long
    sequence averages the values of both."""
    n, zero, eye = 5, np.zeros((5, 2)), np.eye(5)
    x = np.stack([eye, 2 * eye])
    try:
        got = as_array(call(x, zero, zero, eye))
        alone = [as_array(call(item.copy(), zero, zero, eye)) for item in x]
    except StepFailed:
        return None
    if got is None or got.shape != (2, n, n) or any(a is None or a.shape != (n, n) for a in alone):
        return None
    if close(got, np.stack(alone)):
        return None
    mixed = ", as if the two were one sequence of 10 tokens" if close(got, np.full((2, n, n), 0.3)) else ""
    return ("the batch axes. With x (2, 5, 5), two sequences (x[0] = I and x[1] = 2 I, every score equal), each "
            f"sequence alone gives {shown(alone[0][0])} and {shown(alone[1][0])} in every row, but in the batch "
            f"yours gives {shown(got[0, 0])} and {shown(got[1, 0])}: each item reads the other's tokens{mixed}. "
            "Each sequence attends only within itself: keep the batch axes in front (scores "
            "Q @ np.swapaxes(K, -1, -2) of shape (..., n, n)), never reshape x into one long sequence")


# ---------------------------------------------------------------- the wrong variants
# Each takes the reference namespace first, then the part's own arguments.


def keys_T(K):
    return np.swapaxes(K, -1, -2)


def scaled_scores(Q, K):
    return Q @ keys_T(K) / np.sqrt(Q.shape[-1])


def naive_softmax(x, axis=-1):
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


def softmax_shifted_by_min(ref, x, axis=-1):
    e = np.exp(x - x.min(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def softmax_shift_in_numerator_only(ref, x, axis=-1):
    return np.exp(x - x.max(axis=axis, keepdims=True)) / np.exp(x).sum(axis=axis, keepdims=True)


def softmax_shifted_by_mean(ref, x, axis=-1):
    e = np.exp(x - x.mean(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def softmax_divided_by_max(ref, x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.max(axis=axis, keepdims=True)


def sdpa_rescaled(factor):
    """The reference with every score multiplied by factor(d_k, d_v)."""

    def variant(ref, Q, K, V, mask=None):
        return ref.scaled_dot_product_attention(Q * factor(Q.shape[-1], V.shape[-1]), K, V, mask=mask)

    return variant


def sdpa_rescaled_by_keys(ref, Q, K, V, mask=None):
    return ref.scaled_dot_product_attention(Q * np.sqrt(Q.shape[-1] / K.shape[-2]), K, V, mask=mask)


def sdpa_softmax_along(axis):
    def variant(ref, Q, K, V, mask=None):
        scores = scaled_scores(Q, K)
        if mask is not None:
            scores = np.where(mask, scores, -np.inf)
        weights = ref.softmax(scores, axis=axis)
        return weights @ V, weights

    return variant


def sdpa_output_scaled(ref, Q, K, V, mask=None):
    # The softmax of the unscaled scores, and the output divided by sqrt(d_k) instead.
    _, weights = ref.scaled_dot_product_attention(Q * np.sqrt(Q.shape[-1]), K, V, mask=mask)
    return weights @ V / np.sqrt(Q.shape[-1]), weights


def sdpa_unstable_softmax(ref, Q, K, V, mask=None):
    scores = scaled_scores(Q, K)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    weights = naive_softmax(scores)
    return weights @ V, weights


def sdpa_mask_after_softmax(ref, Q, K, V, mask=None):
    _, weights = ref.scaled_dot_product_attention(Q, K, V)
    if mask is not None:
        weights = np.where(mask, weights, 0.0)
    return weights @ V, weights


def sdpa_mask_inverted(ref, Q, K, V, mask=None):
    return ref.scaled_dot_product_attention(Q, K, V, mask=None if mask is None else ~mask)


def sdpa_mask_by_boolean_index(ref, Q, K, V, mask=None):
    scores = scaled_scores(Q, K)
    if mask is not None:
        scores[~mask] = -np.inf  # IndexError unless mask has the scores' shape exactly
    weights = ref.softmax(scores, axis=-1)
    return weights @ V, weights


def sdpa_returns_scores(ref, Q, K, V, mask=None):
    scores = scaled_scores(Q, K)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    return ref.softmax(scores, axis=-1) @ V, scores


def sdpa_mask_truthiness(ref, Q, K, V, mask=None):
    # An array of more than one element (every graded mask) has no truth value: ValueError.
    if mask:
        return ref.scaled_dot_product_attention(Q, K, V, mask=mask)
    return ref.scaled_dot_product_attention(Q, K, V)


def sdpa_mask_ignored(ref, Q, K, V, mask=None):
    return ref.scaled_dot_product_attention(Q, K, V)


def sdpa_mask_added(ref, Q, K, V, mask=None):
    # The boolean mask added to the scores as if it were an additive (0 / -inf) one: True
    # counts as +1, so the allowed scores rise by one and nothing is blocked.
    scores = scaled_scores(Q, K)
    if mask is not None:
        scores = scores + mask
    weights = ref.softmax(scores, axis=-1)
    return weights @ V, weights


def sdpa_mask_filled_with_zero(ref, Q, K, V, mask=None):
    scores = scaled_scores(Q, K)
    if mask is not None:
        scores = np.where(mask, scores, 0.0)
    weights = ref.softmax(scores, axis=-1)
    return weights @ V, weights


def sdpa_batched_T(ref, Q, K, V, mask=None):
    # `.T` reverses *all* axes: right for 2-D keys, wrong as soon as there is a batch axis.
    scores = Q @ K.T / np.sqrt(Q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    weights = ref.softmax(scores, axis=-1)
    return weights @ V, weights


def self_attention_rescaled(factor):
    def variant(ref, x, W_q, W_k, W_v, mask=None):
        d_k = W_q.shape[-1]
        return ref.self_attention(x, W_q * factor(d_k, x.shape[-1]), W_k, W_v, mask=mask)

    return variant


def self_attention_qk_swapped(ref, x, W_q, W_k, W_v, mask=None):
    return ref.self_attention(x, W_k, W_q, W_v, mask=mask)


def self_attention_mask_ignored(ref, x, W_q, W_k, W_v, mask=None):
    return ref.self_attention(x, W_q, W_k, W_v)


def self_attention_keys_from_W_q(ref, x, W_q, W_k, W_v, mask=None):
    return ref.self_attention(x, W_q, W_q, W_v, mask=mask)


def self_attention_values_from_W_k(ref, x, W_q, W_k, W_v, mask=None):
    return ref.self_attention(x, W_q, W_k, W_k, mask=mask)


def self_attention_returns_pair(ref, x, W_q, W_k, W_v, mask=None):
    return ref.scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v, mask=mask)


MISCONCEPTIONS = (
    Misconception(
        "unstable_softmax",
        "a softmax that exponentiates the raw scores",
        "exp(1e4) overflows to inf and inf/inf is NaN: subtract each row's maximum before "
        "np.exp (the result is mathematically the same).",
        {
            "softmax": lambda ref, x, axis=-1: naive_softmax(x, axis),
            "scaled_dot_product_attention": sdpa_unstable_softmax,
        },
    ),
    Misconception(
        "softmax_global_max",
        "a softmax shifted by the maximum of the whole array instead of each row's maximum",
        "Shifting by one number for the whole array is only safe when every row is near that number: "
        "a row far below it underflows to 0/0 = NaN. Take the maximum along `axis` with keepdims=True, "
        "so each row is shifted by its own maximum.",
        {"softmax": lambda ref, x, axis=-1: np.exp(x - x.max()) / np.exp(x - x.max()).sum(axis=axis, keepdims=True)},
    ),
    Misconception(
        "softmax_ignores_axis",
        "a softmax that always works along the last axis",
        "Use the `axis` argument in both the max and the sum.",
        {"softmax": lambda ref, x, axis=-1: ref.softmax(x, axis=-1)},
    ),
    Misconception(
        "softmax_axis_zero",
        "a softmax that always works along the first axis (axis=0)",
        "Each row (the last axis by default) must sum to one: take the max and the sum along the "
        "`axis` argument, not along axis 0.",
        {"softmax": lambda ref, x, axis=-1: ref.softmax(x, axis=0)},
    ),
    Misconception(
        "softmax_shift_by_min",
        "a softmax shifted by each row's minimum instead of its maximum",
        "Subtracting the minimum makes every exponent >= 0, so a row whose entries lie far apart still "
        "overflows to inf: subtract the maximum, so every exponent is <= 0 and the largest is exp(0) = 1.",
        {"softmax": softmax_shifted_by_min},
    ),
    Misconception(
        "softmax_shift_in_numerator_only",
        "a softmax whose numerator is shifted by the row's maximum but whose denominator is not",
        "Shift once and use the same shifted exponentials on both sides: e = np.exp(x - x.max(axis=axis, "
        "keepdims=True)), then e / e.sum(axis=axis, keepdims=True).",
        {"softmax": softmax_shift_in_numerator_only},
    ),
    Misconception(
        "softmax_textbook_formula",
        "the textbook formula np.exp(x) / np.sum(np.exp(x)), with no shift and a sum over the whole array",
        "Two changes: sum along `axis` only (keepdims=True), so each row sums to one, and subtract each "
        "row's maximum before np.exp, so large inputs do not overflow.",
        {"softmax": lambda ref, x, axis=-1: np.exp(x) / np.exp(x).sum()},
    ),
    Misconception(
        "softmax_shift_by_mean",
        "a softmax shifted by each row's mean instead of its maximum",
        "Entries far above the mean still overflow in np.exp: subtract the maximum, so every exponent is "
        "<= 0.",
        {"softmax": softmax_shifted_by_mean},
    ),
    Misconception(
        "softmax_divides_by_max",
        "a softmax divided by the row's largest exponential instead of by their sum",
        "Subtracting the maximum is for stability only; to normalise, divide by the sum of the "
        "exponentials along `axis` (keepdims=True), so each row sums to one.",
        {"softmax": softmax_divided_by_max},
    ),
    Misconception(
        "softmax_missing_keepdims",
        "a maximum or a sum along `axis` taken without keepdims=True",
        "Without keepdims the row maxima or sums lose their axis and broadcast against the wrong one: "
        "use keepdims=True in both, `x.max(axis=axis, keepdims=True)` and `e.sum(axis=axis, keepdims=True)`.",
        {
            "softmax": lambda ref, x, axis=-1: (
                np.exp(x - x.max(axis=axis, keepdims=True))
                / np.exp(x - x.max(axis=axis, keepdims=True)).sum(axis=axis)
            )
        },
    ),
    Misconception(
        "softmax_over_everything",
        "a softmax normalised over the whole array instead of along one axis",
        "Sum along `axis` only, so that each row (not the whole array) sums to one.",
        {"softmax": lambda ref, x, axis=-1: np.exp(x - x.max()) / np.exp(x - x.max()).sum()},
    ),
    Misconception(
        "no_scaling",
        "scores that are not divided by sqrt(d_k)",
        "Divide Q @ K^T by np.sqrt(d_k), where d_k = Q.shape[-1], before the softmax.",
        {
            "scaled_dot_product_attention": sdpa_rescaled(lambda d_k, d_v: np.sqrt(d_k)),
            "self_attention": self_attention_rescaled(lambda d_k, d_model: np.sqrt(d_k)),
        },
    ),
    Misconception(
        "scale_by_dk",
        "scores divided by d_k in all instead of its square root (d_k in place of np.sqrt(d_k), or "
        "np.sqrt(d_k) applied twice)",
        "The scores are divided by sqrt(d_k) once: np.sqrt(d_k), not d_k; and where Q (or K) is already "
        "scaled before the scores, do not scale them again.",
        {
            "scaled_dot_product_attention": sdpa_rescaled(lambda d_k, d_v: 1 / np.sqrt(d_k)),
            "self_attention": self_attention_rescaled(lambda d_k, d_model: 1 / np.sqrt(d_k)),
        },
    ),
    Misconception(
        "scale_multiplied",
        "scores multiplied by sqrt(d_k) instead of divided by it",
        "The scale shrinks the scores: Q @ K^T / np.sqrt(d_k) (or times 1 / np.sqrt(d_k)), never times "
        "np.sqrt(d_k).",
        {
            "scaled_dot_product_attention": sdpa_rescaled(lambda d_k, d_v: d_k),
            "self_attention": self_attention_rescaled(lambda d_k, d_model: d_k),
        },
    ),
    Misconception(
        "scale_power_precedence",
        "scores divided by d_k ** 1/2, which Python reads as (d_k ** 1) / 2 = d_k / 2",
        "** binds tighter than /: write d_k ** 0.5, d_k ** (1 / 2) or np.sqrt(d_k).",
        # (For d_k = 4, d_k / 2 is sqrt(d_k): the checks with other widths catch it.)
        {"scaled_dot_product_attention": sdpa_rescaled(lambda d_k, d_v: np.sqrt(d_k) / (d_k / 2))},
    ),
    Misconception(
        "scale_by_n_keys",
        "scores scaled with the number of keys (K.shape[-2]) instead of their width d_k",
        "d_k is the length of each query and key vector, the LAST axis: Q.shape[-1] (or K.shape[-1]), "
        "not K.shape[-2], which counts the keys.",
        {"scaled_dot_product_attention": sdpa_rescaled_by_keys},
    ),
    Misconception(
        "output_scaled_instead_of_scores",
        "the output divided by sqrt(d_k) instead of the scores",
        "The scale belongs inside the softmax: divide Q @ K^T by np.sqrt(d_k) before it, and leave "
        "weights @ V as it is.",
        {"scaled_dot_product_attention": sdpa_output_scaled},
    ),
    Misconception(
        "scale_by_dv",
        "scores scaled with the values' width d_v instead of the keys' width d_k",
        "d_k is the length of the vectors in the dot product: Q.shape[-1], not V.shape[-1].",
        {"scaled_dot_product_attention": sdpa_rescaled(lambda d_k, d_v: np.sqrt(d_k / d_v))},
    ),
    Misconception(
        "scale_by_d_model",
        "scores scaled with sqrt(d_model) instead of sqrt(d_k)",
        "The dot products are between projected vectors of width d_k = W_q.shape[1].",
        {"self_attention": self_attention_rescaled(lambda d_k, d_model: np.sqrt(d_k / d_model))},
    ),
    Misconception(
        "softmax_over_queries",
        "a softmax taken over the queries' axis (-2) instead of the keys' axis (-1)",
        "Each query's weights over the keys must sum to one: softmax along axis=-1.",
        {"scaled_dot_product_attention": sdpa_softmax_along(-2)},
    ),
    Misconception(
        "attention_softmax_axis_zero",
        "the attention's softmax taken along axis 0 instead of the keys' axis (-1)",
        "Axis 0 is the queries' axis without batch axes and a batch axis with them: each query's weights "
        "over the keys must sum to one, so take the softmax along axis=-1.",
        {"scaled_dot_product_attention": sdpa_softmax_along(0)},
    ),
    Misconception(
        "returns_scores_not_weights",
        "the scores returned in place of the weights",
        "Return the softmax of the scores, the weights that multiply V: `return weights @ V, weights`.",
        {"scaled_dot_product_attention": sdpa_returns_scores},
    ),
    Misconception(
        "mask_after_softmax",
        "the mask applied after the softmax (weights zeroed, not renormalised)",
        "Put -inf into the masked scores before the softmax, so the remaining weights "
        "still sum to one.",
        {"scaled_dot_product_attention": sdpa_mask_after_softmax},
    ),
    Misconception(
        "mask_inverted",
        "a mask read the wrong way round",
        "In this course True means 'may attend': keep scores where the mask is True and put "
        "-inf where it is False, e.g. np.where(mask, scores, -np.inf).",
        {"scaled_dot_product_attention": sdpa_mask_inverted},
    ),
    Misconception(
        "mask_boolean_index_no_broadcast",
        "masking with boolean indexing (scores[~mask] = -np.inf), which needs a mask of exactly the scores' shape",
        "A mask may be smaller than the scores and broadcast over the batch axes; boolean indexing does not "
        "broadcast. np.where(mask, scores, -np.inf) does.",
        {"scaled_dot_product_attention": sdpa_mask_by_boolean_index},
    ),
    Misconception(
        "mask_ignored",
        "the mask being ignored",
        "Apply `mask` to the scores (np.where(mask, scores, -np.inf)), and pass it on if "
        "another function does the attending.",
        {
            "scaled_dot_product_attention": sdpa_mask_ignored,
            "self_attention": self_attention_mask_ignored,
        },
    ),
    Misconception(
        "mask_added_to_scores",
        "the boolean mask added to the scores, as if it were an additive mask of 0 and -inf",
        "Added to numbers, True counts as 1 and False as 0, so nothing is blocked. Put -inf where the "
        "mask is False: np.where(mask, scores, -np.inf). (An additive mask would be "
        "np.where(mask, 0.0, -np.inf), added to the scores.)",
        {"scaled_dot_product_attention": sdpa_mask_added},
    ),
    Misconception(
        "mask_truth_tested",
        "`if mask:` used to ask whether a mask was given",
        "An array has no single truth value, so `if mask:` raises ValueError as soon as a mask is passed: "
        "write `if mask is not None:`.",
        {"scaled_dot_product_attention": sdpa_mask_truthiness},
    ),
    Misconception(
        "mask_filled_with_zero",
        "masked scores set to 0 instead of -inf",
        "A score of 0 still gets weight exp(0) = 1 before normalising: use -np.inf (or a very "
        "large negative number) so the masked weight is exactly 0.",
        {"scaled_dot_product_attention": sdpa_mask_filled_with_zero},
    ),
    Misconception(
        "batched_transpose_with_T",
        "K.T used to transpose the keys",
        "`.T` reverses every axis, so it breaks with batch dimensions: use "
        "np.swapaxes(K, -1, -2) (or K.swapaxes(-1, -2)).",
        {"scaled_dot_product_attention": sdpa_batched_T},
    ),
    Misconception(
        "self_attention_returns_pair",
        "self_attention returning the pair (out, weights) instead of out alone",
        "scaled_dot_product_attention returns (out, weights); self_attention returns only the output: "
        "`out, _ = scaled_dot_product_attention(...)`, then `return out`.",
        {"self_attention": self_attention_returns_pair},
    ),
    Misconception(
        "keys_from_W_q",
        "keys made with W_q (K = x @ W_q), so every query is compared with itself",
        "Three projections, three weights: Q = x @ W_q, K = x @ W_k and V = x @ W_v.",
        {"self_attention": self_attention_keys_from_W_q},
    ),
    Misconception(
        "values_from_W_k",
        "values made with W_k instead of W_v",
        "Three projections, three weights: Q = x @ W_q, K = x @ W_k and V = x @ W_v.",
        {"self_attention": self_attention_values_from_W_k},
    ),
    Misconception(
        "query_key_swapped",
        "queries made with W_k and keys with W_q",
        "Q = x @ W_q and K = x @ W_k; swapping them transposes the score matrix.",
        {"self_attention": self_attention_qk_swapped},
    ),
)


UNIT = graded()
