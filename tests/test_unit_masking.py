"""Unit 02 (masking): tests specific to this unit's grader and reference.

The generic suite grades the sample submissions and every catalogued misconception; here we
check what is particular to 02_masking: that the reference leak detector gives the known
truth on every attention function the grader hands it (and keeps doing so for other seeds,
so that any sound detector can earn the points), that the tolerances in the checks sit
where the notebook says, that every check can fail, and the dtype policy for masks.
"""

from __future__ import annotations

import copy

import nbformat
import numpy as np
import pytest

from autograder.engine import grade
from autograder.engine.reference import load_reference
from autograder.paths import release_notebook, solution_notebook
from autograder.trust.student import InProcessStudent
from autograder.trust.submission import nbgrader_meta
from autograder.units import get_unit
from autograder.units import masking as spec


# The functions graded here are the course's own (the reference, catalogued variants and
# small wrong versions written in this file), so they run in-process; submissions written
# as files go through the sandboxed worker (`check_file`, tests/test_graders.py).
def grade_part(unit, part, namespace, *args, **kwargs):
    return grade.grade_part(unit, part, InProcessStudent(namespace), *args, **kwargs)


def grade_namespace(unit, namespace, *args, **kwargs):
    return grade.grade_student(unit, InProcessStudent(namespace), *args, **kwargs)


UNIT = "02_masking"
CASES = {case.name: case for case in spec.ORACLE_CASES}


@pytest.fixture(scope="module")
def ref():
    return load_reference(UNIT)


@pytest.fixture(scope="module")
def unit():
    return get_unit(UNIT)


def namespace_with(ref, **replacements):
    ns = {k: v for k, v in vars(ref).items()}
    ns.update(replacements)
    return ns


# ---------------------------------------------------------------- the oracles and the reference detector


@pytest.mark.parametrize("case", spec.ORACLE_CASES, ids=lambda c: c.name)
def test_reference_verdict_is_the_known_truth(ref, case):
    # A copy, as the engine makes one of a check's inputs: a function with state starts afresh.
    assert bool(ref.looks_causal(copy.deepcopy(case.fn), **case.kwargs)) == case.causal


@pytest.mark.parametrize("case", spec.ORACLE_CASES, ids=lambda c: c.name)
def test_verdict_does_not_hang_on_the_seed(ref, case):
    # A student's detector draws different random numbers: every leak must show up (and no
    # causal function may seem to leak) for any seed, even with a single trial.
    # (Save the two leaks that open only in a second trial: they are there to need every trial.)
    second_trial = case.name in ("leak_after_one_trial", "leak_on_a_new_input")
    for seed in range(30):
        kwargs = {**case.kwargs, "seed": seed, "trials": 2 if second_trial else 1}
        assert bool(ref.looks_causal(copy.deepcopy(case.fn), **kwargs)) == case.causal, (case.name, seed)


def test_the_truth_table_covers_both_answers():
    verdicts = [case.causal for case in spec.ORACLE_CASES]
    assert verdicts.count(True) >= 5 and verdicts.count(False) >= 5


def test_the_oracles_really_do_what_their_names_say():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 4))
    second = x.copy()
    second[1] = rng.normal(size=4)
    # the next-into-first leak moves output 0 when position 1 changes
    assert np.abs(spec.next_into_first(second) - spec.next_into_first(x))[0].max() > 1e-9
    # the column leak keeps every row's sum, and column 0
    assert np.allclose(spec.column_leak(second).sum(axis=-1), spec._attend(second, spec._lower(8), seed=13)[0].sum(-1))
    assert np.abs(spec.column_leak(second) - spec.column_leak(x))[0].max() > 1e-9
    later = x.copy()
    later[7] = rng.normal(size=4)
    # the second-to-last leak moves only output 6
    moved = np.abs(spec.last_into_second_last(later) - spec.last_into_second_last(x))[:7].max(axis=-1) > 1e-9
    assert moved.tolist() == [False] * 6 + [True]
    # the input-dependent leak is silent for positive inputs
    ones = np.ones((8, 4))
    gated_ones = spec.leak_for_negative_inputs(ones) - spec._attend(ones, spec._lower(8), seed=5)[0]
    assert np.abs(gated_ones).max() == 0.0
    # the squared leak: a change of sign after position 0 moves nothing; a change of size moves output 0
    flipped = x.copy()
    flipped[1:] = -flipped[1:]
    assert np.abs(spec.squared_leak(flipped) - spec.squared_leak(x))[0].max() == 0.0
    assert np.abs(spec.squared_leak(second) - spec.squared_leak(x))[0].max() > 1e-9
    # the leak on a new input: causal on copies of its first x (position 0 kept), leaking on another x
    fresh = spec.LeakOnNewInput()
    assert np.abs(fresh(second) - fresh(x))[0].max() == 0.0
    other = rng.normal(size=(8, 4))
    changed = other.copy()
    changed[1] = rng.normal(size=4)
    assert np.abs(fresh(changed) - fresh(other))[0].max() > 1e-9
    # the leak after one trial: its first 8 calls (on n = 8) are causal attention, the next ones leak
    stateful = spec.LeakAfterOneTrial()
    first = [stateful(x), stateful(second)] + [stateful(x) for _ in range(6)]
    assert np.abs(first[1] - first[0])[0].max() == 0.0
    assert np.abs(stateful(second) - stateful(x))[0].max() > 1e-9
    # the mask built for ten positions is causal up to n = 10, leaky beyond
    for n in (8, 10):
        assert spec.mask_built_for_ten(np.ones((n, 3))).shape == (n, 3)
    assert bool(load_reference(UNIT).looks_causal(spec.mask_built_for_ten, n=10))
    assert not load_reference(UNIT).looks_causal(spec.mask_built_for_ten, n=11)


def test_tolerance_window_between_roundoff_and_the_tiny_leak():
    # The notebook promises: round-off is far below 1e-9, the tiny leak far above it (and
    # below the 1e-2 a loose detector would accept).
    rng = np.random.default_rng(1)
    tiny, roundoff = [], []
    for _ in range(200):
        x = rng.normal(size=(8, 4))
        i = int(rng.integers(0, 7))
        y = x.copy()
        y[i + 1:] = rng.normal(size=(7 - i, 4))
        tiny.append(np.abs(spec.tiny_leak(x)[: i + 1] - spec.tiny_leak(y)[: i + 1]).max())
        roundoff.append(np.abs(spec.causal_with_roundoff(x)[: i + 1] - spec.causal_with_roundoff(y)[: i + 1]).max())
    assert 1e-5 < min(tiny) and max(tiny) < 1e-2
    assert max(roundoff) < 1e-12
    assert np.mean(np.array(roundoff) > 0) > 0.2, "the round-off oracle should really differ at round-off level"


def test_plain_causal_attention_is_causal_bit_for_bit():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(8, 4))
    y = x.copy()
    y[5:] = rng.normal(size=(3, 4))
    assert np.array_equal(spec.causal_attention(x)[:5], spec.causal_attention(y)[:5])


# ---------------------------------------------------------------- the reference itself


def test_reference_gets_full_marks(ref, unit):
    results = grade_namespace(unit, namespace_with(ref))
    assert all(r.passed for r in results), [r.message for r in results if not r.passed]
    assert unit.points == 20


def test_reference_attention_passes_its_own_leak_detector(ref):
    rng = np.random.default_rng(3)
    W_q, W_k, W_v = (rng.normal(size=(4, 5)) for _ in range(3))
    assert ref.looks_causal(lambda x: ref.causal_self_attention(x, W_q, W_k, W_v))
    assert not ref.looks_causal(lambda x: ref.self_attention(x, W_q, W_k, W_v))


def test_provided_functions_are_a_locked_reference_cell_and_ship_intact():
    def cell(path, grade_id):
        nb = nbformat.read(path, as_version=4)
        return next(c for c in nb.cells if nbgrader_meta(c).get("grade_id") == grade_id)

    source = cell(solution_notebook(UNIT), "setup_attention")
    meta = nbgrader_meta(source)
    assert meta["locked"] and not meta["grade"] and not meta["solution"]
    for name in ("softmax", "scaled_dot_product_attention", "self_attention"):
        assert f"def {name}(" in source.source
    released = cell(release_notebook(UNIT), "setup_attention")
    assert released.source == source.source


# ---------------------------------------------------------------- the checks


def test_every_check_can_fail(ref, unit):
    """Each check fails for at least one wrong implementation (catalogued or below)."""

    def always(verdict):
        return lambda attn_fn, n=8, d=4, trials=3, seed=0: verdict

    def csa_scaling_in_place(x, W_q, W_k, W_v):
        W_q *= 1.0 / np.sqrt(W_q.shape[-1])  # right result, but the caller's W_q is changed
        scores = (x @ W_q) @ np.swapaxes(x @ W_k, -1, -2)
        scores = np.where(ref.causal_mask(x.shape[-2]), scores, -np.inf)
        return ref.softmax(scores) @ (x @ W_v)

    def pairs_padding_in_place(tokens):
        targets = tokens[..., 1:].copy()
        tokens[..., -1] = 0  # "pad" the last token: right result, input changed
        return tokens[..., :-1], targets

    wrong = {part.name: [] for part in unit.parts}
    for mistake in unit.misconceptions:
        for part, variant in mistake.variants.items():
            wrong[part].append(lambda *a, v=variant, **k: v(ref, *a, **k))
    wrong["looks_causal"] += [always(True), always(False)]
    wrong["causal_self_attention"].append(csa_scaling_in_place)
    wrong["next_token_pairs"].append(pairs_padding_in_place)
    wrong["causal_mask"].append(lambda n: np.ones((n, n), dtype=bool))

    for part in unit.parts:
        failed = set()
        for fn in wrong[part.name]:
            failed |= {r.name for r in grade_part(unit, part.name, namespace_with(ref, **{part.name: fn}))
                       if not r.passed}
        never = {f"{part.name}/{c.name}" for c in part.checks} - failed
        assert not never, f"checks that no wrong implementation fails: {sorted(never)}"


@pytest.mark.parametrize("dtype", [float, int, np.uint8])
def test_a_zero_one_mask_loses_only_the_dtype_check(ref, unit, dtype):
    def mask(n):
        return np.tril(np.ones((n, n))).astype(dtype)

    results = grade_part(unit, "causal_mask", namespace_with(ref, causal_mask=mask))
    failed = [r for r in results if not r.passed]
    assert [r.name for r in failed] == ["causal_mask/dtype_bool"]
    assert "bool" in failed[0].message and failed[0].misconception == "mask_as_numbers"


def test_float_token_ids_lose_only_the_dtype_check(ref, unit):
    def pairs(tokens):
        tokens = tokens.astype(float)
        return tokens[..., :-1], tokens[..., 1:]

    results = grade_part(unit, "next_token_pairs", namespace_with(ref, next_token_pairs=pairs))
    failed = [r for r in results if not r.passed]
    assert [r.name for r in failed] == ["next_token_pairs/batch"]
    assert "integers" in failed[0].message and failed[0].misconception == "token_ids_as_floats"


def test_mask_messages_point_at_the_wrong_entry(ref, unit):
    def strictly_lower(n):
        return np.tril(np.ones((n, n), dtype=bool), k=-1)

    results = grade_part(unit, "causal_mask", namespace_with(ref, causal_mask=strictly_lower))
    first = results[0]
    assert not first.passed and "(0, 0)" in first.message and "diagonal" in first.message
    assert first.misconception == "mask_diagonal_excluded"


def test_a_student_bug_in_causal_mask_costs_points_once(ref, unit):
    # causal_self_attention calls causal_mask, which the grader swaps for the reference's.
    def upper(n):
        return np.triu(np.ones((n, n), dtype=bool))

    ns = namespace_with(ref, causal_mask=upper)
    exec(
        "def causal_self_attention(x, W_q, W_k, W_v):\n"
        "    return self_attention(x, W_q, W_k, W_v, mask=causal_mask(x.shape[-2]))\n",
        ns,
    )
    results = grade_namespace(unit, ns)
    lost = {r.name.split("/")[0] for r in results if not r.passed}
    assert lost == {"causal_mask"}


def test_looks_causal_must_return_a_bool(ref, unit):
    results = grade_part(unit, "looks_causal",
                         namespace_with(ref, looks_causal=lambda f, n=8, d=4, trials=3, seed=0: int(
                             ref.looks_causal(f, n, d, trials, seed))))
    assert not any(r.passed for r in results)
    assert "True or False" in results[0].message


def test_detector_messages_say_what_leaks(ref, unit):
    results = grade_part(unit, "looks_causal",
                         namespace_with(ref, looks_causal=lambda f, n=8, d=4, trials=3, seed=0: True))
    by_check = {r.name.split("/")[1]: r for r in results}
    assert "position 1 change the output at position 0" in by_check["next_into_first"].message
    # Right about causal attention, but it never says "leaks": that verdict is not counted.
    assert not by_check["causal_attention"].passed and "not counted" in by_check["causal_attention"].message


def test_the_sample_bug_is_named(unit):
    bug = unit.sample_bug
    nb = nbformat.read(solution_notebook(UNIT), as_version=4)
    cells = [c for c in nb.cells if nbgrader_meta(c).get("solution") and f"def {bug.part}(" in c.source]
    assert len(cells) == 1 and cells[0].source.count(bug.old) == 1
    ns: dict = {}
    exec(cells[0].source.replace(bug.old, bug.new), {"np": np}, ns)
    ref = load_reference(UNIT)
    results = grade_part(unit, bug.part, namespace_with(ref, **{bug.part: ns[bug.part]}))
    assert any(not r.passed for r in results)
    assert bug.expect in {r.misconception for r in results}


def test_a_detector_that_never_changes_its_answer_earns_nothing():
    unit = get_unit("02_masking")
    ref = load_reference("02_masking")
    for verdict in (True, False):
        namespace = dict(vars(ref))
        namespace["looks_causal"] = lambda attn_fn, n=8, d=4, trials=3, seed=0, v=verdict: v
        results = grade_part(unit, "looks_causal", namespace)
        assert sum(r.points for r in results) == 0, verdict
        assert any("not counted" in r.message for r in results)


def test_no_two_detector_mistakes_give_the_same_verdicts(ref):
    # A verdict is one bit: two catalogued detectors that answer alike on every check could never
    # be told apart, so neither would ever be named.
    tables = {}
    for mistake in spec.MISCONCEPTIONS:
        variant = mistake.variants.get("looks_causal")
        if variant is not None:
            table = tuple(bool(variant(ref, copy.deepcopy(case.fn), **case.kwargs)) for case in spec.ORACLE_CASES)
            assert table not in tables, f"{mistake.name} answers exactly as {tables.get(table)}"
            tables[table] = mistake.name


@pytest.mark.parametrize("n", [1, 4])
def test_an_additive_mask_is_named_as_such_not_read_as_booleans(ref, unit, n):
    def additive(n):
        return np.where(np.tril(np.ones((n, n), dtype=bool)), 0.0, -np.inf)

    results = grade_part(unit, "causal_mask", namespace_with(ref, causal_mask=additive))
    failed = [r for r in results if not r.passed]
    assert len(failed) == len(results)
    first = next(r for r in results if r.name == f"causal_mask/n_{n}")
    assert "additive" in first.message and "diagonal" not in first.message
    assert first.misconception == "mask_additive_float"


# Detectors wrong in one way each, which every other oracle case passes (issue 29's fresh answers):
# each case is the one that catches one of them (two keys for the column leak: one column, row sums).
DETECTOR_SLIPS = {
    "small_leak_on_large_outputs": "np.allclose(after[: i + 1], before[: i + 1])",  # rtol=1e-5 by default
    "middle_leak": "ENDS_ONLY",
    "column_leak": "np.allclose(after[: i + 1, 0], before[: i + 1, 0], rtol=0.0, atol=1e-9)",
    "column_leak ": "np.allclose(after[: i + 1].sum(-1), before[: i + 1].sum(-1), rtol=0.0, atol=1e-9)",
    "next_into_first": "FROM_ONE",
}
DETECTOR = """
import numpy as np

def looks_causal(attn_fn, n=8, d=4, trials=3, seed=0):
    rng = np.random.default_rng(seed)
    for _ in range(trials):
        x = rng.normal(size=(n, d))
        before = np.asarray(attn_fn(x.copy()), dtype=float)
        for i in SPLITS:
            changed = x.copy()
            changed[i + 1:] = rng.normal(size=(n - 1 - i, d))
            after = np.asarray(attn_fn(changed), dtype=float)
            if not COMPARE:
                return False
    return True
"""
EXACT = "np.allclose(after[: i + 1], before[: i + 1], rtol=0.0, atol=1e-9)"


@pytest.mark.parametrize("case", sorted(DETECTOR_SLIPS))
def test_each_new_oracle_case_catches_a_detector_the_others_pass(ref, unit, case):
    slip = DETECTOR_SLIPS[case]
    splits = {"ENDS_ONLY": "[0, n - 2]", "FROM_ONE": "range(1, n - 1)"}.get(slip, "range(n - 1)")
    source = DETECTOR.replace("SPLITS", splits).replace("COMPARE", EXACT if slip in ("ENDS_ONLY", "FROM_ONE") else slip)
    namespace = dict(vars(ref))
    exec(compile(source, "detector", "exec"), namespace)  # the course's own test code, trusted
    failed = {r.name.split("/")[1] for r in grade_part(unit, "looks_causal", namespace) if not r.passed}
    assert failed == {case.strip()}, failed


def test_an_attention_that_exponentiates_unshifted_scores_fails_on_large_ones(ref, unit):
    """Full marks once (the fresh set): the scores were never large enough to overflow exp."""
    def causal_self_attention(x, W_q, W_k, W_v):
        q, k, v = x @ W_q, x @ W_k, x @ W_v
        n = x.shape[-2]
        scores = np.where(np.tril(np.ones((n, n), dtype=bool)), q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1]),
                          -np.inf)
        with np.errstate(over="ignore", invalid="ignore"):
            e = np.exp(scores)
            return (e / e.sum(axis=-1, keepdims=True)) @ v

    results = grade_part(unit, "causal_self_attention",
                         namespace_with(ref, causal_self_attention=causal_self_attention))
    failed = {r.name: r.message for r in results if not r.passed}
    assert list(failed) == ["causal_self_attention/long_sharp"] and "overflow in exp" in failed[
        "causal_self_attention/long_sharp"], failed


def test_tokens_reshaped_in_place_are_told_so(ref, unit):
    """`tokens.shape = (-1, n)` changes the caller's array: full marks once (the fresh set)."""
    def next_token_pairs(tokens):
        n = tokens.shape[-1]
        lead = tokens.shape[:-1]
        tokens.shape = (-1, n)
        return tokens[:, :-1].reshape(*lead, n - 1), tokens[:, 1:].reshape(*lead, n - 1)

    results = grade_part(unit, "next_token_pairs", namespace_with(ref, next_token_pairs=next_token_pairs))
    failed = {r.name: r.message for r in results if not r.passed}
    assert list(failed) == ["next_token_pairs/inputs_unchanged"] and "changed the shape" in failed[
        "next_token_pairs/inputs_unchanged"], failed


# The template above made plainly correct, for the tests below to break one way at a time.
CORRECT_DETECTOR = DETECTOR.replace("SPLITS", "range(n - 1)").replace("COMPARE", EXACT)


def test_a_detector_that_returns_after_its_first_trial_loses_the_stateful_leak(ref, unit):
    """Kept 20/20 (the fresh set fresh29e): a `return True` inside the loop over trials; every leak
    of the other cases shows in one trial."""
    source = CORRECT_DETECTOR.replace("\n    return True", "\n        return True")  # inside the trial loop
    namespace = namespace_with(ref)
    exec(compile(source, "answer", "exec"), namespace)  # the course's own test code
    results = grade.grade_part(unit, "looks_causal", InProcessStudent(namespace))
    failed = {r.name: r.message for r in results if not r.passed}
    # (one trial draws one x: the leak on a new input never opens for it either)
    assert list(failed) == ["looks_causal/leak_after_one_trial", "looks_causal/leak_on_a_new_input"], failed
    assert "is a `return True` inside the loop over trials?" in failed["looks_causal/leak_after_one_trial"]


@pytest.mark.parametrize("old, new, case", [
    ("rng = np.random.default_rng(seed)\n    for _ in range(trials):",
     "for _ in range(trials):\n        rng = np.random.default_rng(seed)", "leak_on_a_new_input"),
    ("changed[i + 1:] = rng.normal(size=(n - 1 - i, d))", "changed[i + 1:] = -changed[i + 1:]", "squared_leak"),
    ("atol=1e-9", "atol=1e-6", "faint_leak"),
])
def test_a_detector_that_reseeds_flips_signs_or_tolerates_1e6_loses_its_case(ref, unit, old, new, case):
    """Each kept 20/20 in the fresh set fresh29f (graded before these cases were made)."""
    source = CORRECT_DETECTOR
    namespace = namespace_with(ref)
    exec(compile(source, "answer", "exec"), namespace)  # the course's own test code
    assert all(r.passed for r in grade.grade_part(unit, "looks_causal", InProcessStudent(namespace)))
    assert old in source
    exec(compile(source.replace(old, new), "answer", "exec"), namespace)
    failed = [r.name for r in grade.grade_part(unit, "looks_causal", InProcessStudent(namespace)) if not r.passed]
    assert f"looks_causal/{case}" in failed, failed
