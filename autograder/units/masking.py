"""Unit 02, masking (NumPy): the hidden checks and the misconception catalogue.

The reference is the solution notebook (`solutions/02_masking/masking.ipynb`); the variants
below are wrong on purpose, each one mistake away from the reference.

`looks_causal` is graded differently from the other parts: its inputs are attention
functions (the "oracles" below), and its answer is a verdict. The expected verdict comes from
the reference `looks_causal`; `tests/test_unit_masking.py` checks that the reference agrees
with the known truth (`ORACLE_CASES`) for every one of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine.compare import Tolerance, as_array, compare_arrays, describe
from ..engine.spec import Check, Inputs, Misconception, Part, SampleBug, StepFailed, Unit

EXACT = Tolerance(rtol=0.0, atol=0.0)


@dataclass(frozen=True)
class RequireDtype(Tolerance):
    """A tolerance that also asks for the expected dtype (bool for a mask, integers for ids).

    A check's diagnose sees only (result, expected, inputs, tol), so the one check of a part
    that grades the dtype says so through its tolerance; the part's other checks compare
    values only, so a wrong dtype costs one check, not all of them.
    """


# ---------------------------------------------------------------- what is graded


def graded() -> Unit:
    """The graded parts: each check, what it shows, and its points. What the checks use (their
    inputs, diagnoses and probes) and the catalogue of mistakes they name are below; this is
    called at the end of the module, once all of it is defined."""
    parts = (
        Part(
            "causal_mask",
            locate=locate_causal_mask,
            diagnose=diagnose_mask,
            checks=(
                Check("n_1", "causal_mask(1)", 1, mask_inputs(1), tol=EXACT),
                Check("n_4", "causal_mask(4)", 1, mask_inputs(4), tol=EXACT),
                Check("n_9", "causal_mask(9)", 1, mask_inputs(9), tol=EXACT),
                Check("dtype_bool", "causal_mask(5), whose dtype must be bool", 1, mask_inputs(5),
                      tol=RequireDtype(0.0, 0.0)),
            ),
        ),
        Part(
            "causal_self_attention",
            locate=locate_causal_self_attention,
            diagnose=diagnose_causal_output,
            uses=("softmax", "scaled_dot_product_attention", "self_attention", "causal_mask"),
            checks=(
                Check("unbatched", "x (6, 8) with W_q, W_k (8, 4) and W_v (8, 5)", 1,
                      causal_attention_inputs((), 6, 8, 4, 5)),
                Check("batched", "x (2, 3, 7, 8) with W_q, W_k (8, 4) and W_v (8, 6)", 1,
                      causal_attention_inputs((2, 3), 7, 8, 4, 6)),
                Check("single_token", "a single token: x (3, 1, 6)", 1,
                      causal_attention_inputs((3,), 1, 6, 4, 4)),
                # scores in the thousands: exp overflows unless each row's maximum is subtracted first
                Check("long_sharp", "x (2, 16, 8) with scores in the thousands (sharp weights)", 1,
                      causal_attention_inputs((2,), 16, 8, 8, 3, scale=30.0)),
                Check("inputs_unchanged", "x and the weights are not modified", 1,
                      causal_attention_inputs((2,), 5, 6, 3, 4), kind="unchanged"),
            ),
        ),
        Part(
            "next_token_pairs",
            locate=locate_next_token_pairs,
            diagnose=diagnose_pairs,
            checks=(
                Check("one_sequence", "one sequence of 7 tokens", 1, token_inputs((7,)), tol=EXACT),
                Check("batch", "a batch of 3 sequences of 9 tokens (ids stay integers)", 1, token_inputs((3, 9)),
                      tol=RequireDtype(0.0, 0.0)),
                Check("two_batch_axes", "tokens of shape (2, 3, 6)", 1, token_inputs((2, 3, 6)), tol=EXACT),
                Check("shortest", "a batch of 4 sequences of 2 tokens (one pair each)", 0.5, token_inputs((4, 2)),
                      tol=EXACT),
                # a batch of one keeps its batch axis: np.squeeze (or reshape(-1)) drops it
                Check("batch_of_one", "a batch of one sequence: tokens (1, 8), and each pair keeps the batch axis",
                      0.5, token_inputs((1, 8)), tol=EXACT),
                # two batch axes: a shape set on the caller's array (tokens.shape = (-1, n)) shows
                Check("inputs_unchanged", "the tokens (2, 3, 5) are not modified, nor their shape", 1,
                      token_inputs((2, 3, 5)), kind="unchanged"),
            ),
        ),
        Part(
            "looks_causal",
            diagnose=diagnose_verdict,
            locate=locate_looks_causal,
            # A causal verdict counts only if the detector also catches the plain leak, and a leak
            # verdict only if it also passes plain causal attention: a constant answer earns 0.
            checks=tuple(
                # 6 points shared by the cases (16 shares: 0.375 each, exact in binary floats)
                Check(case.name, case.what, 6 / SHARES * case.share, oracle_inputs(case),
                      requires=("full_attention",) if case.causal else ("causal_attention",))
                for case in ORACLE_CASES
            ),
        ),
    )

    return Unit(
        "02_masking",
        cell_seconds=10,  # NumPy on small arrays: every cell of the exercise runs in well under a second
        reference_cpu_seconds=0.2,  # 0.16 s measured (spec.Unit.reference_cpu_seconds)
        notebook_cpu_seconds=1.5,  # 1.19 s measured (spec.Unit.notebook_cpu_seconds)
        parts=parts,
        misconceptions=MISCONCEPTIONS,
        sample_bug=SampleBug("causal_mask", "np.tril(", "np.triu(", "mask_upper_triangle"),
    )


# ---------------------------------------------------------------- comparing results


def diagnose_mask(result, expected, inputs: Inputs, tol: Tolerance) -> str | None:
    """A causal mask: shape, then which entry is wrong, then (on the dtype check only) bool.

    Our call on 0/1 masks: the contract says boolean, and a 0/1 mask does misbehave
    (`~mask` on integers gives -1 and -2, `x[mask]` picks rows by number), so it loses the
    one dtype check, with a message saying why. The value checks read 0/1 as False/True and
    give credit for the right pattern: the triangle is the idea, the dtype is a detail.
    The dtype is only required when the expected result is itself boolean, so that a
    student's 0/1 mask can still be matched against a variant that returns 0/1 numbers.
    """
    want = np.asarray(expected)
    got = as_array(result)
    if got is None:
        return f"expected a boolean array of shape {want.shape}, got {describe(result)}"
    if got.shape != want.shape:
        return f"the mask has shape {got.shape}, expected {want.shape}"
    if want.dtype.kind == "f" and np.all((want == 0) | np.isneginf(want)):
        # The expected mask is itself additive (a catalogued variant's, when a student's answer
        # is matched against it): only the same additive mask is the same answer.
        return None if np.array_equal(got, want) else "the mask is not this additive mask"
    if np.asarray(result).dtype.kind == "f" and looks_additive(got, want):
        return ("the mask holds 0 where attending is allowed and -inf where it is not: an additive "
                "float mask, to be added to the scores, where the contract asks for a boolean one (True "
                "= may attend); turn one into the other with `additive == 0`, or build the boolean mask "
                "directly with np.tril(np.ones((n, n), dtype=bool))")
    if not np.all(np.isfinite(got)):
        return "the mask holds NaN or inf: it should hold only True and False"
    wrong = np.argwhere((got != 0) != (want != 0))
    if len(wrong) == 0:
        dtype = np.asarray(result).dtype
        if isinstance(tol, RequireDtype) and want.dtype.kind == "b" and dtype.kind != "b":
            return (
                f"the mask's values are right but its dtype is {dtype}, not bool: build it with "
                "dtype=bool or from a comparison (a 0/1 mask misbehaves: ~mask on integers gives "
                "-1 and -2, and x[mask] picks rows by number instead of by position)"
            )
        return None
    i, j = (int(k) for k in wrong[0])
    if want[i, j]:
        if i == j:
            return (f"entry ({i}, {i}) on the diagonal is False: every position must be allowed "
                    "to read itself")
        return f"entry ({i}, {j}) is False, but query {i} may read the earlier key {j}"
    return f"entry ({i}, {j}) is True, but query {i} must not read the later key {j}"


def looks_additive(got, want) -> bool:
    """A float mask of 0 where `want` is True and -inf (or a huge negative number) where it is
    False: the additive form of the right mask. (For n = 1 that is a lone 0.)"""
    blocked = got[~np.asarray(want, dtype=bool)]
    return bool(np.all(got[np.asarray(want, dtype=bool)] == 0) and np.all(blocked <= -1e9))


def diagnose_causal_output(result, expected, inputs: Inputs, tol: Tolerance) -> str | None:
    problem = compare_arrays(result, expected, tol)
    if problem is None or "shape" in problem or "expected an array" in problem:
        return problem
    x, _, _, W_v = inputs.args[:4]
    got = as_array(result)
    own_value = np.asarray(x, dtype=float)[..., :1, :] @ W_v  # what position 0 must output
    if np.all(np.isfinite(got)) and not np.allclose(got[..., :1, :], own_value, rtol=tol.rtol, atol=tol.atol):
        return (problem + "; in particular the output at position 0 is not x[0] @ W_v, yet the "
                "first token may read only itself")
    return problem


def diagnose_pairs(result, expected, inputs: Inputs, tol: Tolerance) -> str | None:
    if not isinstance(result, tuple | list) or len(result) != 2:
        return f"expected the pair `(inputs, targets)`, got {describe(result)}"
    for label, got, want in zip(("`inputs`", "`targets`"), result, expected, strict=True):
        problem = compare_arrays(got, want, tol, label)
        if problem is not None:
            got_array = as_array(got)
            want_shape = np.shape(want)
            if got_array is not None and got_array.ndim > 1 and got_array.shape[:-1] != want_shape[:-1]:
                problem += " (slice the last axis, tokens[..., :-1], so the batch axes stay whole)"
            return problem
        want_dtype = np.asarray(want).dtype
        got_dtype = np.asarray(got).dtype
        if (isinstance(tol, RequireDtype) and np.issubdtype(want_dtype, np.integer)
                and not np.issubdtype(got_dtype, np.integer)):
            return f"{label} has dtype {got_dtype}: token ids must stay integers"
    return None


def diagnose_verdict(result, expected, inputs: Inputs, tol: Tolerance) -> str | None:
    if not isinstance(result, bool | np.bool_):
        return f"`looks_causal` should return True or False, got {describe(result)}"
    if bool(result) == bool(expected):
        return None
    fn = inputs.args[0]
    n = inputs.kwargs.get("n", 8)
    if expected:
        note = getattr(fn, "causal_note", "this function is causal")
        return f"said it leaks, but {note}"
    leak = getattr(fn, "leak", None)
    return f"said causal, but {leak(n) if leak else 'this function leaks'}"


# ---------------------------------------------------------------- inputs


def mask_inputs(n):
    def make(rng):
        return Inputs((int(n),))

    return make


def causal_attention_inputs(batch, n, d_model, d_k, d_v, scale=1.0):
    def make(rng):
        x = rng.normal(0.0, 1.0, (*batch, n, d_model))
        W_q, W_k = (rng.normal(0.0, scale * d_model**-0.5, (d_model, d_k)) for _ in range(2))
        W_v = rng.normal(0.0, d_model**-0.5, (d_model, d_v))
        return Inputs((x, W_q, W_k, W_v))

    return make


def token_inputs(shape, vocab=50):
    def make(rng):
        return Inputs((rng.integers(0, vocab, shape),))

    return make


# ---------------------------------------------------------------- attention functions for looks_causal
# Plain module-level functions (the engine deep-copies a check's inputs; a function copies as
# itself). Each maps x (..., n, d) to (..., n, d) for any n and d, with fixed random weights.
# `leak(n)` says in words how one leaks; `causal_note` why a causal one is fine.


def _matrices(d, seed, count=3):
    rng = np.random.default_rng([seed, d])
    return [rng.normal(0.0, d**-0.5, (d, d)) for _ in range(count)]


def _lower(n, k=0):
    return np.tril(np.ones((n, n), dtype=bool), k=k)


def _attend(x, allowed, seed):
    """Single-head self-attention with fixed weights: (out, values)."""
    x = np.asarray(x, dtype=float)
    W_q, W_k, W_v = _matrices(x.shape[-1], seed)
    q, k, v = x @ W_q, x @ W_k, x @ W_v
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)) @ v, v


def causal_attention(x):
    return _attend(x, _lower(np.shape(x)[-2]), seed=1)[0]


def full_attention(x):
    return _attend(x, None, seed=2)[0]


def next_into_first(x):
    out, v = _attend(x, _lower(np.shape(x)[-2]), seed=3)
    out = out.copy()
    if out.shape[-2] >= 2:
        out[..., 0, :] += 0.5 * v[..., 1, :]
    return out


TINY = 1e-3


def tiny_leak(x):
    out, v = _attend(x, _lower(np.shape(x)[-2]), seed=4)
    out = out.copy()
    out[..., :-1, :] = (1.0 - TINY) * out[..., :-1, :] + TINY * v[..., 1:, :]
    return out


def leak_for_negative_inputs(x):
    x = np.asarray(x, dtype=float)
    out, _ = _attend(x, _lower(x.shape[-2]), seed=5)
    (W_gate,) = _matrices(x.shape[-1], seed=50, count=1)
    out = out.copy()
    out[..., :-1, :] += 0.5 * np.maximum(-x[..., 1:, :], 0.0) @ W_gate
    return out


def causal_with_roundoff(x):
    # Normalising by a norm of the whole sequence and undoing it is a no-op in exact
    # arithmetic; in floats it moves the values by an ulp or so, by an amount that depends
    # on every position. Causal, with round-off differences of ~1e-16.
    x = np.asarray(x, dtype=float)
    scale = np.linalg.norm(x) / 3.0 + 0.1
    return _attend((x / scale) * scale, _lower(x.shape[-2]), seed=6)[0]


def per_position_mlp(x):
    x = np.asarray(x, dtype=float)
    W_1, W_2 = _matrices(x.shape[-1], seed=7, count=2)
    return np.maximum(x @ W_1, 0.0) @ W_2


def last_into_second_last(x):
    out, v = _attend(x, _lower(np.shape(x)[-2]), seed=8)
    out = out.copy()
    if out.shape[-2] >= 2:
        out[..., -2, :] += 0.5 * v[..., -1, :]
    return out


def previous_token(x):
    x = np.asarray(x, dtype=float)
    (W_v,) = _matrices(x.shape[-1], seed=9, count=1)
    v = x @ W_v
    out = np.zeros_like(v)
    out[..., 1:, :] = v[..., :-1, :]
    return out


MIDDLE = (2, 5)  # the output at position 2 reads position 5, and nothing else leaks


def middle_leak(x):
    out, v = _attend(x, _lower(np.shape(x)[-2]), seed=12)
    out = out.copy()
    if out.shape[-2] > MIDDLE[1]:
        out[..., MIDDLE[0], :] += 0.5 * v[..., MIDDLE[1], :]
    return out


def column_leak(x):
    # What leaks into the last column leaves the one before it: each row's sum is unchanged.
    out, v = _attend(x, _lower(np.shape(x)[-2]), seed=13)
    out = out.copy()
    out[..., :-1, -1] += 0.5 * v[..., 1:, -1]
    out[..., :-1, -2] -= 0.5 * v[..., 1:, -1]
    return out


LARGE, SMALL_LEAK = 1e4, 1e-5  # outputs of about 1e4, a leak of 1e-5: 1e-9 of them


def small_leak_on_large_outputs(x):
    out, v = _attend(x, _lower(np.shape(x)[-2]), seed=14)
    out = LARGE * out
    out[..., :-1, :] += SMALL_LEAK * v[..., 1:, :]
    return out


def two_ahead_leak(x):
    out, v = _attend(x, _lower(np.shape(x)[-2]), seed=15)
    out = out.copy()
    out[..., :-2, :] += 0.5 * v[..., 2:, :]
    return out


def first_token(x):
    x = np.asarray(x, dtype=float)
    (W_v,) = _matrices(x.shape[-1], seed=10, count=1)
    v = x @ W_v
    return np.broadcast_to(v[..., :1, :], v.shape).copy()


WIDER = 3  # the output's extra columns: d_out = d + 3


def wider_outputs(x):
    """Causal attention whose values are wider than x (d_out = d + 3), as attn_fn may be."""
    x = np.asarray(x, dtype=float)
    out, _ = _attend(x, _lower(x.shape[-2]), seed=22)
    d = x.shape[-1]
    W_wide = np.random.default_rng([23, d]).normal(0.0, d**-0.5, (d, d + WIDER))
    return out @ W_wide


BUILT_FOR = 10


def mask_built_for_ten(x):
    # A mask that is only right for the first 10 positions: the key columns from 10 on stay
    # allowed for every query. Causal for n <= 10, leaky beyond.
    n = np.shape(x)[-2]
    allowed = np.ones((n, n), dtype=bool)
    m = min(n, BUILT_FOR)
    allowed[:m, :m] = _lower(m)
    return _attend(x, allowed, seed=11)[0]


def _describe(fn, causal_note=None, leak=None):
    fn.causal_note = causal_note
    fn.leak = leak


_describe(causal_attention, causal_note="this is correctly masked causal attention: no output at position i "
          "depends on an input after i")
_describe(causal_with_roundoff, causal_note="this function is causal: when later inputs change, its outputs up to "
          "position i move only by float round-off (about 1e-16); compare with a tiny tolerance such as "
          "atol=1e-9 rather than with exact equality")
_describe(per_position_mlp, causal_note="this per-position MLP never mixes positions: each output depends on its "
          "own position's input only, which is allowed")
_describe(previous_token, causal_note="each output reads only the previous position (position i reads i - 1), "
          "which is allowed: change only the inputs AFTER position i, never position i itself")
_describe(first_token, causal_note="every output reads only position 0, which is allowed; changing position i "
          "itself (or position 0) is not a test of causality")
_describe(wider_outputs, causal_note=f"this causal attention maps x (n, d) to outputs of d + {WIDER} columns, as "
          "attn_fn may (its output is (n, d_out)): the new inputs drawn for positions after i have x's width d, "
          "not the output's")
_describe(full_attention, leak=lambda n: f"this is attention without a mask: position {n - 1} changes the output at "
          "position 0, and every later position changes every earlier one")
_describe(next_into_first, leak=lambda n: "this function lets position 1 change the output at position 0, and "
          "that is its only leak: the split after position 0 (i = 0) is one to try too")
_describe(tiny_leak, leak=lambda n: f"this function puts a weight of {TINY:g} on the next position, so changing "
          "position i + 1 moves the output at position i by about 1e-3: a small leak is still a leak (use a "
          "tolerance near 1e-9)")
_describe(leak_for_negative_inputs, leak=lambda n: "the output at position i reads position i + 1 whenever that "
          "input has a negative entry: a leak that only some inputs reveal (try several random inputs, positive "
          "and negative)")
_describe(last_into_second_last, leak=lambda n: f"this function lets position {n - 1} change the output at position "
          f"{n - 2}, and nothing else: check every position i, not only position 0")
_describe(middle_leak, leak=lambda n: f"this function lets position {MIDDLE[1]} change the output at position "
          f"{MIDDLE[0]}, and nothing else: try every split point i, redrawing every position after it")
_describe(column_leak, leak=lambda n: "this function leaks into the last two output columns only, as much into "
          "one as out of the other, so each row's sum stays the same: compare every entry of the outputs up to i, "
          "not one column or their sums")
_describe(small_leak_on_large_outputs, leak=lambda n: f"its outputs are about {LARGE:g} and a later input moves an "
          f"earlier output by {SMALL_LEAK:g}: np.allclose's default rtol=1e-5 lets a change of 0.1 pass on such "
          "values; compare with rtol=0 and a tiny atol (1e-9)")
_describe(two_ahead_leak, leak=lambda n: "the output at position i reads position i + 2, never i + 1: change every "
          "position after i, not only the next one")
_describe(mask_built_for_ten, leak=lambda n: f"with n={n}, the outputs at positions 0 to 9 read positions 10 and "
          "later: use the `n` (and `d`, `trials`, `seed`) you are given")


class LeakAfterOneTrial:
    """Causal for its first n calls (one trial of a detector: x, then a copy per split point), then
    leaking from the next position: a function with state, as a model whose cache fills up has, so
    that only a detector that runs every trial it is given sees the leak. The engine deep-copies a
    check's inputs, count included, so every detector run starts from 0."""

    causal_note = None

    def __init__(self):
        self.calls = 0

    def __call__(self, x):
        self.calls += 1
        out, v = _attend(x, _lower(np.shape(x)[-2]), seed=18)
        if self.calls > np.shape(x)[-2]:
            out = out.copy()
            out[..., :-1, :] += 0.5 * v[..., 1:, :]
        return out

    @staticmethod
    def leak(n):
        return (f"this function leaks (position i + 1 into position i) only after its first {n} calls, one trial's "
                "worth: run every one of the `trials` you are given, and return True only after the last (is a "
                "`return True` inside the loop over trials?)")


class LeakOnNewInput:
    """Causal while every input it sees keeps the first one's position 0 (the first trial's x and its
    changed copies), leaking from the next position once an input with another position 0 comes (a
    new trial's x): state again, so that only a detector that draws a new x for each trial sees it."""

    causal_note = None

    def __init__(self):
        self.first = None

    def __call__(self, x):
        x = np.asarray(x, dtype=float)
        if self.first is None:
            self.first = x[..., :1, :].copy()
        out, v = _attend(x, _lower(x.shape[-2]), seed=19)
        if x[..., :1, :].shape != self.first.shape or not np.array_equal(x[..., :1, :], self.first):
            out = out.copy()
            out[..., :-1, :] += 0.5 * v[..., 1:, :]
        return out

    @staticmethod
    def leak(n):
        return ("this function leaks (position i + 1 into position i) only on an input other than the first it "
                "sees: each trial draws a new x from the one generator made before the trials (seeding it again "
                "inside the loop repeats the first x)")


FAINT = 1e-7


def faint_leak(x):
    out, v = _attend(x, _lower(np.shape(x)[-2]), seed=20)
    out = out.copy()
    out[..., :-1, :] += FAINT * v[..., 1:, :]
    return out


def squared_leak(x):
    x = np.asarray(x, dtype=float)
    out, _ = _attend(x, _lower(x.shape[-2]), seed=21)
    (W_sq,) = _matrices(x.shape[-1], seed=51, count=1)
    out = out.copy()
    out[..., :-1, :] += 0.5 * (x[..., 1:, :] ** 2) @ W_sq
    return out


_describe(faint_leak, leak=lambda n: f"this function puts a weight of {FAINT:g} on the next position: a billion "
          "times float64's round-off, so a leak all the same (a tolerance of 1e-6 lets it through; use about 1e-9)")
_describe(squared_leak, leak=lambda n: "the output at position i reads the square of position i + 1: a change of "
          "sign there (x[i + 1:] = -x[i + 1:]) moves nothing; redraw the later positions at random")


@dataclass(frozen=True)
class OracleCase:
    name: str
    what: str
    fn: object
    kwargs: dict
    causal: bool  # the known truth
    share: float = 1.0  # of an even share of the part's points (two cases share one: 16 shares in all)


ORACLE_CASES = (
    OracleCase("causal_attention", "causal attention, default n, d and trials", causal_attention, {}, True),
    OracleCase("causal_attention_long", "causal attention with n=12, d=6, trials=2", causal_attention,
               {"n": 12, "d": 6, "trials": 2}, True, share=0.75),
    OracleCase("wider_outputs", f"causal attention whose output has d + {WIDER} columns (d_out is not d)",
               wider_outputs, {}, True, share=0.25),
    OracleCase("full_attention", "attention with no mask at all", full_attention, {}, False),
    OracleCase("next_into_first", "a leak only from position 1 into position 0", next_into_first, {}, False),
    OracleCase("tiny_leak", "a tiny leak: weight 0.001 on the next position", tiny_leak, {}, False, share=0.75),
    OracleCase("faint_leak", "a faint leak: weight 1e-7 on the next position", faint_leak, {}, False, share=0.25),
    OracleCase("input_dependent_leak", "a leak that opens only for some inputs", leak_for_negative_inputs, {},
               False, share=0.25),
    OracleCase("squared_leak", "a leak through the square of the next position (its sign changes nothing)",
               squared_leak, {}, False, share=0.25),
    OracleCase("leak_after_one_trial", "a leak that opens only after one trial's calls (a function with state)",
               LeakAfterOneTrial(), {}, False, share=0.25),
    OracleCase("leak_on_a_new_input", "a leak that opens only on an input other than the first (a function with "
               "state)", LeakOnNewInput(), {}, False, share=0.25),
    OracleCase("roundoff", "a causal function with float round-off noise", causal_with_roundoff, {}, True),
    OracleCase("per_position_mlp", "a per-position MLP (no mixing between positions)", per_position_mlp, {}, True),
    OracleCase("last_into_second_last", "a leak only from the last position into the one before it",
               last_into_second_last, {}, False),
    OracleCase("previous_token", "a previous-token head (position i reads i - 1)", previous_token, {}, True),
    OracleCase("first_token", "a first-token head (every position reads position 0)", first_token, {}, True),
    OracleCase("long_sequence_leak", "a mask that is right only for the first 10 positions, with n=12",
               mask_built_for_ten, {"n": 12}, False),
    OracleCase("middle_leak", "a leak only between two middle positions (2 reads 5)", middle_leak, {}, False),
    OracleCase("column_leak", "a leak between the last two output columns that keeps each row's sum", column_leak,
               {}, False),
    OracleCase("small_leak_on_large_outputs", "a leak of 1e-5 on outputs of about 1e4", small_leak_on_large_outputs,
               {}, False),
    OracleCase("two_ahead_leak", "a leak from two positions ahead only", two_ahead_leak, {}, False),
)


SHARES = sum(case.share for case in ORACLE_CASES)


def oracle_inputs(case: OracleCase):
    def make(rng):
        return Inputs((case.fn,), dict(case.kwargs))

    return make


# ---------------------------------------------------------------- locating the step that is wrong
# Where no catalogued mistake explains a failed part: causal_mask is read cell by cell;
# causal_self_attention is run with x, W_v the identity and W_q = W_k = 0 (equal scores), so its
# output is the weight matrix and only the mask shows; next_token_pairs is given ids that say
# their own position (tokens[b, t] = 100 * b + t), so each output entry shows where it came from.



def _mask_story(allowed: np.ndarray) -> str:
    """What an (n, n) pattern of allowed cells is, in words, by the diagonals it allows."""
    n = allowed.shape[0]
    offsets = [k for k in range(-(n - 1), n) if np.diagonal(allowed, offset=k).all()]
    if not offsets or any(np.diagonal(allowed, offset=k).any() for k in range(-(n - 1), n) if k not in offsets):
        return "a pattern that is not made of whole diagonals"
    low, high = min(offsets), max(offsets)
    if high == 0 and low == -(n - 1):
        return "on and below the diagonal"
    if high == -1:
        return "strictly below the diagonal (each position hidden from itself)"
    if high > 0 and low == -(n - 1):
        return f"up to {high} diagonal{'s' if high > 1 else ''} above the main one as well (the future leaks in)"
    if low >= 0:
        return "on and above the diagonal (the upper triangle: the future, not the past)"
    return f"diagonals {low}..{high}"


def locate_causal_mask(call) -> str | None:
    got = call(4)
    want = np.tril(np.ones((4, 4), dtype=bool))
    array = np.asarray(got) if isinstance(got, np.ndarray) else None
    if array is None or array.shape != (4, 4):
        return f"the shape: causal_mask(4) is a (4, 4) boolean array; yours is {describe(got)}"
    if array.dtype != bool:
        values = sorted({float(v) for v in np.asarray(array, dtype=float).ravel()})
        return (f"the type: causal_mask(4) is boolean (True = may attend); yours holds the numbers {values[:4]}: "
                "np.where(mask, scores, -np.inf) reads any non-zero number as True")
    if not np.array_equal(array, want):
        if np.array_equal(~array, want) or np.array_equal(array, ~want):
            return ("the convention: True marks a position that may be attended (on and below the diagonal); yours "
                    "is True where attention is hidden")
        story = _mask_story(array)
        wrong = array != want
        for axis, name in ((1, "row"), (0, "column")):  # the cells wrong in a few whole rows (or columns) only
            lines = [int(i) for i in np.flatnonzero(wrong.any(axis=axis))]
            if "whole diagonals" not in story or len(lines) >= 4:
                continue
            pick = (lambda m, i: m[i]) if axis == 1 else (lambda m, i: m[:, i])
            right = [i for i in range(4) if i not in lines]
            edge = ""
            if lines in ([3], [0]) and not pick(array, lines[0]).any():
                loop = "range(n - 1) stops at n - 2" if lines == [3] else "range(1, n) starts at 1"
                edge = f" (does the loop over the {name}s reach {name} {lines[0]}? {loop}: go over every one, range(n))"
            return (f"the {name}s: causal_mask(4) is True on and below the diagonal; your {name}s "
                    f"{', '.join(map(str, right))} are right, but {name} {', '.join(map(str, lines))} is "
                    f"{' and '.join(str(pick(array, i).tolist()) for i in lines)}, expected "
                    f"{' and '.join(str(pick(want, i).tolist()) for i in lines)}{edge}")
        return f"the cells: causal_mask(4) is True on and below the diagonal; yours is True {story}"
    return None


def locate_causal_self_attention(call) -> str | None:
    n, d_model = 4, 5  # not equal, so that n read from the wrong axis shows
    x, zero, eye = np.eye(n, d_model), np.zeros((d_model, 2)), np.eye(d_model)
    try:
        got = as_array(call(x, zero, zero, eye))  # V = x: the output's first n columns are the weights
    except StepFailed as err:
        want = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]
        try:  # right with a batch axis in front, wrong without: the first axis taken for the batch
            batched = as_array(call(np.stack([x, 2 * x]), zero, zero, eye))
        except StepFailed:
            batched = None
        if batched is not None and batched.shape == (2, n, d_model) and np.allclose(
                batched[..., :n], np.stack([want, 2 * want]), atol=1e-9):
            return (f"batch axes: with x (2, 4, 5), a batch of two sequences, yours is right, but one sequence with no "
                    f"batch axis, x (4, 5), raised {err}: x may have no batch axis (or several), so do not loop over "
                    "(or index) its first axis as the batch; work on the last two axes, the positions (-2) and the "
                    "features (-1), whatever is in front of them")
        if "shape" not in str(err) and "broadcast" not in str(err):
            raise
        return (f"the mask's size: for x (4, 5), 4 positions of d_model 5, the mask is (4, 4), n = x.shape[-2] (not "
                f"x.shape[-1]); yours raised {err}")
    if got is not None and got.shape == (n, 2):
        return ("the values: with W_k of shape (5, 2) and W_v of shape (5, 5) your output has 2 columns, W_k's width, "
                "not W_v's 5: the values are x @ W_v")
    W_v3 = np.eye(d_model)[:, :3]
    try:
        narrow = as_array(call(x, zero, zero, W_v3))
    except StepFailed:
        narrow = None
    if narrow is not None and narrow.shape == (n, d_model):
        return ("the values: with W_v of shape (5, 3) the output should have 3 columns, one per column of W_v; yours "
                "has 5, x's width: the values are x @ W_v, not x itself")
    if narrow is not None and narrow.shape == (n, n) and np.allclose(np.nan_to_num(narrow).sum(axis=-1), 1, atol=1e-6):
        return (f"the output: x (4, 5) with W_v of shape (5, 3) gives (4, 3), the weights times the values; yours is "
                f"(4, 4) and its rows sum to 1: it is the attention weights (row 1: "
                f"{np.round(narrow[1], 3).tolist()}). scaled_dot_product_attention returns the pair (out, weights): "
                "causal_self_attention returns out, of shape (..., n, d_v)")
    got = got[:, :n] if got is not None and got.shape == (n, d_model) else got
    want = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]
    if got is None or got.shape != (n, n):
        return (f"the output: x (4, 5) with W_q, W_k (5, 2) and W_v (5, 5) gives (4, 5); yours is "
                f"{got.shape if got is not None else describe(got)}")
    if np.allclose(got, want, atol=1e-9):
        try:
            batched = as_array(call(np.stack([x, 2 * x]), zero, zero, eye))
        except StepFailed as err:
            batched = err
        if not isinstance(batched, np.ndarray) or batched.shape != (2, n, d_model) or not np.allclose(
                batched[..., :n], np.stack([want, 2 * want]), atol=1e-9):
            batch = _located_batch_axis(call, batched, x, zero, eye, want)
            # equal scores hide the scale: a wrong one is the first step to go wrong, and the batch axis the second
            try:
                scale = (_located_score_order(call, x, eye) or _located_scale(call, x, eye)
                         or _located_stability(call, x, eye))
            except StepFailed:
                scale = None
            if scale:
                batch = batch.replace("one sequence is right", "one sequence with every score equal is right")
                return f"{scale}. A second step is wrong as well, {batch}"
            return batch
        return (_located_score_order(call, x, eye) or _located_scale(call, x, eye)
                or _located_scale_with_batch_axes(call, x, eye)
                or _located_stability(call, x, eye))
    if np.allclose(got, np.full((n, n), 1 / n), atol=1e-9):
        return ("the mask: with every score equal, position t should average positions 0..t; yours averages all "
                "of them, as if there were no mask")
    allowed = np.nan_to_num(got) > 1e-9
    if not np.array_equal(allowed, want > 0):
        empty = [t for t in range(n) if not allowed[t].any()]
        return (f"the mask: with every score equal, position t attends to 0..t; yours attends {_mask_story(allowed)}"
                + (f" (position {empty[0]} attends to nothing: its row is NaN or 0)" if empty else ""))
    weights = np.nan_to_num(got)
    if not np.allclose(weights.sum(axis=-1), 1, atol=1e-9) and np.allclose(weights.sum(axis=-2), 1, atol=1e-9):
        return (f"the softmax's axis: with every score equal, row t should be 1 / (t + 1) on 0..t; your columns sum "
                f"to 1 and your rows to {np.round(weights.sum(axis=-1), 3).tolist()}: the softmax normalised over the "
                "queries (axis -2 or 0); each query's weights over the keys, the last axis, should sum to 1")
    sums = weights.sum(axis=-1)
    if (not np.allclose(sums, 1, atol=1e-9) and not np.allclose(sums, np.arange(1, n + 1) / n, atol=1e-9)
            and np.all(sums > 0) and np.allclose(weights / sums[:, None], want, atol=1e-9)):
        return (f"the softmax's normalisation: with every score equal, row t should be 1 / (t + 1) on 0..t; yours "
                f"hides the right positions and weighs the others alike, but its rows sum to "
                f"{np.round(sums, 3).tolist()}, not 1: divide the exponentials by their sum along the keys (e / "
                "e.sum(axis=-1, keepdims=True)), so that each row of weights sums to 1")
    if not np.allclose(np.nan_to_num(got).sum(axis=-1), 1, atol=1e-9):
        return ("the mask: with every score equal the rows should sum to 1 (1 / (t + 1) on 0..t); yours sum to "
                f"{np.round(np.nan_to_num(got).sum(axis=-1), 3).tolist()}: hide the future in the scores (-inf) "
                "before the softmax, not in the weights after it")
    return (f"the mask: with every score equal, row t should be 1 / (t + 1) on positions 0..t; yours is "
            f"{np.round(got, 3).tolist()}")


def _located_batch_axis(call, batched, x, zero, eye, want) -> str:
    """One sequence is right with every score equal, but x (2, 4, 5) is not (`batched`: the output,
    or the StepFailed it raised): which batch step, in words."""
    n, d_model = x.shape
    told = f" (it raised {batched})" if isinstance(batched, StepFailed) else ""
    if isinstance(batched, np.ndarray) and batched.shape == (2, n, d_model):
        # V = x: item b's columns 0..n-1 are its weights times b + 1; a weight on a column
        # after t (or beyond n) can only come from the other item's tokens, as one sequence is right
        outside = (np.abs(np.nan_to_num(batched[..., :n]))[:, want == 0] > 1e-9).any() or (
            np.abs(np.nan_to_num(batched[..., n:])) > 1e-9).any()
        if outside:
            return ("the batch axis: one sequence is right, but with x (2, 4, 5), two sequences (x[0] the "
                    "identity and x[1] twice it, every score equal), position t of a sequence reads more "
                    f"than its own positions 0..t: row 0 of each gives {np.round(batched[0, 0], 3).tolist()} "
                    f"and {np.round(batched[1, 0], 3).tolist()}, the other sequence's tokens mixed in. "
                    "Each sequence attends only within itself: keep the batch axes in front (scores of "
                    "shape (..., n, n), n = x.shape[-2]), never reshape x into one long sequence")
    if isinstance(batched, StepFailed):
        try:  # a batch as long as the sequence: n read from either axis is 4 here
            call(np.stack([x] * n), zero, zero, eye)
        except StepFailed:  # fails all the same: not the mask's size, the scores' shapes
            return (f"the keys' transpose: one sequence is right, but with x (2, 4, 5) it raised {batched}, "
                    f"and still does with a batch of 4: K.T reverses every axis of a batched K (2, 4, 2), "
                    "batch included; swap only the last two, np.swapaxes(K, -1, -2), so that the scores are "
                    "(2, 4, 4)")
    return (f"the batch axis: one sequence is right, but with x (2, 4, 5) the mask is still (n, n), n = "
            f"x.shape[-2] = 4 (not x.shape[0]), and it must broadcast over the batch (np.where(mask, scores, "
            f"-np.inf), not boolean indexing){told}")


SCORE = 2.0  # position 1's query and key: (sqrt 2, 0), so its score with itself is 2 and with position 0, 0


def _located_score_order(call, x, eye) -> str | None:
    """The scores' order: position 1's query and position 0's key are (sqrt 2, 0), every other one 0,
    so Q Kᵀ scores 2 at (1, 0), below the diagonal, and K Qᵀ at (0, 1), where the mask hides it
    (row 1 uniform). With the roles swapped (position 0's query, position 1's key) it is the other
    way round, which tells K Qᵀ from queries made with W_k."""
    n, d_model = x.shape
    rows = []
    for query_at, key_at in ((1, 0), (0, 1)):
        W_q, W_k = np.zeros((d_model, 2)), np.zeros((d_model, 2))
        W_q[query_at, 0] = W_k[key_at, 0] = np.sqrt(SCORE)
        got = as_array(call(x, W_q, W_k, eye))
        if got is None or got.shape != (n, d_model):
            return None
        rows.append(got[1, :2])
    high = 1 / (1 + np.exp(-SCORE / np.sqrt(2)))
    if np.allclose(rows[0], 0.5, atol=1e-9) and np.allclose(rows[1], [high, 1 - high], atol=1e-6):
        return (f"the scores. x (4, 5) with W_q giving only position 1 a query, (sqrt 2, 0), and W_k giving only "
                f"position 0 a key, (sqrt 2, 0): Q Kᵀ scores 2 at row 1, column 0 (query 1 against key 0), so "
                f"position 1 should weigh position 0 by {high:.4f}; your row 1 is "
                f"{np.round(rows[0], 4).tolist()}, as K Qᵀ gives (its row t compares key t with every query, and "
                "the 2 lands at row 0, column 1, where the mask hides it). The scores are Q Kᵀ: q @ "
                "np.swapaxes(k, -1, -2), each query's row against every key")
    return None


def _located_scale(call, x, eye) -> str | None:
    """The scale, read from one weight: position 1 scores 2 on itself and 0 on position 0, so its
    weight w on itself gives what the scores were divided by, SCORE / ln(w / (1 - w))."""
    n, d_model = x.shape
    W = np.zeros((d_model, 2))
    W[1, 0] = np.sqrt(SCORE)
    got = as_array(call(x, W, W, eye))
    if got is None or got.shape != (n, d_model):
        return None
    w = float(got[1, 1])
    want = 1 / (1 + np.exp(-SCORE / np.sqrt(2)))
    if abs(w - want) < 1e-9 or not 0 < w < 1 or abs(got[1, 0] + w - 1) > 1e-6:
        return None
    divisor = SCORE / np.log(w / (1 - w))
    named = {"sqrt(d_model) = sqrt(5)": np.sqrt(5), "d_model = 5": 5.0, "2: d_k = 2 (or sqrt(n) = sqrt(4))": 2.0,
             "1 (no scale)": 1.0, "1 / sqrt(2): multiplied by sqrt(d_k), not divided": 1 / np.sqrt(2),
             "n = 4": 4.0}
    read = next((name for name, value in named.items() if abs(divisor - value) < 1e-6), f"{divisor:.4g}")
    return (f"the scale: x (4, 5) with W_q = W_k (5, 2) giving position 1 a score of {SCORE:g} on itself and 0 on "
            f"position 0: its weight on itself is {w:.4f}, which says the scores were divided by {read}; they are "
            f"divided by sqrt(d_k) = sqrt(2), d_k being the width of the keys (W_k.shape[-1]), giving {want:.4f}")


def _located_stability(call, x, eye) -> str | None:
    """Scores in the thousands (position 1 scores 2000 on itself, 0 on position 0): the weights are
    [1, 0] there, unless exp overflows for want of each row's maximum subtracted first."""
    n, d_model = x.shape
    W = np.zeros((d_model, 2))
    W[1, 0] = np.sqrt(2000.0 * np.sqrt(2))  # scaled by sqrt(d_k) = sqrt(2): a score of 2000
    got = as_array(call(x, W, W, eye))
    if got is None or got.shape != (n, d_model):
        return None
    if np.all(np.isfinite(got[1, :2])) and np.allclose(got[1, :2], [0.0, 1.0], atol=1e-9):
        return None
    return (f"the softmax's stability: position 1 scores 2000 on itself and 0 on position 0, so its weights are "
            f"[0, 1]; yours are {np.round(got[1, :2], 3).tolist()}: exp(2000) overflows to inf (and inf / inf is "
            "NaN) unless each row's largest score is subtracted before np.exp")


def _located_scale_with_batch_axes(call, x, eye) -> str | None:
    """The scale as _located_scale reads it, with two batch axes (2, 3) in front: d_k read from an
    axis counted from the front is right for one sequence and wrong here."""
    n, d_model = x.shape
    W = np.zeros((d_model, 2))
    W[1, 0] = np.sqrt(SCORE)
    try:
        got = as_array(call(np.broadcast_to(x, (2, 3, n, d_model)).copy(), W, W, eye))
    except StepFailed:
        return None
    if got is None or got.shape != (2, 3, n, d_model):
        return None
    w = float(got[0, 0, 1, 1])
    want = 1 / (1 + np.exp(-SCORE / np.sqrt(2)))
    if abs(w - want) < 1e-9 or not 0 < w < 1:
        return None
    divisor = SCORE / np.log(w / (1 - w))
    named = {"sqrt(3), the size of axis 1 (counted from the front)": np.sqrt(3),
             "sqrt(4), the number of positions": 2.0, "sqrt(5) = sqrt(d_model)": np.sqrt(5)}
    read = next((name for name, value in named.items() if abs(divisor - value) < 1e-6), f"{divisor:.4g}")
    return (f"the scale with batch axes: one sequence is right, but with x (2, 3, 4, 5), two batch axes in front, "
            f"position 1's weight on itself is {w:.4f}, which says the scores were divided by {read}, not "
            "sqrt(d_k) = sqrt(2): read d_k from the end (q.shape[-1], or W_k.shape[-1]), whatever axes are in front")


def locate_next_token_pairs(call) -> str | None:
    tokens = 100 * np.arange(2)[:, None] + np.arange(5)[None, :]  # tokens[b, t] = 100 b + t
    got = call(tokens.copy())
    if not isinstance(got, tuple | list) or len(got) != 2:
        return f"the result: next_token_pairs returns the pair (inputs, targets); yours is {describe(got)}"
    inputs, targets = (np.asarray(a) if isinstance(a, np.ndarray) else None for a in got)
    want_in, want_out = tokens[:, :-1], tokens[:, 1:]
    for name, array, want in (("inputs", inputs, want_in), ("targets", targets, want_out)):
        if array is None or array.shape != want.shape:
            return (f"the {name}' shape: tokens (2, 5) give {name} (2, 4), the last axis one shorter; yours are "
                    f"{array.shape if array is not None else describe(array)}")
        if not np.array_equal(array, want):
            rows = {int(v) // 100 for v in np.asarray(array, dtype=float).ravel()}
            first = [int(v) % 100 for v in np.asarray(array[0], dtype=float)]
            if len(rows) > 1 and any(len({int(v) // 100 for v in row}) > 1 for row in array):
                return (f"the {name}: each row should come from one sequence; yours mix sequences (slice the last "
                        "axis, tokens[..., :-1] and tokens[..., 1:], not the first)")
            return (f"the {name}: for tokens [0, 1, 2, 3, 4] the {name} are {want[0].tolist()}; yours are positions "
                    f"{first}")
        if array.dtype.kind not in "iu":
            return f"the {name}' type: token ids stay integers; yours are {array.dtype}"
    deep = 1000 * np.arange(2)[:, None, None] + tokens[None]  # (2, 2, 5): two batch axes
    got = call(deep.copy())
    if not isinstance(got, tuple | list) or len(got) != 2 or not all(
            isinstance(a, np.ndarray) and a.shape == w.shape and np.array_equal(a, w)
            for a, w in zip(got, (deep[..., :-1], deep[..., 1:]), strict=True)):
        return ("batch axes: tokens (2, 5) are right, but tokens (2, 2, 5) should give (2, 2, 4) inputs and targets: "
                "slice the last axis, tokens[..., :-1] and tokens[..., 1:], whatever the axes before it")
    return None


# ---------------------------------------------------------------- the wrong variants
# Each takes the reference namespace first, then the part's own arguments.


# looks_causal: every attn_fn a detector is given runs on the grader's side (a callback), so the
# grader sees each input the detector tries. The calls are read against the notebook's pattern (per
# trial: x, then x with every row after i redrawn, for i = 0..n-2; or one later row at a time, as
# valid); where they follow it, leaks of a known reach, a faint one and round-off tell the
# comparison, its tolerance and the verdict apart.


def leak_from_next(x):
    """Causal attention, but output i also reads input i + 1 (for every i): a leak every split shows, in output i."""
    out, v = _attend(x, _lower(np.shape(x)[-2]), seed=16)
    out = out.copy()
    out[..., :-1, :] += 0.5 * v[..., 1:, :]
    return out


def faint_leak(x):
    """Causal attention with a weight of 1e-6 on the next position: far above round-off, far below 1e-3."""
    out, v = _attend(x, _lower(np.shape(x)[-2]), seed=17)
    out = out.copy()
    out[..., :-1, :] = (1.0 - 1e-6) * out[..., :-1, :] + 1e-6 * v[..., 1:, :]
    return out


DETECTOR_SETTING = {"n": 6, "d": 3, "trials": 3, "seed": 11}
OTHER_DESIGN = "another design"  # calls this reading does not follow: nothing is located


def _recorded(call, fn, **setting):
    """(the detector's verdict, the inputs it passed to attn_fn, as it passed them)."""
    seen = []

    def attn_fn(x):
        x = np.array(x, dtype=float)  # a copy: what the detector does to x afterwards is not this call's
        seen.append(x.copy())
        return fn(x)

    return call(attn_fn, **setting), seen


def _trials_of(seen, stopped: bool):
    """The calls cut into trials, [(x, [changed copies])]: a call that keeps row 0 of the trial's x is a
    copy; one that keeps nothing is a copy too where the next call keeps row 0 again (x[i:] redrawn
    at i = 0), or where it is the last call of a detector that `stopped` at a leak (only a copy is
    compared); otherwise it starts a trial."""
    trials = []
    for k, x in enumerate(seen):
        if trials:
            base = trials[-1][0]
            follows = k + 1 < len(seen) and np.array_equal(seen[k + 1][0], base[0])
            if not np.array_equal(x, base) and (np.array_equal(x[0], base[0]) or follows
                                                or (stopped and k == len(seen) - 1)):
                trials[-1][1].append(x)
                continue
        trials.append((x, []))
    return trials


def _rows(rows) -> str:
    rows = sorted(rows)
    if len(rows) > 2 and rows == list(range(rows[0], rows[-1] + 1)):
        return f"rows {rows[0]}..{rows[-1]}"
    return ("row " if len(rows) == 1 else "rows ") + ", ".join(map(str, rows)) if rows else "no row"


def _calls_story(seen, n, d, trials, stopped: bool) -> str | None:
    """The step at which the detector's calls on causal attention depart from the contract's pattern,
    in a sentence, or None. `stopped`: it answered False, so its calls may end early."""
    setting = f"With n={n}, d={d}, trials={trials}"
    if not seen:
        return (f"the calls. {setting} your detector never called attn_fn: call it on x and on each changed copy, "
                "and compare the outputs")
    odd = next((x for x in seen if x.shape != (n, d)), None)
    if odd is not None:
        swapped = " (n and d swapped)" if odd.shape == (d, n) else ""
        return (f"the inputs' shape. {setting} attn_fn should get x of shape (n, d) = ({n}, {d}); yours passed "
                f"{odd.shape}{swapped}: build x with the n and d you are given")
    cut = _trials_of(seen, stopped)
    if any(((c != x).any(axis=-1) != (c != x).all(axis=-1)).any() for x, copies in cut for c in copies):
        return OTHER_DESIGN  # some entries of a row changed and others not: a design of its own (finite differences?)
    if all(np.ptp(x) == 0 for x, _ in cut):
        return (f"the inputs. {setting} your detector's x holds one value everywhere ({cut[0][0].flat[0]:g}): some "
                "leaks open only for some inputs; draw each trial's x at random (rng.normal, both signs)")
    if any(np.array_equal(x, earlier) for t, (x, _) in enumerate(cut) for earlier, _ in cut[:t]):
        return (f"the generator. {setting} your detector tried the same x in more than one trial: make the generator "
                "once, before the trials (np.random.default_rng(seed) inside the loop starts it afresh each time)")
    # A changed copy keeps x's rows up to some i and changes either every row after i (the notebook's
    # way) or one row j > 0 alone (as valid: a leak from any later row shows); any other is wrong.
    suffixes = [frozenset(range(i + 1, n)) for i in range(n - 1)]
    singles = [frozenset({j}) for j in range(1, n)]
    for t, (x, copies) in enumerate(cut):
        changed = [frozenset(np.flatnonzero((c != x).any(axis=-1)).tolist()) for c in copies]
        last = stopped and t == len(cut) - 1  # a detector that stopped may end a trial early
        for k, rows in enumerate(changed):
            if rows in suffixes or rows in singles:
                continue
            if 0 in rows and k == len(changed) - 1 and last and k > 0 and \
                    (set(changed[:k]) >= set(suffixes) or set(changed[:k]) >= set(singles)):
                return (f"the baseline. {setting}, after trial {t + 1}'s splits your detector compared a new input "
                        f"with the output for trial {t + 1}'s x: each trial calls attn_fn on its own x first, and "
                        "compares its changed copies with that output")
            return (f"the rows you change. {setting}, in trial {t + 1} each changed copy of x should keep its rows "
                    f"0..i and redraw the rows after i (for i = 0..{n - 2} in turn); your call {k + 2} of that trial "
                    f"changed {_rows(rows)}{' of x' if rows else ' (x unchanged)'}"
                    + (": position i itself must stay as it was" if 0 in rows else ""))
        size = max((float(np.abs(c - x).max()) for c in copies), default=1.0)
        if size < 1e-2:
            return (f"the size of the change. {setting} your changes move the inputs by at most {size:.1g}: a "
                    "leak's effect on the outputs then shrinks towards round-off; give the positions after i "
                    "fresh random values (rng.normal)")
        if len(changed) >= n - 1 and len(set(changed)) == 1:  # one copy per split, each the same change
            return (f"the rows you change. {setting}, in trial {t + 1} your detector made {len(changed)} changed "
                    f"copies of x, one per split i, but every one changed the same {_rows(changed[0])}: for the "
                    "split after i, redraw the rows after i (x[i + 1:]), which differ from one i to the next")
        tried = sorted({min(rows) - 1 for rows in changed})
        if not last and tried != list(range(n - 1)):
            missing = sorted(set(range(n - 1)) - set(tried))
            return (f"the split points. {setting} your detector tried i = {tried} (each time changing the rows after "
                    f"i) and never i = {missing}: every i from 0 to n - 2 = {n - 2} is a split to try "
                    "(for i in range(n - 1))")
    if not stopped and len(cut) != trials:
        ends = ": does a return (or break) inside the trial loop end it after the first?" if len(cut) == 1 else ""
        return (f"the trials. {setting} your detector tried {len(cut)} random input{'s' * (len(cut) != 1)}, where "
                f"trials={trials} asks for {trials}{ends}")
    return None


def locate_looks_causal(call) -> str | None:
    n, d, trials = DETECTOR_SETTING["n"], DETECTOR_SETTING["d"], DETECTOR_SETTING["trials"]
    verdict, seen = _recorded(call, causal_attention, **DETECTOR_SETTING)
    stopped = verdict is False or verdict is np.False_
    story = _calls_story(seen, n, d, trials, stopped)
    if story is not None:
        return None if story is OTHER_DESIGN else story
    setting = f"Your detector's calls of attn_fn look right (with n={n}, d={d}, trials={trials})"
    again = _recorded(call, causal_attention, **DETECTOR_SETTING)[1]
    if len(again) != len(seen) or not all(np.array_equal(a, b) for a, b in zip(again, seen, strict=False)):
        return (f"the generator. {setting}, but two runs with seed={DETECTOR_SETTING['seed']} tried different "
                "inputs: draw every random number from one np.random.default_rng(seed), not from np.random's "
                "global generator")
    other = _recorded(call, causal_attention, **{**DETECTOR_SETTING, "seed": DETECTOR_SETTING["seed"] + 1})[1]
    if len(other) == len(seen) and all(np.array_equal(a, b) for a, b in zip(other, seen, strict=False)):
        return (f"the seed. {setting}, but seed={DETECTOR_SETTING['seed']} and seed={DETECTOR_SETTING['seed'] + 1} "
                "tried the same inputs: make the generator with the seed you are given")
    if stopped and len(seen) == n * trials:
        return (f"the verdict. {setting} and sees no change in causal attention, yet answers False: return True when "
                "no split of any trial changed an output up to i, False as soon as one did")
    if stopped:
        return (f"the comparison. {setting}, yet it finds a leak in causal attention (after its call "
                f"{len(seen)}): compare outputs 0..i only (out[:i + 1]) with the same rows of the output for x, with "
                "a tolerance for round-off only (atol about 1e-9)")
    try:
        wide = call(wider_outputs, **DETECTOR_SETTING)
    except StepFailed as err:
        wide = err
    if wide is not True and wide is not np.True_:
        told = f"raised {wide}" if isinstance(wide, StepFailed) else f"answered {describe(wide)}"
        return (f"the width of the new inputs. {setting}, but given causal attention whose output has d + {WIDER} "
                f"columns (attn_fn maps x (n, d) to (n, d_out), and d_out may differ from d) it {told}: the inputs "
                "drawn for the positions after i have x's width d (x.shape[-1]), whatever the output's width")
    caught = {fn.__name__: call(fn, **DETECTOR_SETTING) in (False, np.False_)
              for fn in (next_into_first, last_into_second_last, leak_from_next, faint_leak, causal_with_roundoff)}
    if caught.pop("causal_with_roundoff"):
        return (f"the comparison's tolerance. {setting}, yet it finds a leak in a causal function whose outputs "
                "move by float round-off only (about 1e-16): compare with a tiny tolerance, np.allclose(a, b, rtol=0, "
                "atol=1e-9), not exact equality")
    if all(caught.values()):
        return None
    if not caught.pop("faint_leak") and all(caught.values()):
        return (f"the comparison's tolerance. {setting}, and it finds leaks of weight 0.5, but misses one of weight "
                "1e-6 (it moves earlier outputs by about 1e-6): only round-off should pass, np.allclose(a, b, rtol=0, "
                "atol=1e-9)")
    if caught["leak_from_next"]:
        missed = [f"{what} (it shows at split i = {i} only)" for name, what, i in (
            ("next_into_first", "input 1 read by output 0", 0),
            ("last_into_second_last", f"input {n - 1} read by output {n - 2}", n - 2)) if not caught[name]]
        return (f"the verdict. {setting}, and it finds a leak that shows at every split, but misses "
                f"{' and '.join(missed)}: answer False as soon as any split of any trial shows a change; a later "
                "split must not set the answer back to True, and the splits combine with any, not all")
    return (f"the comparison. {setting}, but misses a leak of input i + 1 into output i (for every i), which "
            "every split shows in output i itself: compare every output up to and including i, out[:i + 1]")


def mask_variant(make):
    return lambda ref, n: make(n)


def self_attention_with(make_mask):
    def variant(ref, x, W_q, W_k, W_v):
        return ref.self_attention(x, W_q, W_k, W_v, mask=make_mask(ref, x.shape[-2]))

    return variant


def csa_mask_forgotten(ref, x, W_q, W_k, W_v):
    return ref.self_attention(x, W_q, W_k, W_v)


def _scores(x, W_q, W_k):
    Q, K = x @ W_q, x @ W_k
    return Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])


def csa_length_from_first_axis(ref, x, W_q, W_k, W_v):
    return ref.self_attention(x, W_q, W_k, W_v, mask=ref.causal_mask(len(x)))


def csa_length_from_last_axis(ref, x, W_q, W_k, W_v):
    return ref.self_attention(x, W_q, W_k, W_v, mask=ref.causal_mask(x.shape[-1]))


def csa_mask_by_boolean_index(ref, x, W_q, W_k, W_v):
    scores = _scores(x, W_q, W_k)
    scores[~ref.causal_mask(x.shape[-2])] = -np.inf  # IndexError unless the scores are (n, n)
    return ref.softmax(scores, axis=-1) @ (x @ W_v)


def csa_mask_added(ref, x, W_q, W_k, W_v):
    mask = ref.causal_mask(x.shape[-2])
    weights = ref.softmax(_scores(x, W_q, W_k) + mask.astype(float), axis=-1)
    return weights @ (x @ W_v)


def csa_mask_filled_with_zero(ref, x, W_q, W_k, W_v):
    mask = ref.causal_mask(x.shape[-2])
    weights = ref.softmax(np.where(mask, _scores(x, W_q, W_k), 0.0), axis=-1)
    return weights @ (x @ W_v)


def csa_mask_after_softmax(ref, x, W_q, W_k, W_v):
    mask = ref.causal_mask(x.shape[-2])
    weights = ref.softmax(_scores(x, W_q, W_k), axis=-1) * mask
    return weights @ (x @ W_v)


def _detector(attn_fn, n=8, d=4, trials=3, seed=0, *, positions="all", perturb="after", compare="upto",
              same=lambda a, b: np.allclose(a, b, rtol=0.0, atol=1e-9), inputs="random"):
    """A leak detector with one knob per mistake; with the defaults it is a correct one.

    positions: "all" (every i) or "zero" (only i = 0). perturb: "after" (positions > i),
    "next" (position i + 1 only) or "from_i" (positions >= i). compare: "upto" (outputs
    0..i), "before_i" (outputs 0..i - 1), "at_i" (output i only) or "after" (outputs > i;
    comparing every output gives the same verdicts on every check). inputs: "random" or
    "ones" (a single trial: all ones, the changed positions set to 2).
    """
    rng = np.random.default_rng(seed)
    for _ in range(1 if inputs == "ones" else trials):
        x = np.ones((n, d)) if inputs == "ones" else rng.normal(size=(n, d))
        base = np.asarray(attn_fn(x.copy()), dtype=float)
        for i in range(1 if positions == "zero" else n - 1):
            start = i if perturb == "from_i" else i + 1
            stop = i + 2 if perturb == "next" else n
            changed = x.copy()
            changed[start:stop] = 2.0 if inputs == "ones" else rng.normal(size=(stop - start, d))
            out = np.asarray(attn_fn(changed), dtype=float)
            rows = {"upto": slice(0, i + 1), "before_i": slice(0, i), "at_i": slice(i, i + 1),
                    "after": slice(i + 1, n)}[compare]
            if not same(out[rows], base[rows]):
                return False
    return True


def detector(**knobs):
    return lambda ref, attn_fn, n=8, d=4, trials=3, seed=0: _detector(attn_fn, n, d, trials, seed, **knobs)


def detector_ignoring_arguments(ref, attn_fn, n=8, d=4, trials=3, seed=0):
    return _detector(attn_fn)


def detector_inverted(ref, attn_fn, n=8, d=4, trials=3, seed=0):
    return not ref.looks_causal(attn_fn, n=n, d=d, trials=trials, seed=seed)


MISCONCEPTIONS = (
    Misconception(
        "mask_diagonal_excluded",
        "a mask that leaves out the diagonal (np.tril(..., k=-1))",
        "Position i may read itself: the diagonal belongs to the mask (np.tril with k=0). Without it "
        "row 0 allows nothing, and a softmax over nothing but -inf is NaN.",
        {
            "causal_mask": mask_variant(lambda n: _lower(n, -1)),
            "causal_self_attention": self_attention_with(lambda ref, n: _lower(n, -1)),
        },
    ),
    Misconception(
        "mask_upper_triangle",
        "an upper-triangular mask (np.triu, or the causal mask transposed)",
        "Row i is query i and column j is key j; query i may read keys j <= i, which lie on and BELOW "
        "the diagonal: np.tril, not np.triu, and no transpose.",
        {
            "causal_mask": mask_variant(lambda n: np.triu(np.ones((n, n), dtype=bool))),
            "causal_self_attention": self_attention_with(lambda ref, n: ref.causal_mask(n).T),
        },
    ),
    Misconception(
        "mask_one_ahead",
        "a mask with one diagonal too many (np.tril(..., k=1)): position i also reads i + 1",
        "Position i + 1 holds exactly the token that position i must predict: use k=0.",
        {
            "causal_mask": mask_variant(lambda n: _lower(n, 1)),
            "causal_self_attention": self_attention_with(lambda ref, n: _lower(n, 1)),
        },
    ),
    Misconception(
        "mask_blocked_convention",
        "a mask that is True where attending is FORBIDDEN (np.triu(..., k=1)), the opposite convention",
        "Some libraries (PyTorch's boolean attn_mask) mark the blocked pairs; this course marks the "
        "ALLOWED ones: True on and below the diagonal, np.tril(np.ones((n, n), dtype=bool)). Used as an "
        "allowed mask, the blocked one lets every token read only the future, and the last row allows "
        "nothing at all (a softmax over nothing but -inf is NaN). An additive mask (0 and -inf) handed "
        "in as the boolean one acts the same way, its -inf entries counting as True: turn it into the "
        "boolean one with `additive == 0`.",
        {
            "causal_mask": mask_variant(lambda n: np.triu(np.ones((n, n), dtype=bool), k=1)),
            "causal_self_attention": self_attention_with(lambda ref, n: ~ref.causal_mask(n)),
        },
    ),
    Misconception(
        "mask_all_allowed",
        "a mask that allows every pair (all True): the triangle is missing",
        "Start from np.ones((n, n), dtype=bool), then keep only the lower triangle with np.tril: query i "
        "may read keys 0..i, never the later ones.",
        {"causal_mask": mask_variant(lambda n: np.ones((n, n), dtype=bool))},
    ),
    Misconception(
        "mask_additive_float",
        "an additive float mask (0 and -inf) where the contract asks for a boolean one",
        "An additive mask is added to the scores; this course's causal_mask is the boolean one, True "
        "where attending is allowed: np.tril(np.ones((n, n), dtype=bool)). From an additive mask "
        "`additive`, the boolean one is `additive == 0`; back again, np.where(mask, 0.0, -np.inf).",
        {"causal_mask": mask_variant(lambda n: np.where(_lower(n), 0.0, -np.inf))},
    ),
    Misconception(
        "mask_as_numbers",
        "a mask of 0/1 numbers instead of booleans",
        "Make it boolean: np.tril(np.ones((n, n), dtype=bool)), or compare positions "
        "(np.arange(n)[:, None] >= np.arange(n)), which gives booleans.",
        {"causal_mask": mask_variant(lambda n: np.tril(np.ones((n, n))))},
    ),
    Misconception(
        "mask_forgotten",
        "self-attention with no mask",
        "Pass mask=causal_mask(n), with n = x.shape[-2], to self_attention.",
        {"causal_self_attention": csa_mask_forgotten},
    ),
    Misconception(
        "seq_len_from_first_axis",
        "the sequence length read from the first axis (x.shape[0] or len(x)) instead of x.shape[-2]",
        "With batch axes in front, x.shape[0] is the batch size: the tokens are on axis -2, so use "
        "causal_mask(x.shape[-2]).",
        {"causal_self_attention": csa_length_from_first_axis},
    ),
    Misconception(
        "seq_len_from_last_axis",
        "the sequence length read from the last axis (x.shape[-1], the model width) instead of x.shape[-2]",
        "x is (..., n, d_model): the tokens are on axis -2, so use causal_mask(x.shape[-2]); the last "
        "axis holds each token's features.",
        {"causal_self_attention": csa_length_from_last_axis},
    ),
    Misconception(
        "mask_boolean_index_no_broadcast",
        "masking with boolean indexing (scores[~mask] = -np.inf), which needs a mask of exactly the scores' shape",
        "The (n, n) mask does not index scores with batch axes in front; np.where(mask, scores, -np.inf) "
        "broadcasts it over them (or pass mask= to self_attention).",
        {"causal_self_attention": csa_mask_by_boolean_index},
    ),
    Misconception(
        "mask_added_to_scores",
        "the 0/1 mask added to the scores instead of -inf put where it is False",
        "Adding 1 to the allowed scores changes almost nothing; forbidden scores must become -inf "
        "(np.where(mask, scores, -np.inf)), or pass the mask to self_attention.",
        {"causal_self_attention": csa_mask_added},
    ),
    Misconception(
        "mask_filled_with_zero",
        "masked scores set to 0 instead of -inf",
        "A score of 0 still gets weight exp(0) = 1 before normalising, so the future still leaks in: "
        "use -np.inf, np.where(mask, scores, -np.inf), so that the masked weights are exactly 0.",
        {"causal_self_attention": csa_mask_filled_with_zero},
    ),
    Misconception(
        "mask_after_softmax",
        "the mask applied to the weights after the softmax",
        "Zeroing weights afterwards leaves rows that do not sum to one, and the denominator still "
        "holds the future scores: mask the scores (-inf) before the softmax.",
        {"causal_self_attention": csa_mask_after_softmax},
    ),
    Misconception(
        "targets_not_shifted",
        "targets that are the same tokens as the inputs",
        "The target at position i is the NEXT token: targets = tokens[..., 1:].",
        {"next_token_pairs": lambda ref, tokens: (tokens[..., :-1], tokens[..., :-1])},
    ),
    Misconception(
        "pairs_shifted_backwards",
        "inputs and targets the wrong way round (inputs = tokens[..., 1:], targets = tokens[..., :-1])",
        "The model reads the prefix and predicts what comes next: inputs drop the LAST token, "
        "targets drop the FIRST.",
        {"next_token_pairs": lambda ref, tokens: (tokens[..., 1:], tokens[..., :-1])},
    ),
    Misconception(
        "pairs_sliced_first_axis",
        "slicing the first axis (tokens[:-1]) instead of the last",
        "On a batch, tokens[:-1] drops a whole sequence: slice the sequence axis with "
        "tokens[..., :-1] and tokens[..., 1:].",
        {"next_token_pairs": lambda ref, tokens: (tokens[:-1], tokens[1:])},
    ),
    Misconception(
        "pairs_sliced_second_axis",
        "slicing the second axis (tokens[:, :-1]), as if every input were a (batch, n) array",
        "The tokens may have any number of batch axes, or none: slice the LAST axis with "
        "tokens[..., :-1] and tokens[..., 1:].",
        {"next_token_pairs": lambda ref, tokens: (tokens[:, :-1], tokens[:, 1:])},
    ),
    Misconception(
        "inputs_not_trimmed",
        "inputs that keep the last token (inputs = tokens, targets = tokens[..., 1:])",
        "The last token has no next token to predict, so it is not an input: inputs = tokens[..., :-1], "
        "the same length as the targets.",
        {"next_token_pairs": lambda ref, tokens: (tokens, tokens[..., 1:])},
    ),
    Misconception(
        "pairs_drop_two",
        "inputs and targets that both drop one token too many (tokens[..., :-2] and tokens[..., 1:-1])",
        "Every token but the last is an input and every token but the first a target: tokens[..., :-1] "
        "and tokens[..., 1:], n - 1 pairs.",
        {"next_token_pairs": lambda ref, tokens: (tokens[..., :-2], tokens[..., 1:-1])},
    ),
    Misconception(
        "targets_rolled",
        "targets made with np.roll, which wraps the first token round to the end",
        "The last token has no next token to predict: drop it from the inputs (n - 1 pairs) "
        "instead of wrapping around.",
        {"next_token_pairs": lambda ref, tokens: (tokens, np.roll(tokens, -1, axis=-1))},
    ),
    Misconception(
        "token_ids_as_floats",
        "token ids turned into floats",
        "Token ids index an embedding table, so they must stay integers: slicing keeps the dtype, "
        "so slice `tokens` itself rather than a float copy of it.",
        {"next_token_pairs": lambda ref, tokens: (tokens[..., :-1].astype(float), tokens[..., 1:].astype(float))},
    ),
    # Verdicts are one bit, so a wrong verdict can match several of the detector variants below;
    # a mistake is named only when one explains every failed check, the checks the student passed
    # setting the others aside. So no two of them may give the same verdicts on every check
    # (tests/test_unit_masking.py checks this).
    Misconception(
        "detector_exact_equality",
        "a detector that compares outputs with exact equality",
        "Float round-off (about 1e-16) is not a leak: compare with a tiny tolerance, e.g. "
        "np.allclose(a, b, rtol=0, atol=1e-9).",
        {"looks_causal": detector(same=np.array_equal)},
    ),
    Misconception(
        "detector_next_position_only",
        "a detector that changes only position i + 1 and looks only at output i",
        "A leak can jump several positions (the last token into the first): change every position "
        "after i and compare every output up to i.",
        {"looks_causal": detector(perturb="next", compare="at_i")},
    ),
    Misconception(
        "detector_only_position_zero",
        "a detector that only checks the output at position 0",
        "A leak may reach a later position and never position 0: repeat the test for every i.",
        {"looks_causal": detector(positions="zero")},
    ),
    Misconception(
        "detector_loose_tolerance",
        "a detector with a loose tolerance",
        "A dependence of 1e-3 is a leak a model will learn to use; only round-off (~1e-16) should be "
        "ignored: use a tolerance near 1e-9, not 1e-2 or np.allclose's relative default on large values.",
        {"looks_causal": detector(same=lambda a, b: np.allclose(a, b, rtol=1e-2, atol=1e-2))},
    ),
    Misconception(
        "detector_single_fixed_input",
        "a detector that tries one special input (such as all ones) instead of several random ones",
        "Some leaks open only for some inputs: use `trials` fresh random inputs (normal, with both "
        "signs), and random new values for the changed positions.",
        {"looks_causal": detector(inputs="ones")},
    ),
    Misconception(
        "detector_perturbs_position_i",
        "a detector that also changes position i itself (x[i:] instead of x[i + 1:])",
        "Output i may depend on input i: change only the positions strictly after i.",
        {"looks_causal": detector(perturb="from_i")},
    ),
    Misconception(
        "detector_checks_after_i",
        "a detector that compares the outputs after position i (or every output), or whose changes pile "
        "up because it changes x itself (x2 = x, not a copy)",
        "Outputs after i are allowed to change when inputs after i change; the question is whether "
        "outputs 0..i stay put: compare out[:i + 1]. And change a fresh copy each time "
        "(x2 = x.copy()), or the changes made for earlier i reach positions up to i.",
        {"looks_causal": detector(compare="after")},
    ),
    Misconception(
        "detector_inverted",
        "a detector whose answer is the wrong way round (True when it finds a leak)",
        "looks_causal answers the question in its name: return True when NO output up to i ever "
        "changed (the function looks causal), and False as soon as you find a leak.",
        {"looks_causal": detector_inverted},
    ),
    Misconception(
        "detector_skips_output_i",
        "a detector that compares the outputs before position i (out[:i]) but not output i itself",
        "Output i must not depend on the inputs after i either, and the leak into it from position i + 1 "
        "is the commonest one: compare out[:i + 1].",
        {"looks_causal": detector(compare="before_i")},
    ),
    Misconception(
        "detector_never_finds_a_leak",
        "a detector that never finds a leak: its changes to the inputs never show in the outputs",
        "Check that the change really reaches the function: change a copy of x (x2 = x.copy()), by a "
        "visible amount (fresh random values, not a tiny nudge), call attn_fn on that copy, and compare "
        "it with the output for the original x.",
        {"looks_causal": lambda ref, attn_fn, n=8, d=4, trials=3, seed=0: True},
    ),
    Misconception(
        "detector_ignores_arguments",
        "a detector that ignores its arguments (n, d, trials, seed)",
        "Build the test inputs with the n and d you are given: some leaks only appear in longer "
        "sequences.",
        {"looks_causal": detector_ignoring_arguments},
    ),
)


UNIT = graded()
