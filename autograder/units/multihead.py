"""Unit 03, multi-head attention (NumPy): the hidden checks and the misconception catalogue.

The reference is the solution notebook (`solutions/03_multihead/multihead.ipynb`); the
variants below are wrong on purpose, each built from the reference with one mistake.
Besides the reference, `multi_head_attention` is checked against PyTorch's own
`torch.nn.MultiheadAttention` carrying the same weights (`torch_oracle`), an independent
source of the expected values.
"""

from __future__ import annotations

import numpy as np

from ..engine.compare import Tolerance, as_array, describe
from ..engine.reference import load_reference
from ..engine.spec import Check, Inputs, Misconception, Part, SampleBug, StepFailed, Unit, diagnose_array

UNIT_NAME = "03_multihead"

# Splitting and merging only move numbers around: they must come back exact (the margin
# allows a float32 round trip, nothing more).
EXACT = Tolerance(rtol=1e-6, atol=1e-12)


# ---------------------------------------------------------------- what is graded


def graded() -> Unit:
    """The graded parts: each check, what it shows, and its points. What the checks use (their
    inputs, diagnoses and probes) and the catalogue of mistakes they name are below; this is
    called at the end of the module, once all of it is defined."""
    parts = (
        Part(
            "split_heads",
            diagnose=diagnose_rearranged,
            locate=locate_split_heads,
            checks=(
                Check("unbatched", "x (5, 12) split into 3 heads", 1,
                      split_inputs((), 5, 12, 3, integers=True), tol=EXACT),
                Check("one_batch_axis", "x (2, 5, 12) split into 4 heads", 1,
                      split_inputs((2,), 5, 12, 4), tol=EXACT),
                Check("two_batch_axes", "x (2, 3, 4, 6) split into 2 heads", 1,
                      split_inputs((2, 3), 4, 6, 2), tol=EXACT),
                Check("one_head", "x (3, 7, 6) split into 1 head", 1,
                      split_inputs((3,), 7, 6, 1), tol=EXACT),
                Check("d_head_one", "x (2, 5, 4) split into 4 heads of width 1", 0.5,
                      split_inputs((2,), 5, 4, 4), tol=EXACT),
                Check("values_kept", "x (2, 3, 6) of float64 values 1 + k * 1e-10, split into 2 heads, every value "
                      "kept exactly", 0.5, exact_inputs((2, 3, 6), 2), tol=Tolerance(rtol=0.0, atol=0.0)),
                Check("inputs_unchanged", "x is not modified", 1,
                      split_inputs((2,), 4, 6, 3), kind="unchanged"),
            ),
        ),
        Part(
            "merge_heads",
            diagnose=diagnose_rearranged,
            locate=locate_merge_heads,
            checks=(
                Check("unbatched", "3 heads (3, 5, 4) merged", 1, merge_inputs((), 3, 5, 4), tol=EXACT),
                Check("one_batch_axis", "heads (2, 4, 5, 3) merged", 1, merge_inputs((2,), 4, 5, 3), tol=EXACT),
                Check("two_batch_axes", "heads (2, 3, 2, 4, 3) merged", 1, merge_inputs((2, 3), 2, 4, 3), tol=EXACT),
                Check("round_trip", "merge_heads(split_heads(x, 5)) gives x back, x (2, 6, 10)", 1,
                      round_trip_inputs((2,), 6, 10, 5), tol=EXACT, oracle=round_trip_oracle),
                Check("one_head", "a single head (2, 1, 5, 6) merged", 1, merge_inputs((2,), 1, 5, 6), tol=EXACT),
                Check("d_head_one", "6 heads of width 1, (2, 6, 5, 1), merged", 0.5, merge_inputs((2,), 6, 5, 1),
                      tol=EXACT),
                Check("values_kept", "heads (2, 2, 3, 3) of float64 values 1 + k * 1e-10 merged, every value kept "
                      "exactly", 0.5, exact_inputs((2, 2, 3, 3)), tol=Tolerance(rtol=0.0, atol=0.0)),
                Check("inputs_unchanged", "the heads array is not modified", 1,
                      merge_inputs((2,), 3, 4, 2), kind="unchanged"),
            ),
        ),
        Part(
            "multi_head_attention",
            uses=("softmax", "scaled_dot_product_attention", "split_heads", "merge_heads"),
            locate=locate_multi_head_attention,
            forbid=(
                "torch.nn.functional.scaled_dot_product_attention",
                "torch.nn.functional.multi_head_attention_forward",
                "torch.nn.MultiheadAttention",
            ),
            checks=(
                Check("unbatched", "x (6, 8), 2 heads, causal by default", 1, mha_inputs((), 6, 8, 2)),
                Check("one_batch_axis", "x (2, 5, 12), 3 heads, causal by default", 1, mha_inputs((2,), 5, 12, 3)),
                Check("two_batch_axes", "x (2, 2, 4, 8), 4 heads, causal by default", 1,
                      mha_inputs((2, 2), 4, 8, 4)),
                Check("not_causal", "causal=False on x (2, 5, 8), 2 heads", 1, mha_inputs((2,), 5, 8, 2, causal=False)),
                Check("one_head", "a single head on x (2, 5, 6)", 1, mha_inputs((2,), 5, 6, 1)),
                Check("d_head_one", "4 heads of width 1 on x (2, 6, 4)", 0.5, mha_inputs((2,), 6, 4, 4)),
                # exp overflows on these scores unless each row's maximum is subtracted first
                Check("large_scores", "x (2, 5, 8) of size ~40, 2 heads: scores in the thousands (numerical "
                      "stability)", 0.5, mha_inputs((2,), 5, 8, 2, scale=40.0), tol=Tolerance(rtol=1e-2, atol=1e-3)),
                Check("torch_causal", "agrees with torch.nn.MultiheadAttention (same weights, causal), "
                      "x (3, 7, 16), 4 heads", 1, mha_inputs((3,), 7, 16, 4, causal=True), oracle=torch_oracle),
                Check("torch_not_causal", "agrees with torch.nn.MultiheadAttention (same weights, causal=False), "
                      "x (2, 2, 5, 12), 3 heads", 1, mha_inputs((2, 2), 5, 12, 3, causal=False), oracle=torch_oracle),
                Check("inputs_unchanged", "x and the four weights are not modified", 1,
                      mha_inputs((2,), 4, 6, 2), kind="unchanged"),
            ),
        ),
        Part(
            "attention_flops",
            diagnose=diagnose_count,
            checks=(
                Check("small", "n=6, d_model=8, n_heads=2", 1, flops_inputs(6, 8, 2)),
                Check("one_head", "n=5, d_model=12, n_heads=1", 1, flops_inputs(5, 12, 1)),
                Check("long_sequence", "n=4096, d_model=64, n_heads=4 (the n^2 terms dominate)", 1,
                      flops_inputs(4096, 64, 4)),
                Check("gpt2_layer", "one GPT-2 small layer: n=1024, d_model=768, n_heads=12", 1,
                      flops_inputs(1024, 768, 12)),
                Check("counted", "n=7, d_model=16, n_heads=4, against the matrix products the reference layer "
                      "really does (counted, not computed)", 1, flops_inputs(7, 16, 4), oracle=counted_flops_oracle),
            ),
        ),
    )

    return Unit(
        UNIT_NAME,
        cell_seconds=10,  # NumPy on small arrays: every cell of the exercise runs in well under a second
        reference_cpu_seconds=0.1,  # 0.06 s measured (spec.Unit.reference_cpu_seconds)
        notebook_cpu_seconds=1.5,  # 1.43 s measured (spec.Unit.notebook_cpu_seconds)
        grader_imports=("torch",),  # torch_oracle's
        parts=parts,
        misconceptions=MISCONCEPTIONS,
        sample_bug=SampleBug(
            "split_heads",
            "np.swapaxes(blocks, -3, -2)",
            "blocks.reshape(*lead, n_heads, n, d_head)",
            "split_without_transpose",
        ),
    )


# ---------------------------------------------------------------- the grader's own pieces
# Written here independently of the reference, to build inputs and expected values.


def diagnose_rearranged(result, expected, inputs: Inputs, tol: Tolerance) -> str | None:
    """Splitting and merging heads only move entries: where the values differ (on the checks with
    no tolerance, only there), a cast to a narrower dtype is said as such."""
    problem = diagnose_array(result, expected, inputs, tol)
    given = inputs.args[0]
    if (problem is not None and isinstance(result, np.ndarray) and isinstance(given, np.ndarray)
            and result.dtype != given.dtype and result.shape == np.shape(expected)):
        return (f"your output is {result.dtype} where the input is {given.dtype}, and its values are rounded: moving "
                "entries between axes keeps their dtype and their values exactly; cast nothing "
                f"(np.asarray(x, dtype=np.{result.dtype}) rounds them)")
    return problem


def exact_inputs(shape, n_heads=None):
    """Values that float32 cannot hold (1 + k * 1e-10), for a check with no tolerance at all."""
    def make(rng):
        x = 1.0 + rng.permutation(int(np.prod(shape))).reshape(shape) * 1e-10
        return Inputs((x,) if n_heads is None else (x, n_heads))

    return make


def own_split(x, n_heads):
    """(..., n, d_model) -> (..., n_heads, n, d_head), head k owning columns k*d_head:(k+1)*d_head."""
    *lead, n, d_model = x.shape
    return np.moveaxis(x.reshape(*lead, n, n_heads, d_model // n_heads), -2, -3)


def own_merge(x):
    """(..., n_heads, n, d_head) -> (..., n, d_model), the heads side by side."""
    *lead, n_heads, n, d_head = x.shape
    return np.moveaxis(x, -3, -2).reshape(*lead, n, n_heads * d_head)


def causal_allowed(n):
    return np.tril(np.ones((n, n), dtype=bool))


def mha_call(inputs: Inputs):
    """The arguments of a multi_head_attention check, by name."""
    names = ("x", "W_q", "W_k", "W_v", "W_o", "n_heads", "causal")
    call = dict(zip(names, inputs.args, strict=False))
    call.update(inputs.kwargs)
    call.setdefault("causal", True)
    return call


def torch_multi_head_attention(x, W_q, W_k, W_v, W_o, n_heads, causal=True):
    """The same layer computed by torch.nn.MultiheadAttention, in float64.

    torch's Linear computes `x @ W.T`, so the module holds the transposes of the course's
    `x @ W` weights; its boolean `attn_mask` is True where attending is NOT allowed.
    """
    import torch

    x = np.asarray(x, dtype=np.float64)
    *lead, n, d_model = x.shape
    layer = torch.nn.MultiheadAttention(d_model, n_heads, bias=False, batch_first=True, dtype=torch.float64)
    layer.eval()
    with torch.no_grad():
        in_proj = np.concatenate([np.asarray(W, dtype=np.float64).T for W in (W_q, W_k, W_v)], axis=0)
        layer.in_proj_weight.copy_(torch.from_numpy(np.ascontiguousarray(in_proj)))
        layer.out_proj.weight.copy_(torch.from_numpy(np.ascontiguousarray(np.asarray(W_o, dtype=np.float64).T)))
        flat = torch.from_numpy(np.ascontiguousarray(x.reshape(-1, n, d_model)))
        attn_mask = torch.from_numpy(~causal_allowed(n)) if causal else None
        out, _ = layer(flat, flat, flat, attn_mask=attn_mask, need_weights=False)
    return out.numpy().reshape(*lead, n, d_model)


def torch_oracle(inputs: Inputs):
    """Expected multi_head_attention output from PyTorch.

    Where torch is not installed (the grading environment should have it: it is pinned in
    requirements.txt), fall back to the reference rather than fail the whole part.
    """
    call = mha_call(inputs)
    try:
        import torch  # noqa: F401
    except ImportError:
        return load_reference(UNIT_NAME).multi_head_attention(**call)
    return torch_multi_head_attention(**call)


def round_trip_oracle(inputs: Inputs):
    """merge_heads(split_heads(x)) must be x: undo the grader's own split."""
    return own_merge(inputs.args[0])


# ---------------------------------------------------------------- inputs


def split_inputs(batch, n, d_model, n_heads, integers=False):
    def make(rng):
        if integers:  # every entry distinct, so any misplaced number shows
            x = rng.permutation(int(np.prod((*batch, n, d_model)))).reshape(*batch, n, d_model).astype(float)
        else:
            x = rng.normal(0.0, 1.0, (*batch, n, d_model))
        return Inputs((x, n_heads))

    return make


def merge_inputs(batch, n_heads, n, d_head):
    def make(rng):
        return Inputs((rng.normal(0.0, 1.0, (*batch, n_heads, n, d_head)),))

    return make


def round_trip_inputs(batch, n, d_model, n_heads):
    def make(rng):
        return Inputs((own_split(rng.normal(0.0, 1.0, (*batch, n, d_model)), n_heads),))

    return make


def mha_inputs(batch, n, d_model, n_heads, causal=None, scale=1.0):
    """causal=None leaves the argument out, so the default (True) is what is checked."""

    def make(rng):
        x = rng.normal(0.0, scale, (*batch, n, d_model))
        W_q, W_k, W_v, W_o = (rng.normal(0.0, d_model**-0.5, (d_model, d_model)) for _ in range(4))
        kwargs = {} if causal is None else {"causal": causal}
        return Inputs((x, W_q, W_k, W_v, W_o, n_heads), kwargs)

    return make


# ---------------------------------------------------------------- counting FLOPs
# `attention_flops(n, d_model, n_heads)` counts the FLOPs of the matrix products of one
# multi_head_attention call on one sequence: (a, b) @ (b, c) costs 2abc; the softmax, the
# scaling, the mask and the reshapes are not counted.


def flops_inputs(n, d_model, n_heads):
    def make(rng):
        return Inputs((n, d_model, n_heads))

    return make


class CountedArray(np.ndarray):
    """An array that adds the FLOPs of every matrix product it takes part in to `log`."""

    log: list = []

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        plain_inputs = [np.asarray(a) if isinstance(a, CountedArray) else a for a in inputs]
        result = getattr(ufunc, method)(*plain_inputs, **kwargs)
        if ufunc is np.matmul and method == "__call__":
            a, b = (np.asarray(v) for v in plain_inputs[:2])
            batch = int(np.prod(np.broadcast_shapes(a.shape[:-2], b.shape[:-2])))
            CountedArray.log.append(2 * batch * a.shape[-2] * a.shape[-1] * b.shape[-1])
        return result.view(CountedArray) if isinstance(result, np.ndarray) else result


def counted_flops_oracle(inputs: Inputs):
    """Count, rather than compute, the FLOPs: run the reference layer on arrays that log
    every matrix product (an independent check of the closed form, on the reference's code)."""
    n, d_model, n_heads = inputs.args
    ref = load_reference(UNIT_NAME)
    rng = np.random.default_rng(0)
    x, *weights = (rng.normal(size=shape).view(CountedArray)
                   for shape in [(n, d_model)] + [(d_model, d_model)] * 4)
    CountedArray.log = []
    ref.multi_head_attention(x, *weights, n_heads)
    return sum(CountedArray.log)


def diagnose_count(result, expected, inputs: Inputs, tol: Tolerance) -> str | None:
    if isinstance(result, bool) or not isinstance(result, int | float | np.integer | np.floating):
        return f"expected a number, got {describe(result)}"
    if not np.isfinite(result):
        return f"the count is {result}"
    floated = isinstance(result, float | np.floating) and isinstance(expected, int | np.integer)
    if result == expected and floated:
        return (f"counted {float(result)!r}: the right number, but a float, where the count is an integer (a true "
                "division `/`, d_model / n_heads say, makes every product after it a float: divide with `//`)")
    if result == expected:
        return None
    n, d_model, n_heads = inputs.args
    problem = (f"for n={n}, d_model={d_model}, n_heads={n_heads} you counted {result:,.0f} FLOPs, "
               f"{result / expected:.3g} times the right count (list the matrix products one by one, "
               "with their shapes)")
    if floated:
        problem += " (and it came back as a float: divide with `//`, not `/`)"
    explanation = explain_flops_difference(result - expected, n, d_model, n_heads)
    if explanation is None and 2 * result != expected:
        # counted in multiply-adds (no 2 anywhere) and off besides: read the doubled count as pieces
        doubled = explain_flops_difference(2 * result - expected, n, d_model, n_heads)
        if doubled is not None:
            explanation = (f"two things. Every product is counted in multiply-adds, without the 2 ((a, b) @ (b, c) "
                           f"is abc multiply-adds but 2abc FLOPs): doubled, yours is {2 * result:,.0f}, and still "
                           f"off, as {doubled}")
    return f"{problem}. Where it goes wrong: {explanation}" if explanation else problem


# What a FLOP count that is off left out or added, in the products of one call. The right count is
# four projections of 2 n d_model^2 and two products over the heads (the scores, and the weights
# times the values) of 2 n^2 d_model each. Each piece: its FLOPs for (n, d_model, n_heads), whether
# a count has it too many (+1) or too few (-1) times, and how that reads for 1-4 of it.
def _times(k: int, one: str, several: str) -> str:
    return one if k == 1 else f"{MANY[k]} {several}"


MANY = {1: "one", 2: "two", 3: "three", 4: "four"}
FLOPS_PIECES = (
    (lambda n, d, h: 2 * n * d * d, (1, -1), lambda k, sign: (
        f"{_times(k, 'a projection', 'projections')} {'too many' if sign > 0 else 'left out'} (each n x d_model "
        "times d_model x d_model: 2 n d_model^2)")),
    (lambda n, d, h: 2 * n * n * d, (1, -1), lambda k, sign: (
        f"{_times(k, 'a product over the heads', 'products over the heads')} "
        f"{'too many' if sign > 0 else 'left out'} (the scores Q K^T and the weights times V: 2 n^2 d_model each)")),
    (lambda n, d, h: n * (n - 1) * d, (-1,), lambda k, sign: (
        f"the future half of {'one product' if k == 1 else 'both products'} over the heads left out: the mask "
        "hides those entries, but the products still compute all n^2 query-key pairs, not n(n+1)/2")),
    (lambda n, d, h: n * d, (-1,), lambda k, sign: (
        f"2b - 1 FLOPs for a dot product of length b in {_times(k, 'a projection', 'projections')}: here "
        "(a, b) @ (b, c) costs 2abc, b multiplies and b adds for each output")),
    (lambda n, d, h: 5 * n * d + n * n * h, (-1,), lambda k, sign: (
        "2b - 1 FLOPs for a dot product of length b in every product: here (a, b) @ (b, c) costs 2abc")),
    (lambda n, d, h: 2 * n * n * (d * h - d), (1,), lambda k, sign: (
        f"d_model where d_head belongs in {_times(k, 'a product', 'products')} over the heads: each head's "
        "scores are n x d_head times d_head x n")),
    (lambda n, d, h: 2 * n * n * (d - d // h), (-1,), lambda k, sign: (
        f"{_times(k, 'a product', 'products')} over the heads counted for one head only: every head does one")),
    # A projection without the 2; an even number of them is the same number as half as many left out.
    (lambda n, d, h: n * d * d, (-1,), lambda k, sign: None if k % 2 == 0 else (
        f"{_times(k, 'a projection', 'projections')} counted without the multiply-add's 2: n d_model^2 where each "
        "costs 2 n d_model^2, as (a, b) @ (b, c) costs 2abc")),
    # Q K^T and the weights times V cost the same (2 n^2 d_model), so which of the two lacks its 2 cannot be
    # told apart: both are named. Only once: twice is the same number as one product left out.
    (lambda n, d, h: n * n * d, (-1,), lambda k, sign: None if k > 1 else (
        "one of the two products over the heads (the scores Q K^T, or the weights times V) counted without the "
        "multiply-add's 2: n^2 d_model where it costs 2 n^2 d_model, as (a, b) @ (b, c) costs 2abc")),
    (lambda n, d, h: n * n * h, (1,), lambda k, sign: (
        f"{MANY[k]} FLOP{'s' if k > 1 else ''} for every score (n^2 a head): the scaling, the mask or the softmax "
        "counted; only the matrix products are counted here")),
)


def explain_flops_difference(difference: float, n: int, d_model: int, n_heads: int) -> str | None:
    """How far off a FLOP count is, said as products of the call left out or added, where exactly
    one reading (1-4 of one piece) gives the difference; None otherwise."""
    fits = [told(many, sign) for size, signs, told in FLOPS_PIECES if size(n, d_model, n_heads)
            for many in MANY for sign in signs if difference == sign * many * size(n, d_model, n_heads)]
    fits = [text for text in fits if text is not None]  # a reading a piece does not give for that many
    if len(fits) != 1:  # none, or more than one reading: say nothing rather than guess
        return None
    return f"the count is {abs(difference):,.0f} {'over' if difference > 0 else 'under'}: {fits[0]}"


def flops_variant(formula):
    return lambda ref, n, d_model, n_heads: formula(n, d_model, n_heads)


# ---------------------------------------------------------------- locating the step that is wrong
# Where no catalogued mistake explains a failed part: split_heads and merge_heads are given inputs
# whose every entry says where it sits (100 * position + column), so the output shows where each
# entry went; multi_head_attention is given weights that make each step show alone (W_q = W_k = 0
# for equal scores, the identity for W_v and W_o, one head's queries all matching one key).



def _where_from(value: float) -> tuple[int, int]:
    """(position, column) of a traced entry, 100 * position + column."""
    position, column = divmod(int(round(value)), 100)
    return position, column


def _array_equal(got, want) -> bool:
    got = as_array(got)
    return got is not None and got.shape == want.shape and bool(np.array_equal(got, want))


def locate_split_heads(call) -> str | None:
    n, d_model, heads = 3, 6, 2
    d_head = d_model // heads
    x = 100.0 * np.arange(n)[:, None] + np.arange(d_model)[None, :]  # x[t, c] = 100 t + c
    got = as_array(call(x.copy(), heads))
    want = x.reshape(n, heads, d_head).transpose(1, 0, 2)
    if got is None or got.shape != want.shape:
        if got is not None and got.shape == (n, heads, d_head):
            return (f"the axes. x (3, 6) split into 2 heads should be (n_heads, n, d_head) = {want.shape}; yours is "
                    f"(n, n_heads, d_head) = {got.shape}: after the reshape, move the heads axis before the positions")
        batch = 1000.0 * np.arange(2)[:, None, None] + x
        if got is not None and got.shape == (n, d_head, heads) and np.array_equal(
                got, x.reshape(n, heads, d_head).swapaxes(1, 2)) and _array_equal(
                call(batch.copy(), heads), batch.reshape(2, n, heads, d_head).swapaxes(1, 2)):
            # right with a batch axis in front, wrong without: axes 1 and 2 counted from the front
            return (f"the axes. x (3, 6) split into 2 heads should be (n_heads, n, d_head) = {want.shape}; yours is "
                    f"{got.shape}: after the reshape to (n, n_heads, d_head) you swapped axes 1 and 2, counted from "
                    "the front, which for one sequence are n_heads and d_head: swap axes -3 and -2, counted from "
                    "the back, which are the positions and the heads whatever is in front")
        if got is not None and got.shape == (1, *want.shape) and np.array_equal(got[0], want):
            return (f"batch axes. x (3, 6), one sequence with no batch axis, should give (n_heads, n, d_head) = "
                    f"{want.shape}; yours gives {got.shape}, with a batch axis of 1 in front: keep the axes before "
                    "the last one as they are (x.reshape(*x.shape[:-1], n_heads, d_head)) rather than flattening "
                    "them into one batch axis")
        return (f"the shape. x (3, 6) split into 2 heads should be (n_heads, n, d_head) = {want.shape}; yours is "
                f"{got.shape if got is not None else describe(got)}")
    if not np.array_equal(got, want):
        mixed = [(h, t) for h in range(heads) for t in range(n) if len({_where_from(v)[0] for v in got[h, t]}) > 1]
        if mixed:
            h, t = mixed[0]
            return (f"the positions. Each row of a head holds one position's columns; your head {h}, row {t} holds "
                    f"entries of positions {sorted({_where_from(v)[0] for v in got[h, t]})}: reshaping straight to "
                    "(n_heads, n, d_head) mixes positions; reshape to (n, n_heads, d_head), then swap the first two "
                    "of those axes")
        owned = sorted({_where_from(v)[1] for v in got[1].ravel()})
        if owned != [3, 4, 5]:
            return (f"the columns. With d_model 6 and 2 heads, head 1 owns columns 3, 4, 5 (a block of d_head = 3); "
                    f"yours holds columns {owned}: reshape the last axis to (n_heads, d_head), in that order")
        rows = [sorted({_where_from(v)[0] for v in got[0, t].ravel()}) for t in range(n)]
        return (f"the positions. Row t of each head comes from position t; your head 0's rows come from positions "
                f"{rows}")
    xb = 1000.0 * np.arange(2)[:, None, None] + x  # a batch axis in front
    got = as_array(call(xb.copy(), heads))
    want = xb.reshape(2, n, heads, d_head).transpose(0, 2, 1, 3)
    if got is None or got.shape != want.shape or not np.array_equal(got, want):
        return (f"batch axes. One sequence is right, but x (2, 3, 6) should give (2, n_heads, n, d_head) = "
                f"{want.shape}; yours gives {got.shape if got is not None else describe(got)}"
                f"{'' if got is None or got.shape != want.shape else ' with entries from other places'}: "
                "reshape and swap only the last axes (x.reshape(*x.shape[:-1], n_heads, d_head), then swap axes -3 "
                "and -2), whatever the axes before them")
    xbb = 10000.0 * np.arange(2)[:, None, None, None] + 1000.0 * np.arange(3)[None, :, None, None] + x
    got = as_array(call(xbb.copy(), heads))
    want = xbb.reshape(2, 3, n, heads, d_head).transpose(0, 1, 3, 2, 4)
    if got is None or got.shape != want.shape or not np.array_equal(got, want):
        flat = got is not None and got.shape == (6, heads, n, d_head)
        gives = got.shape if got is not None else describe(got)
        return (f"batch axes. With one batch axis it is right, but x (2, 3, 3, 6), two batch axes, should give "
                f"(2, 3, n_heads, n, d_head) = {want.shape}; yours gives {gives}"
                f"{': the batch axes flattened into one' if flat else ''}: keep every axis before the last one as it "
                "is (x.reshape(*x.shape[:-1], n_heads, d_head)), then swap axes -3 and -2")
    return None


def _merges_right(call, heads: int, n: int, d_head: int) -> bool:
    split = (100.0 * np.arange(n)[:, None] + np.arange(heads * d_head)[None, :]).reshape(n, heads, d_head)
    try:
        got = as_array(call(split.transpose(1, 0, 2).copy()))
    except StepFailed:
        return False
    return got is not None and np.array_equal(got, split.reshape(n, heads * d_head))


def _merged_width(call) -> str | None:
    """The width read from the positions' axis: right only where n equals what it stands in for."""
    if _merges_right(call, 2, 3, 3) and not _merges_right(call, 2, 4, 3):
        stands_for = "d_head"
    elif not _merges_right(call, 2, 3, 3) and _merges_right(call, 2, 2, 3) and not _merges_right(call, 2, 4, 3):
        stands_for = "n_heads"
    else:
        return None
    return (f"the merged width. Your merge is right only where n, the positions' axis (-2), equals {stands_for}: "
            "heads (n_heads, n, d_head) merge to (n, n_heads * d_head); take the width from the heads' axis (-3) "
            "and the last axis (-1)")


def locate_merge_heads(call) -> str | None:
    if (width := _merged_width(call)) is not None:
        return width
    heads, n, d_head = 2, 3, 3
    split = (100.0 * np.arange(n)[:, None] + np.arange(heads * d_head)[None, :]).reshape(n, heads, d_head)
    x = split.transpose(1, 0, 2)  # heads (2, 3, 3), every entry 100 * position + column it comes from
    want = split.reshape(n, heads * d_head)
    got = as_array(call(x.copy()))
    if got is None or got.shape != want.shape:
        return (f"the shape. Heads (2, 3, 3) merge to (n, d_model) = {want.shape}; yours give "
                f"{got.shape if got is not None else describe(got)}: move the heads axis next to d_head "
                "(swap axes -3 and -2), then reshape the last two axes into one")
    if not np.array_equal(got, want):
        sources = [_where_from(v) for v in got[0]]
        if any(position != 0 for position, _ in sources):
            return (f"the positions. Row 0 of the merged output should hold position 0 of every head; yours holds "
                    f"entries of positions {sorted({p for p, _ in sources})}: swap the heads and positions axes "
                    "before the reshape")
        return (f"the columns. Column c of the merged output should hold head c // d_head's entry c % d_head "
                f"(head 0's three, then head 1's); yours hold, in order, the entries of columns "
                f"{[c for _, c in sources]}")
    # A batch of 3, not 2: a head count read from the front (x.shape[0]) must not come out right by chance.
    xb = np.stack([x, x + 1000.0, x + 2000.0])
    try:
        got = as_array(call(xb.copy()))
        told = f"give {got.shape if got is not None else describe(got)}"
    except StepFailed as err:
        got, told = None, f"raised {err}"
    if got is None or not np.array_equal(got, np.stack([want, want + 1000.0, want + 2000.0])):
        return (f"batch axes. One sequence is right, but heads (3, 2, 3, 3), a batch of 3, should merge to (3, 3, "
                f"6); yours {told}: read the number of heads and d_head from the end (x.shape[-3], x.shape[-1]) and "
                "swap and reshape only the last three axes, whatever the axes before them")
    return None



def locate_multi_head_attention(call) -> str | None:
    """The first step that is wrong; past a wrong output projection the later steps (whose W_o is the
    identity, where a missing or transposed W_o does not show) are read too, and a second wrong one told."""
    first = _locate_mha(call)
    if first is None or not first.startswith("the output projection."):
        return first
    second = _locate_mha(call, past_projection=True)
    return f"{first}. A second step is wrong as well, {second}" if second else first


def _locate_mha(call, past_projection=False) -> str | None:
    n = d_model = 8  # x = I (8, 8): each position is one column, so the output shows the weights
    heads, d_head = 2, 4
    x, eye, zero = np.eye(n), np.eye(d_model), np.zeros((d_model, d_model))
    perm = np.roll(np.eye(d_model), 1, axis=1)  # W_o that moves column c to column c + 1
    # 1. equal scores (W_q = W_k = 0), not causal, W_v = I: every row is the mean of x, then W_o
    got = as_array(call(x, zero, zero, eye, perm, heads, causal=False))
    mean = np.full((n, d_model), 1 / n)  # the mean of I's rows
    if got is None or got.shape != (n, d_model):
        return (f"the output. x (8, 8) with 2 heads should give (8, 8); yours gives "
                f"{got.shape if got is not None else describe(got)}")
    want = mean @ perm
    rows = np.full((n, d_model), 1 / n)
    if not np.allclose(got, want, atol=1e-9):
        causal = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]
        if np.allclose(got, causal @ perm, atol=1e-9):
            return ("the causal flag. With causal=False every position attends to every other; yours still hides the "
                    "later positions (is `causal` read, and the mask applied only when it is True?)")
        if np.allclose(got, want + x, atol=1e-9):
            return ("the output. With W_q = W_k = 0, causal=False and W_v = I, the output is mean(x) @ W_o; yours adds "
                    "x to it: the residual connection belongs to the block around the attention, not in it")
        if np.allclose(got, 0, atol=1e-12):
            return ("the values. With W_q = W_k = 0, causal=False and W_v = I the output is mean(x) @ W_o; yours is "
                    "0 everywhere, as when the values are made with W_k (zero here) or W_q: the values are x @ W_v")
        if np.allclose(got, np.full((n, d_model), 1 / heads) @ perm, atol=1e-9):
            return (f"the softmax's axis. With every score equal each query's weight on each key is 1/{n}; yours are "
                    f"1/{heads} = 1/n_heads, as if normalised over the heads: normalise over the keys, the last axis")
        return (f"the mix of values. With W_q = W_k = 0 (every score equal), causal=False and W_v = I, each output row "
                f"is the mean of x's rows times W_o, {rows[0, 0]:.3g} everywhere before W_o; yours differs "
                f"(row 0: {np.round(got[0], 3).tolist()})")
    _ = rows
    # 2. W_o: on a mean that is not uniform, so that W_o's orientation shows
    xs = np.diag(np.arange(1.0, n + 1))  # rows of x scaled: the mean is diag / n
    got = as_array(call(xs, zero, zero, eye, perm, heads, causal=False))
    mean = np.tile(np.arange(1.0, n + 1) / n, (n, 1))
    if not past_projection and not np.allclose(got, mean @ perm, atol=1e-9):
        for what, value in (("not applied", mean), ("transposed (W_o.T; is every weight used as x @ W, not "
                                                  "x @ W.T?)", mean @ perm.T)):
            if got is not None and np.allclose(got, value, atol=1e-9):
                return (f"the output projection. With equal scores the merged heads are the mean of x; yours returns "
                        f"it with W_o {what}: the output is merged @ W_o")
        if got is not None and got.shape == mean.shape and np.allclose(np.sort(got, axis=-1),
                                                                         np.sort(mean @ perm, axis=-1), atol=1e-9):
            return ("the heads' columns. With equal scores the output holds the right values in other columns: the "
                    "split or the merge moves columns (split: reshape the last axis to (n_heads, d_head), then swap "
                    "the heads and positions axes; merge: the reverse)")
        return ("the heads' arrangement. With equal scores every output row should be mean(x) @ W_o, whatever the "
                "heads do; yours is not, so positions or columns are moved between the projections and W_o: split "
                "is a reshape of the last axis to (n_heads, d_head) and then a swap of the heads and positions axes "
                "(a reshape alone mixes positions), and merge is the reverse")
    # 3. causal (the default): position t averages positions 0..t
    got = as_array(call(x, zero, zero, eye, eye, heads))
    want = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]
    if not np.allclose(got, want, atol=1e-9):
        if got is not None and got.shape == want.shape and np.allclose(got.sum(axis=0), 1, atol=1e-9) \
                and not np.allclose(got.sum(axis=1), 1, atol=1e-9):
            return ("the softmax's axis. With equal scores under the causal mask (x, W_v and W_o the identity, so the "
                    "output is the weights) your columns sum to 1, not your rows: each query's weights over the keys "
                    "sum to 1")
        if np.allclose(got, np.full((n, n), 1 / n), atol=1e-9):
            return ("the causal mask. Called with the default causal=True and equal scores, position t should average "
                    "positions 0..t; yours averages all of them: the mask is not applied (or causal defaults to False)")
        if np.allclose(np.nan_to_num(got) * want, 0, atol=1e-9):
            return ("the causal mask's meaning: your positions attend to the later positions and not the earlier "
                    "ones; position t may attend to 0..t")
        return ("the causal mask. With equal scores position t should average positions 0..t (row t: 1 / (t + 1) on "
                f"0..t); yours gives row 1 = {np.round(got[1], 3).tolist() if got is not None else got}")
    # 4. the scale: in head 0 every query is [2, 0, 0, 0] and key 0 is [1, 0, 0, 0]; head 1 all 0
    W_q, W_k = zero.copy(), zero.copy()
    W_q[:, 0] = 2.0
    W_k[0, 0] = 1.0
    # ... but first, each projection on its own: with either weight zero every score is 0 and the
    # weights uniform, whatever the other is (unless the other is used in its place)
    uniform = np.full((n, d_model), 1 / n)
    for name, other, args in (("keys", "W_k", (x, 3 * eye, zero)), ("queries", "W_q", (x, zero, 3 * eye))):
        got = as_array(call(*args, eye, eye, heads, causal=False))
        if got is not None and got.shape == uniform.shape and not np.allclose(got, uniform, atol=1e-9):
            return (f"the {name}. With {other} zero every {name[:-1]} is 0, so every score is equal and each output "
                    f"row the mean of x; yours is not (row 0: {np.round(got[0], 3).tolist()}): are the {name} "
                    f"x @ {other}?")
    got = as_array(call(x, W_q, W_k, eye, eye, heads, causal=False))
    if got is not None and got.shape == (n, d_model) and np.allclose(got[:, :d_head], 1 / n, atol=1e-9):
        return ("the scores. In head 0 every query is [2, 0, 0, 0] and only key 0 is not zero, [1, 0, 0, 0], so each "
                "query should weigh key 0 most; your weights are uniform, as K Qᵀ gives (its row t compares key t "
                "with every query): the scores are Q Kᵀ, each query's row against every key")
    if got is not None and got.shape == (n, d_model) and got[0, 1] > 0 and got[0, 0] > 0:
        head = got[0, :d_head]  # head 0's weights on keys 0..3: [a, b, b, b] when its columns are 0..3
        if not np.allclose(head[1:], head[1], rtol=1e-9):
            return ("the heads' columns. Head 0 should own columns 0..3 of every projection (a block of d_head = 4): "
                    f"with its queries all matching key 0, columns 0..3 of the output are head 0's weights, "
                    f"{np.round(head, 4).tolist()} in yours, not one large weight and three equal ones")
        used = float(np.log(got[0, 0] / got[0, 1]) / 2.0)  # head 0's weight on key 0 over key 1
        if abs(used - 1 / np.sqrt(d_head)) > 1e-3:
            named = next((name for value, name in ((1.0, "not scaled at all"), (1 / np.sqrt(d_model), "divided by "
                          "sqrt(d_model)"), (1 / d_head, "divided by d_head")) if abs(used - value) < 1e-3),
                         f"multiplied by {used:.4g}")
            return (f"the scale. With d_model 8 and 2 heads (d_head 4), head 0's raw scores are [2, 0, ...]; your "
                    f"weights say they were {named}, where each head divides by sqrt(d_head) = 2")
    return None


# ---------------------------------------------------------------- the wrong variants
# Each takes the reference namespace first, then the part's own arguments.


def split_no_transpose(x, n_heads):
    """Reshape straight to (..., n_heads, n, d_head): right shape, tokens and heads mixed up."""
    *lead, n, d_model = x.shape
    return x.reshape(*lead, n_heads, n, d_model // n_heads)


def merge_no_transpose(x):
    """Reshape (..., n_heads, n, d_head) straight to (..., n, d_model)."""
    *lead, n_heads, n, d_head = x.shape
    return x.reshape(*lead, n, n_heads * d_head)


def split_strided(x, n_heads):
    """Head k gets the strided columns k, k + n_heads, k + 2 n_heads, ..."""
    *lead, n, d_model = x.shape
    return np.moveaxis(x.reshape(*lead, n, d_model // n_heads, n_heads), -1, -3)


def merge_strided(x):
    """The inverse of split_strided: heads interleaved column by column."""
    *lead, n_heads, n, d_head = x.shape
    return np.moveaxis(x, -3, -1).reshape(*lead, n, n_heads * d_head)


def split_heads_first(x, n_heads):
    """np.stack(np.split(x, n_heads, axis=-1)): the heads on axis 0, in front of any batch axes."""
    return np.stack(np.split(x, n_heads, axis=-1))


def merge_heads_first(x):
    """np.concatenate(list(x), axis=-1): the inverse of split_heads_first, reading axis 0 as the heads."""
    return np.concatenate(list(x), axis=-1)


def split_swapping_last_axes(x, n_heads):
    """The reshape, then the LAST two axes swapped: (..., n, d_head, n_heads)."""
    *lead, n, d_model = x.shape
    return np.swapaxes(x.reshape(*lead, n, n_heads, d_model // n_heads), -2, -1)


def merge_swapping_last_axes(x):
    *lead, n_heads, n, d_head = x.shape
    return np.swapaxes(x, -2, -1).reshape(*lead, n, n_heads * d_head)


def split_unbatched_only(x, n_heads):
    """.transpose(1, 0, 2): right for one (n, d_model) sequence only."""
    n, d_model = x.shape[-2:]
    return x.reshape(n, n_heads, d_model // n_heads).transpose(1, 0, 2)


def merge_unbatched_only(x):
    return x.transpose(1, 0, 2).reshape(x.shape[1], -1)


def split_fixed_axes(x, n_heads):
    """.transpose(0, 2, 1, 3): right for (batch, n, d_model) inputs only; any other rank raises."""
    *lead, n, d_model = x.shape
    return x.reshape(*lead, n, n_heads, d_model // n_heads).transpose(0, 2, 1, 3)


def merge_fixed_axes(x):
    *lead, n_heads, n, d_head = x.shape
    return x.transpose(0, 2, 1, 3).reshape(*lead, n, n_heads * d_head)


def mha_built(ref, x, W_q, W_k, W_v, W_o, n_heads, causal=True, *, split=None, merge=None,
              scale=lambda d_head, d_model: np.sqrt(d_head), allowed=causal_allowed, softmax_axis=-1,
              project=lambda merged, W_o: merged @ W_o, transpose_weights=False, length=lambda x: x.shape[-2],
              mask_after_softmax=False):
    """The reference's recipe with one ingredient swapped (the defaults give the reference)."""
    split = split or ref.split_heads
    merge = merge or ref.merge_heads
    if transpose_weights:
        W_q, W_k, W_v, W_o = W_q.T, W_k.T, W_v.T, W_o.T
    q, k, v = (split(x @ W, n_heads) for W in (W_q, W_k, W_v))
    scores = q @ np.swapaxes(k, -1, -2) / scale(q.shape[-1], x.shape[-1])
    if causal and not mask_after_softmax:
        scores = np.where(allowed(length(x)), scores, -np.inf)
    weights = ref.softmax(scores, axis=softmax_axis)
    if causal and mask_after_softmax:
        weights = np.where(allowed(length(x)), weights, 0.0)
    return project(merge(weights @ v), W_o)


def mha_variant(**changes):
    def variant(ref, *args, **kwargs):
        return mha_built(ref, *args, **kwargs, **changes)

    return variant


def mha_causal_default_false(ref, x, W_q, W_k, W_v, W_o, n_heads, causal=False):
    return ref.multi_head_attention(x, W_q, W_k, W_v, W_o, n_heads, causal=causal)


def mha_causal_inverted(ref, x, W_q, W_k, W_v, W_o, n_heads, causal=True):
    return ref.multi_head_attention(x, W_q, W_k, W_v, W_o, n_heads, causal=not causal)


def mha_causal_forced(value):
    def variant(ref, x, W_q, W_k, W_v, W_o, n_heads, causal=True):
        return ref.multi_head_attention(x, W_q, W_k, W_v, W_o, n_heads, causal=value)

    return variant


MISCONCEPTIONS = (
    Misconception(
        "split_without_transpose",
        "heads made by reshaping straight to (..., n_heads, n, d_head), with no transpose",
        "That reshape reads the numbers in memory order, so a 'head' gets pieces of several tokens "
        "(and columns of other heads). Reshape to (..., n, n_heads, d_head) first, then swap the "
        "two axes: np.swapaxes(x, -3, -2). Do the reverse in merge_heads.",
        {
            "split_heads": lambda ref, x, n_heads: split_no_transpose(x, n_heads),
            "multi_head_attention": mha_variant(split=split_no_transpose, merge=merge_no_transpose),
        },
    ),
    Misconception(
        "split_strided_columns",
        "heads that own every n_heads-th column (h, h + n_heads, ...) instead of a block of d_head "
        "consecutive columns",
        "Cut the last axis as (n_heads, d_head), in that order: x.reshape(..., n, n_heads, d_head), "
        "so that head k owns columns k*d_head to (k+1)*d_head - 1.",
        {
            "split_heads": lambda ref, x, n_heads: split_strided(x, n_heads),
            "multi_head_attention": mha_variant(split=split_strided, merge=merge_strided),
        },
    ),
    Misconception(
        "merge_without_transpose",
        "heads merged by reshaping (..., n_heads, n, d_head) straight to (..., n, d_model), with no "
        "transpose back",
        "Swap the head and token axes back first (np.swapaxes(x, -3, -2)), then reshape: otherwise "
        "a token's row is filled with several tokens' answers from one head.",
        {
            "merge_heads": lambda ref, x: merge_no_transpose(x),
            "multi_head_attention": mha_variant(merge=merge_no_transpose),
        },
    ),
    Misconception(
        "merge_interleaved",
        "heads merged column by column (interleaved, as by stacking them on the last axis) instead "
        "of side by side",
        "Head 0's d_head columns come first, then head 1's, and so on: swap to (..., n, n_heads, "
        "d_head) and reshape, rather than moving the head axis to the end.",
        {
            "merge_heads": lambda ref, x: merge_strided(x),
            "multi_head_attention": mha_variant(merge=merge_strided),
        },
    ),
    Misconception(
        "heads_on_first_axis",
        "heads stacked on axis 0 (np.stack(np.split(x, n_heads, axis=-1))), in front of the batch axes",
        "That is right for one unbatched sequence only: with batch axes the heads must come just before "
        "the token axis, (..., n_heads, n, d_head). Stack on axis=-3 (and in merge_heads split or move "
        "axis -3, not axis 0), or reshape and swap the last axes.",
        {
            "split_heads": lambda ref, x, n_heads: split_heads_first(x, n_heads),
            "merge_heads": lambda ref, x: merge_heads_first(x),
        },
    ),
    Misconception(
        "heads_swap_last_two_axes",
        "the last two axes swapped (np.swapaxes(x, -2, -1)) instead of the head and token axes (-3 and -2)",
        "After x.reshape(..., n, n_heads, d_head), the token axis is -3 and the head axis -2: swap those, "
        "np.swapaxes(x, -3, -2), to get (..., n_heads, n, d_head); merge_heads swaps them back.",
        {
            "split_heads": lambda ref, x, n_heads: split_swapping_last_axes(x, n_heads),
            "merge_heads": lambda ref, x: merge_swapping_last_axes(x),
        },
    ),
    Misconception(
        "heads_transposed_for_one_sequence",
        "heads split or merged for one unbatched (n, d_model) sequence only (a fixed .transpose(1, 0, 2), or a "
        "reshape to (n, n_heads, d_head) that drops the batch axes)",
        "Name the two axes to swap from the end, so any number of batch axes works: np.swapaxes(x, -3, -2) "
        "after reshaping to (..., n, n_heads, d_head), and before the reshape in merge_heads.",
        {
            "split_heads": lambda ref, x, n_heads: split_unbatched_only(x, n_heads),
            "merge_heads": lambda ref, x: merge_unbatched_only(x),
        },
    ),
    Misconception(
        "heads_transposed_with_fixed_axes",
        "heads moved with .transpose(0, 2, 1, 3), which only fits inputs with exactly one batch axis",
        "Name the two axes to swap from the end, so any number of batch axes (or none) works: "
        "np.swapaxes(x, -3, -2) after the reshape in split_heads, and before it in merge_heads.",
        {
            "split_heads": lambda ref, x, n_heads: split_fixed_axes(x, n_heads),
            "merge_heads": lambda ref, x: merge_fixed_axes(x),
        },
    ),
    Misconception(
        "no_output_projection",
        "the output projection W_o left out",
        "After merging the heads, multiply by W_o: it is what lets every output feature combine "
        "the results of all heads.",
        {"multi_head_attention": mha_variant(project=lambda merged, W_o: merged)},
    ),
    Misconception(
        "output_projection_transposed",
        "the merged heads multiplied by W_o.T instead of W_o",
        "In this course weights multiply on the right: merged @ W_o (torch's Linear stores the "
        "transpose, but these are plain matrices).",
        {"multi_head_attention": mha_variant(project=lambda merged, W_o: merged @ W_o.T)},
    ),
    Misconception(
        "weights_transposed",
        "every weight used transposed (x @ W.T, torch Linear style)",
        "The weights here are (d_in, d_out) matrices used as x @ W: x @ W_q, x @ W_k, x @ W_v and "
        "merged @ W_o, with no .T.",
        {"multi_head_attention": mha_variant(transpose_weights=True)},
    ),
    Misconception(
        "scale_by_d_model",
        "each head's scores divided by sqrt(d_model) instead of sqrt(d_head)",
        "Each head's dot products are d_head = d_model // n_heads long, so the scale is "
        "np.sqrt(d_head); scaled_dot_product_attention on the split arrays does this by itself.",
        {"multi_head_attention": mha_variant(scale=lambda d_head, d_model: np.sqrt(d_model))},
    ),
    Misconception(
        "scale_by_d_head",
        "each head's scores divided by d_head in all instead of its square root (d_head in place of "
        "np.sqrt(d_head), or np.sqrt(d_head) applied twice)",
        "Divide by np.sqrt(d_head) once: not by d_head, and not on the queries and again inside "
        "scaled_dot_product_attention, which scales the scores by itself.",
        {"multi_head_attention": mha_variant(scale=lambda d_head, d_model: d_head)},
    ),
    Misconception(
        "no_scaling",
        "scores that are not divided by sqrt(d_head)",
        "Divide each head's Q K^T by np.sqrt(d_head) before the softmax.",
        {"multi_head_attention": mha_variant(scale=lambda d_head, d_model: 1.0)},
    ),
    Misconception(
        "causal_ignored",
        "no causal mask when causal=True",
        "With causal=True pass mask=np.tril(np.ones((n, n), dtype=bool)) to the attention, so "
        "token i only attends to tokens 0..i.",
        {"multi_head_attention": mha_causal_forced(False)},
    ),
    Misconception(
        "causal_default_false",
        "a signature whose default is causal=False",
        "The contract's default is causal=True: def multi_head_attention(x, W_q, W_k, W_v, W_o, n_heads, "
        "causal=True). A call that leaves `causal` out must get the causal mask.",
        {"multi_head_attention": mha_causal_default_false},
    ),
    Misconception(
        "causal_inverted",
        "the mask applied when causal=False and left out when causal=True (the test turned round)",
        "Build the mask `if causal:`, not `if not causal:`: causal=True is the masked, decoder case.",
        {"multi_head_attention": mha_causal_inverted},
    ),
    Misconception(
        "causal_always_on",
        "the causal mask applied even when causal=False",
        "Only build the mask when causal is True; with causal=False every token attends to every token.",
        {"multi_head_attention": mha_causal_forced(True)},
    ),
    Misconception(
        "mask_upper_triangle",
        "a mask that lets each token see the future instead of the past (np.triu instead of np.tril)",
        "True means 'may attend', and token i may attend to tokens 0..i: the lower triangle, "
        "np.tril(np.ones((n, n), dtype=bool)).",
        {"multi_head_attention": mha_variant(allowed=lambda n: np.triu(np.ones((n, n), dtype=bool)))},
    ),
    Misconception(
        "mask_blocked_convention",
        "a mask that is True where attending is FORBIDDEN (np.triu(..., k=1)) used as the allowed one",
        "np.where(mask, scores, -np.inf) keeps the scores where the mask is True, so the mask must mark "
        "the ALLOWED pairs: np.tril(np.ones((n, n), dtype=bool)). The blocked one lets each token read "
        "only the future, and the last token nothing at all (NaN).",
        {"multi_head_attention": mha_variant(allowed=lambda n: np.triu(np.ones((n, n), dtype=bool), k=1))},
    ),
    Misconception(
        "mask_after_softmax",
        "the mask applied to the weights after the softmax (zeroed, not renormalised)",
        "Put -inf into the masked scores before the softmax, so each row's remaining weights still sum "
        "to one.",
        {"multi_head_attention": mha_variant(mask_after_softmax=True)},
    ),
    Misconception(
        "seq_len_from_last_axis",
        "the mask's length taken from the model width (x.shape[-1] or d_model) instead of x.shape[-2]",
        "The causal mask is (n, n) with n = x.shape[-2], the number of tokens; d_model is each token's width.",
        {"multi_head_attention": mha_variant(length=lambda x: x.shape[-1])},
    ),
    Misconception(
        "softmax_over_queries",
        "a softmax taken over the queries' axis (-2) instead of the keys' axis (-1)",
        "Each query's weights over the keys must sum to one: softmax along axis=-1.",
        {"multi_head_attention": mha_variant(softmax_axis=-2)},
    ),
    Misconception(
        "seq_len_from_first_axis",
        "the sequence length read from the first axis (x.shape[0] or len(x)) instead of x.shape[-2]",
        "With batch axes in front, x.shape[0] is the batch size: the tokens are on axis -2, so the "
        "causal mask must be (n, n) with n = x.shape[-2].",
        {"multi_head_attention": mha_variant(length=lambda x: x.shape[0])},
    ),
    Misconception(
        "flops_multiply_adds",
        "a count of multiply-adds rather than FLOPs",
        "A multiply-add is 2 FLOPs: an (a, b) @ (b, c) product costs 2abc.",
        {"attention_flops": flops_variant(lambda n, d, h: 4 * n * d * d + 2 * n * n * d)},
    ),
    Misconception(
        "flops_no_output_projection",
        "a count without the output projection W_o",
        "There are four projections: W_q, W_k and W_v before the heads, and W_o after the merge.",
        {"attention_flops": flops_variant(lambda n, d, h: 6 * n * d * d + 4 * n * n * d)},
    ),
    Misconception(
        "flops_no_weighted_values",
        "a count with half the n x n work: the product of the weights with V left out, or both n x n "
        "products halved (for the causal mask, or counted at one FLOP per multiply-add)",
        "Each head does two n x n products: the scores Q_h K_h^T, and then the weights times V_h, each 2 n^2 "
        "d_head FLOPs (a multiply and an add per term). The layer computes both in full and masks afterwards, "
        "so the causal mask does not halve them here.",
        {"attention_flops": flops_variant(lambda n, d, h: 8 * n * d * d + 2 * n * n * d)},
    ),
    Misconception(
        "flops_projections_only",
        "a count of the four projections only, without the attention's own n x n products",
        "Besides x @ W_q, x @ W_k, x @ W_v and the merged heads @ W_o, each head computes Q_h K_h^T and "
        "then the weights times V_h: two products that grow with n^2.",
        {"attention_flops": flops_variant(lambda n, d, h: 8 * n * d * d)},
    ),
    Misconception(
        "flops_heads_times_d_model",
        "each head's scores counted at the full width d_model",
        "A head's dot products have length d_head = d_model / n_heads, so all heads together cost "
        "what one head of width d_model would.",
        {"attention_flops": flops_variant(lambda n, d, h: 8 * n * d * d + 4 * n * n * d * h)},
    ),
    Misconception(
        "flops_one_head_only",
        "the scores and weighted values counted for one head only",
        "Every head fills its own n x n table: multiply one head's cost by n_heads.",
        {"attention_flops": flops_variant(lambda n, d, h: 8 * n * d * d + 4 * n * n * (d // h))},
    ),
)


UNIT = graded()
