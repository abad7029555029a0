"""Unit 03 (multi-head attention): the checks specific to this unit's grader.

The PyTorch oracle is trusted only because it agrees with the reference (and with a plain
loop over heads written here) on many shapes; every catalogued mistake must lose points and
be named; every check must fail on some wrong implementation; the notebook's visible checks
must pass on the reference and catch the unit's typical bug.
"""

from __future__ import annotations

import functools
import sys

import nbformat
import numpy as np
import pytest

from autograder.engine import grade
from autograder.engine.reference import load_reference
from autograder.engine.spec import Inputs, seeded_rng
from autograder.grading.run import check as check_file
from autograder.paths import ROOT, solution_notebook
from autograder.trust.student import InProcessStudent
from autograder.trust.submission import is_reference_cell, nbgrader_meta
from autograder.units import get_unit
from autograder.units import multihead as mh


# The functions graded here are the course's own (the reference, catalogued variants and
# small wrong versions written in this file), so they run in-process; submissions written
# as files go through the sandboxed worker (`check_file`, tests/test_graders.py).
def grade_part(unit, part, namespace, *args, **kwargs):
    return grade.grade_part(unit, part, InProcessStudent(namespace), *args, **kwargs)


UNIT = get_unit("03_multihead")
SUBMISSIONS = ROOT / "tests" / "submissions" / "03_multihead"

# (batch, n, d_model, n_heads): no/one/two batch axes, one head, heads of width 1, d_model != n.
SHAPES = [
    ((), 6, 8, 2),
    ((2,), 5, 12, 3),
    ((2, 3), 4, 8, 4),
    ((3,), 7, 6, 1),
    ((2,), 6, 4, 4),
    ((1,), 1, 6, 3),
    ((2,), 9, 16, 8),
]


@pytest.fixture(scope="module")
def ref():
    return load_reference(UNIT.name)


def random_layer(shape, seed=0):
    batch, n, d_model, n_heads = shape
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(*batch, n, d_model))
    weights = [rng.normal(0.0, d_model**-0.5, (d_model, d_model)) for _ in range(4)]
    return x, weights, n_heads


def loop_over_heads(x, W_q, W_k, W_v, W_o, n_heads, causal=True):
    """A third, deliberately plain implementation: one head at a time, one query at a time."""
    *lead, n, d_model = x.shape
    d_head = d_model // n_heads
    flat = x.reshape(-1, n, d_model)
    out = np.zeros_like(flat)
    for b, seq in enumerate(flat):
        answers = []
        for h in range(n_heads):
            cols = slice(h * d_head, (h + 1) * d_head)
            q, k, v = seq @ W_q[:, cols], seq @ W_k[:, cols], seq @ W_v[:, cols]
            rows = []
            for i in range(n):
                visible = i + 1 if causal else n
                scores = k[:visible] @ q[i] / np.sqrt(d_head)
                w = np.exp(scores - scores.max())
                rows.append((w / w.sum()) @ v[:visible])
            answers.append(np.array(rows))
        out[b] = np.concatenate(answers, axis=-1) @ W_o
    return out.reshape(*lead, n, d_model)


# ---------------------------------------------------------------- the oracle is trustworthy


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_torch_oracle_agrees_with_reference_and_a_plain_loop(ref, shape, causal):
    pytest.importorskip("torch")
    x, weights, n_heads = random_layer(shape)
    from_torch = mh.torch_multi_head_attention(x, *weights, n_heads, causal=causal)
    assert from_torch.shape == x.shape
    np.testing.assert_allclose(from_torch, ref.multi_head_attention(x, *weights, n_heads, causal=causal),
                               rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(from_torch, loop_over_heads(x, *weights, n_heads, causal=causal),
                               rtol=1e-10, atol=1e-12)


def test_torch_oracle_is_not_the_reference_in_disguise():
    """With the weights' roles permuted, torch must disagree: it really reads W_q, W_k, W_v, W_o."""
    pytest.importorskip("torch")
    x, (W_q, W_k, W_v, W_o), n_heads = random_layer(((2,), 5, 8, 2), seed=1)
    right = mh.torch_multi_head_attention(x, W_q, W_k, W_v, W_o, n_heads)
    assert not np.allclose(right, mh.torch_multi_head_attention(x, W_k, W_q, W_v, W_o, n_heads))
    assert not np.allclose(right, mh.torch_multi_head_attention(x, W_q, W_k, W_v, W_o.T, n_heads))
    assert not np.allclose(right, mh.torch_multi_head_attention(x, W_q, W_k, W_v, W_o, n_heads, causal=False))


def test_oracle_checks_use_torch_with_the_check_arguments(ref):
    pytest.importorskip("torch")
    part = UNIT.part("multi_head_attention")
    oracle_checks = [c for c in part.checks if c.oracle is not None]
    assert len(oracle_checks) >= 2
    assert {c.make_inputs(np.random.default_rng(0)).kwargs.get("causal", True) for c in oracle_checks} == {True, False}
    for c in oracle_checks:
        inputs = c.make_inputs(seeded_rng(UNIT.name, part.name, c.name))
        expected = c.oracle(inputs)
        np.testing.assert_allclose(expected, mh.torch_multi_head_attention(*inputs.args, **inputs.kwargs))
        np.testing.assert_allclose(expected, ref.multi_head_attention(*inputs.args, **inputs.kwargs),
                                   rtol=1e-10, atol=1e-12)


def test_oracle_falls_back_to_the_reference_without_torch(ref, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    x, weights, n_heads = random_layer(((2,), 5, 8, 2))
    got = mh.torch_oracle(Inputs((x, *weights, n_heads), {"causal": False}))
    np.testing.assert_array_equal(got, ref.multi_head_attention(x, *weights, n_heads, causal=False))


def test_round_trip_oracle_gives_x_back():
    x = np.random.default_rng(2).normal(size=(2, 6, 10))
    np.testing.assert_array_equal(mh.round_trip_oracle(Inputs((mh.own_split(x, 5),))), x)


# ---------------------------------------------------------------- the grader's building blocks


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_grader_split_merge_and_recipe_match_reference(ref, shape):
    x, weights, n_heads = random_layer(shape)
    np.testing.assert_array_equal(mh.own_split(x, n_heads), ref.split_heads(x, n_heads))
    np.testing.assert_array_equal(mh.own_merge(ref.split_heads(x, n_heads)), x)
    np.testing.assert_array_equal(ref.merge_heads(ref.split_heads(x, n_heads)), x)
    for causal in (True, False):
        # The variants are the reference's recipe with one ingredient swapped: no change, no difference.
        np.testing.assert_allclose(mh.mha_built(ref, x, *weights, n_heads, causal=causal),
                                   ref.multi_head_attention(x, *weights, n_heads, causal=causal),
                                   rtol=1e-12, atol=1e-12)


def test_head_k_owns_a_block_of_columns(ref):
    x = 100 * np.arange(4)[:, None] + np.arange(12)  # entry [t, c] = 100 t + c
    heads = ref.split_heads(x, 3)
    assert heads.shape == (3, 4, 4)
    for k in range(3):
        np.testing.assert_array_equal(heads[k], x[:, 4 * k:4 * (k + 1)])


# ---------------------------------------------------------------- the catalogue and the checks

def test_catalogue_is_large_enough_and_has_the_required_mistakes():
    names = {m.name for m in UNIT.misconceptions}
    assert len(names) == len(UNIT.misconceptions) >= 8
    assert {"split_without_transpose", "split_strided_columns", "no_output_projection", "scale_by_d_model",
            "merge_without_transpose"} <= names


# Every catalogued variant, and every tests/submissions/03_multihead/wrong_*.py, is graded and
# must be named by the course-wide tests of tests/test_graders.py.


def wrong_implementations(ref):
    """Catalogued variants plus a few mistakes the catalogue does not name, by part."""

    def split_unbatched_only(x, n_heads):
        n, d = x.shape[-2:]
        return x.reshape(n, n_heads, d // n_heads).swapaxes(0, 1)

    def split_mutating(x, n_heads):
        x[..., 0] = 0.0
        return ref.split_heads(x, n_heads)

    def merge_list_concat(x):  # right without batch axes: list(x) walks the first axis, not the heads
        return np.concatenate(list(x), axis=-1)

    def merge_mutating(x):
        x *= 2.0
        return ref.merge_heads(x) / 2.0

    def mha_mutating(x, W_q, W_k, W_v, W_o, n_heads, causal=True):
        W_q *= 2.0
        return ref.multi_head_attention(x, W_q / 2.0, W_k, W_v, W_o, n_heads, causal)

    wrong = {
        "split_heads": {"unbatched_only": split_unbatched_only, "mutating": split_mutating},
        "merge_heads": {"list_concat": merge_list_concat, "mutating": merge_mutating},
        "multi_head_attention": {"mutating": mha_mutating},
        "attention_flops": {},
    }
    for m in UNIT.misconceptions:
        for part, variant in m.variants.items():
            wrong[part][m.name] = functools.partial(variant, ref)
    return wrong


@pytest.mark.parametrize("part", [p.name for p in UNIT.parts])
def test_every_check_fails_on_some_wrong_implementation(ref, part):
    never_failed = {c.name for c in UNIT.part(part).checks}
    for fn in wrong_implementations(ref)[part].values():
        namespace = dict(vars(ref))
        namespace[part] = fn
        never_failed -= {r.name.split("/", 1)[1] for r in grade_part(UNIT, part, namespace) if not r.passed}
    assert not never_failed, f"checks of {part} that no wrong implementation fails: {sorted(never_failed)}"


def test_reference_passes_every_check(ref):
    results = [r for p in UNIT.parts for r in grade_part(UNIT, p.name, dict(vars(ref)))]
    assert all(r.passed for r in results), [r.message for r in results if not r.passed]


def test_torch_shortcuts_are_refused_with_a_plain_message(ref):
    torch = pytest.importorskip("torch")

    def via_torch(x, W_q, W_k, W_v, W_o, n_heads, causal=True):
        *lead, n, d = x.shape
        q, k, v = (torch.from_numpy(mh.own_split(x @ W, n_heads)) for W in (W_q, W_k, W_v))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return mh.own_merge(out.numpy()) @ W_o

    namespace = dict(vars(ref))
    namespace["multi_head_attention"] = via_torch
    results = grade_part(UNIT, "multi_head_attention", namespace)
    assert sum(r.points for r in results) == 0
    assert all("off limits" in r.message for r in results)
    # ... and torch works again afterwards.
    assert torch.nn.functional.scaled_dot_product_attention.__name__ == "scaled_dot_product_attention"


# ---------------------------------------------------------------- the hand-written submissions


@pytest.mark.parametrize("path", sorted(SUBMISSIONS.glob("correct_*.py")), ids=lambda p: p.name)
def test_correct_submissions_get_full_marks(path):
    report = check_file(UNIT.name, str(path))
    assert report["load_notes"] == []
    failed = [c["message"] for c in report["checks"] if not c["passed"]]
    assert report["score"] == report["max_score"] == UNIT.points, failed


def test_there_are_enough_hand_written_submissions():
    assert len(list(SUBMISSIONS.glob("correct_*.py"))) >= 3
    assert len(list(SUBMISSIONS.glob("wrong_*.py"))) >= 3


# ---------------------------------------------------------------- the notebook


def notebook_cells():
    return nbformat.read(solution_notebook(UNIT.name), as_version=4).cells


def run_cells(sources):
    namespace = {"__name__": "__notebook__"}
    for source in sources:
        exec(compile(source, "<cell>", "exec"), namespace)
    return namespace


def test_setup_attention_cell_is_locked_reference_code():
    cells = {nbgrader_meta(c).get("grade_id"): c for c in notebook_cells()}
    setup = cells["setup_attention"]
    meta = nbgrader_meta(setup)
    assert meta["locked"] and not meta["grade"] and not meta["solution"]
    assert is_reference_cell(setup)
    assert "def scaled_dot_product_attention(" in setup.source and "def softmax(" in setup.source


def test_visible_checks_pass_on_the_reference():
    sources = [c.source for c in notebook_cells()
               if c.cell_type == "code" and (is_reference_cell(c) or
                                             str(nbgrader_meta(c).get("grade_id", "")).startswith("check_"))]
    run_cells(sources)


def test_sample_bug_occurs_once_is_named_and_fails_the_visible_check():
    bug = UNIT.sample_bug
    cells = notebook_cells()
    defining = [c for c in cells if nbgrader_meta(c).get("solution") and f"def {bug.part}(" in c.source]
    assert len(defining) == 1 and defining[0].source.count(bug.old) == 1
    buggy = [c.source.replace(bug.old, bug.new) if c is defining[0] else c.source
             for c in cells if c.cell_type == "code" and is_reference_cell(c)]
    namespace = run_cells(buggy)
    results = grade_part(UNIT, bug.part, namespace)
    assert sum(r.points for r in results) < UNIT.part(bug.part).points
    assert any(r.misconception == bug.expect for r in results)
    visible = next(c for c in cells if nbgrader_meta(c).get("grade_id") == f"check_{bug.part}")
    with pytest.raises(AssertionError):
        exec(visible.source, namespace)


def test_grade_cells_and_points_match_the_grader():
    cells = {nbgrader_meta(c).get("grade_id"): c for c in notebook_cells()}
    for part in UNIT.parts:
        meta = nbgrader_meta(cells[f"grade_{part.name}"])
        assert meta["grade"] and meta["locked"] and meta["points"] == part.points
    headers = [line for c in notebook_cells() if c.cell_type == "markdown"
               for line in c.source.splitlines() if line.startswith("## ")]
    for number, part in enumerate(UNIT.parts, start=1):
        header = next(h for h in headers if h.startswith(f"## {number}."))
        assert header.endswith(f"({part.points:g} points)"), header
    quiz_ids = [c.metadata.get("quiz") for c in notebook_cells() if "quiz" in c.metadata]
    assert quiz_ids == ["ex-split-shapes", "ex-split-transpose", "ex-scale-dhead", "ex-wo-role"]


def test_a_count_halved_for_the_causal_mask_is_named_and_told_the_mask_does_not_halve_it(ref):
    # The layer computes both n x n products in full and masks afterwards, so halving them for the
    # causal mask is wrong; it gives the same counts as leaving out the weights @ V product, so the
    # one catalogued mistake describes both.
    def halved(n, d_model, n_heads):
        return 8 * n * d_model**2 + 4 * n**2 * d_model // 2

    namespace = dict(vars(ref))
    namespace["attention_flops"] = halved
    failed = [r for r in grade_part(UNIT, "attention_flops", namespace) if not r.passed]
    assert failed and all(r.misconception == "flops_no_weighted_values" for r in failed)
    assert "does not halve" in failed[0].message
