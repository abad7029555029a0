"""The graders themselves, for every unit: the reference earns full marks, the untouched
release earns nothing, every catalogued misconception loses points and is named, and
hand-written submissions (tests/submissions/<unit>/) are graded as they should be."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from autograder.core import grade_namespace, grade_part
from autograder.paths import ROOT, release_notebook, solution_notebook
from autograder.reference import load_reference
from autograder.units import UNITS

SUBMISSIONS = Path(__file__).parent / "submissions"
GRADED = [u for u in UNITS if solution_notebook(u).exists()]


def reference_namespace(unit: str) -> dict:
    return dict(vars(load_reference(unit)))


def check_cli(unit: str, path: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "autograder", "check", unit, str(path), "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("unit", GRADED)
def test_reference_gets_full_marks_through_the_cli(unit):
    report = check_cli(unit, solution_notebook(unit))
    assert set(report) >= {"unit", "score", "max_score", "checks"}
    assert report["unit"] == unit
    assert report["score"] == report["max_score"] == UNITS[unit].points
    for check in report["checks"]:
        assert set(check) >= {"name", "points", "max_points", "passed", "message", "misconception"}
        assert check["passed"] and check["misconception"] is None


@pytest.mark.parametrize("unit", GRADED)
def test_untouched_release_gets_zero(unit):
    report = check_cli(unit, release_notebook(unit))
    assert report["score"] == 0
    assert all(not c["passed"] for c in report["checks"])
    assert all("NotImplementedError" in c["message"] for c in report["checks"])


CASES = [
    (unit.name, mistake.name, part)
    for unit in UNITS.values()
    if solution_notebook(unit.name).exists()
    for mistake in unit.misconceptions
    for part in mistake.variants
]


@pytest.mark.parametrize(("unit", "mistake", "part"), CASES, ids=[f"{u}-{m}-{p}" for u, m, p in CASES])
def test_every_misconception_loses_points_and_is_named(unit, mistake, part):
    spec = UNITS[unit]
    variant = next(m for m in spec.misconceptions if m.name == mistake).variants[part]
    ref = load_reference(unit)
    namespace = reference_namespace(unit)
    namespace[part] = lambda *args, **kwargs: variant(ref, *args, **kwargs)
    results = grade_part(spec, part, namespace)
    assert sum(r.points for r in results) < spec.part(part).points, f"{mistake} earned full marks on {part}"
    named = [r for r in results if r.misconception == mistake]
    assert named, f"{mistake} was not named; messages: {[r.message for r in results if not r.passed]}"
    description = next(m for m in spec.misconceptions if m.name == mistake).description
    assert description in named[0].message


def submission_files(prefix: str):
    return sorted(
        (unit, path)
        for unit in GRADED
        for path in (SUBMISSIONS / unit).glob(f"{prefix}_*.py")
    )


@pytest.mark.parametrize(("unit", "path"), submission_files("correct"), ids=lambda v: getattr(v, "name", v))
def test_correct_implementations_written_differently_get_full_marks(unit, path):
    report = check_cli(unit, path)
    failed = [c["message"] for c in report["checks"] if not c["passed"]]
    assert report["score"] == report["max_score"], failed


@pytest.mark.parametrize(("unit", "path"), submission_files("wrong"), ids=lambda v: getattr(v, "name", v))
def test_hand_written_mistakes_are_named(unit, path):
    expected = path.stem.removeprefix("wrong_")
    assert expected in {m.name for m in UNITS[unit].misconceptions}, f"{path.name}: no misconception {expected}"
    report = check_cli(unit, path)
    assert report["score"] < report["max_score"]
    assert expected in {c["misconception"] for c in report["checks"]}, [c["message"] for c in report["checks"]]


@pytest.mark.parametrize("unit", GRADED)
def test_every_part_has_an_unchanged_inputs_check_and_fixed_seeds(unit):
    spec = UNITS[unit]
    first = grade_namespace(spec, reference_namespace(unit))
    second = grade_namespace(spec, reference_namespace(unit))
    assert [r.to_json() for r in first] == [r.to_json() for r in second]


def test_a_looping_function_costs_its_own_checks_only():
    spec = UNITS["01_attention"]
    namespace = reference_namespace("01_attention")

    def softmax(x, axis=-1):
        while True:
            pass

    namespace["softmax"] = softmax
    results = grade_namespace(spec, namespace, seconds=0.5)
    lost = {r.name.split("/")[0] for r in results if not r.passed}
    assert lost == {"softmax"}
    assert "did not finish" in next(r.message for r in results if not r.passed)


def test_a_loop_that_swallows_the_interrupt_is_still_stopped():
    spec = UNITS["01_attention"]
    namespace = reference_namespace("01_attention")

    def softmax(x, axis=-1):
        try:
            while True:
                pass
        except BaseException:  # noqa: BLE001 - the student's bare except swallows the first stop
            pass
        while True:
            pass

    namespace["softmax"] = softmax
    results = grade_part(spec, "softmax", namespace, seconds=0.3)
    assert all(not r.passed for r in results)


def test_modifying_inputs_in_place_is_caught():
    spec = UNITS["01_attention"]
    namespace = reference_namespace("01_attention")
    reference_softmax = namespace["softmax"]

    def softmax(x, axis=-1):
        x -= x.max(axis=axis, keepdims=True)
        return reference_softmax(x, axis)

    namespace["softmax"] = softmax
    results = {r.name: r for r in grade_part(spec, "softmax", namespace)}
    assert not results["softmax/inputs_unchanged"].passed
    assert "in place" in results["softmax/inputs_unchanged"].message


def test_a_missing_function_is_reported_not_raised():
    results = grade_part(UNITS["01_attention"], "softmax", {})
    assert all(not r.passed and "not defined" in r.message for r in results)


def test_misconception_matching_needs_a_matching_answer_not_just_a_wrong_one():
    spec = UNITS["01_attention"]
    namespace = reference_namespace("01_attention")
    namespace["softmax"] = lambda x, axis=-1: np.full_like(np.asarray(x, float), 0.5)
    results = grade_part(spec, "softmax", namespace)
    value_checks = [r for r in results if not r.name.endswith("unchanged")]
    assert all(not r.passed and r.misconception is None for r in value_checks)
    assert any("largest error" in r.message or "sum" in r.message for r in value_checks)


def test_a_grader_shows_the_student_no_traceback_and_returns_a_clamped_float(capsys):
    from autograder import grade

    namespace = reference_namespace("01_attention")
    namespace["softmax"] = lambda x, axis=-1: 1 / 0
    score = grade("01_attention", "softmax", namespace)
    out, err = capsys.readouterr()
    assert type(score) is float and score == 0.0
    assert "Traceback" not in out and err == ""
    assert "ZeroDivisionError" in out


def test_a_broken_grader_still_returns_zero_quietly(capsys):
    from autograder import grade

    score = grade("01_attention", "no_such_part", {})
    out, err = capsys.readouterr()
    assert score == 0.0 and err == "" and "could not check" in out


def test_cli_reports_bad_input_without_a_traceback(tmp_path):
    bad = tmp_path / "notes.txt"
    bad.write_text("hello")
    for args in (["01_attention", str(bad)], ["99_nothing", str(bad)], ["01_attention", str(tmp_path / "gone.py")]):
        proc = subprocess.run([sys.executable, "-m", "autograder", "check", *args],
                              cwd=ROOT, capture_output=True, text=True)
        assert proc.returncode == 2
        assert "Traceback" not in proc.stderr + proc.stdout


def test_namespace_swap_is_undone():
    ns = reference_namespace("01_attention")
    sdpa = ns["scaled_dot_product_attention"]
    grade_part(UNITS["01_attention"], "self_attention", ns)
    assert ns["scaled_dot_product_attention"] is sdpa
    assert isinstance(load_reference("01_attention"), SimpleNamespace)


def test_modifying_the_mask_in_place_is_caught():
    spec = UNITS["01_attention"]
    namespace = reference_namespace("01_attention")
    reference_sdpa = namespace["scaled_dot_product_attention"]

    def scaled_dot_product_attention(Q, K, V, mask=None):
        if mask is not None:
            mask[..., 0] = True  # "make sure every row has something to attend to"
        return reference_sdpa(Q, K, V, mask=mask)

    namespace["scaled_dot_product_attention"] = scaled_dot_product_attention
    results = {r.name: r for r in grade_part(spec, "scaled_dot_product_attention", namespace)}
    assert not results["scaled_dot_product_attention/inputs_unchanged"].passed


def test_a_student_warning_or_stderr_print_does_not_zero_the_cell(capsys):
    import warnings

    from autograder import grade

    namespace = reference_namespace("01_attention")
    reference_softmax = namespace["softmax"]

    def softmax(x, axis=-1):
        warnings.warn("my softmax is experimental", stacklevel=2)
        print("debug: computing softmax", file=sys.stderr)
        np.exp(np.array([1e4]))  # an overflow RuntimeWarning, too
        return reference_softmax(x, axis)

    namespace["softmax"] = softmax
    score = grade("01_attention", "softmax", namespace)
    out, err = capsys.readouterr()
    assert score == UNITS["01_attention"].part("softmax").points
    assert err == "" and "debug" not in out
