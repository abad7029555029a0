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

from autograder.engine.catalogue import variant_namespace
from autograder.engine.grade import grade_part, grade_student
from autograder.engine.reference import load_reference
from autograder.paths import ROOT, release_notebook, solution_notebook
from autograder.trust.student import InProcessStudent, Student
from autograder.units import UNITS

SUBMISSIONS = Path(__file__).parent / "submissions"
GRADED = [u for u in UNITS if solution_notebook(u).exists()]


def reference_namespace(unit: str) -> dict:
    return dict(vars(load_reference(unit)))


def trusted(namespace: dict) -> InProcessStudent:
    """The catalogue's own variants and the reference are course code: they run in-process."""
    return InProcessStudent(namespace)


def worker(source: str, **kwargs) -> Student:
    """Student code, in a sandboxed worker as in real grading."""
    student = Student([("answer", source)], **kwargs)
    student.start()
    return student


REFERENCE_SOFTMAX = """
import numpy as np

def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)
"""


def check_cli(unit: str, path: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "autograder", "check", unit, str(path), "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


# One unit through `check --json`, the command's contract. Every unit's reference is graded at
# full marks through the graders' other command line by tests/test_feedback_line.py (validate),
# and through real nbgrader by the sample class; the untouched release likewise.
CLI_UNIT = "01_attention"


def test_reference_gets_full_marks_through_the_cli(unit=CLI_UNIT):
    report = check_cli(unit, solution_notebook(unit))
    assert set(report) >= {"unit", "score", "max_score", "checks"}
    assert report["unit"] == unit
    assert report["score"] == report["max_score"] == UNITS[unit].points
    for check in report["checks"]:
        assert set(check) >= {"name", "points", "max_points", "passed", "message", "misconception"}
        assert check["passed"] and check["misconception"] is None


def test_untouched_release_gets_zero(unit=CLI_UNIT):
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
    namespace = variant_namespace(spec.part(part), load_reference(unit), variant)
    results = grade_part(spec, part, trusted(namespace))
    assert sum(r.points for r in results) < sum(r.max_points for r in results), f"{mistake} lost no points on {part}"
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
    # Every part, in the sandboxed worker, as the hidden tests grade it (the command line around
    # them is tested on unit 01 above, and on every reference by validate and the sample class).
    usage = {}
    checks = grade_parts_in_worker(unit, path, [p.name for p in UNITS[unit].parts], usage)
    failed = [c["message"] for c in checks if not c["passed"]]
    assert sum(c["points"] for c in checks) == UNITS[unit].points, failed
    # Far inside the run's budget (autograder/trust/budget.py), which is sized from the reference's cost:
    # a correct answer written otherwise must never come near it.
    budget = UNITS[unit].budget
    assert usage["cpu_seconds"] <= budget.cpu_seconds / 2 and usage["waiting_seconds"] <= budget.waiting_seconds / 2, \
        usage


def grade_parts_in_worker(unit: str, path: Path, parts, usage: dict | None = None) -> list[dict]:
    """Grade `parts` of a submission in a sandboxed worker, as `course.py check` does (without
    the pytest process around it: a wrong answer only needs the parts its mistake is in), within
    the unit's budget; `usage` receives what the submission spent of it."""
    spec = UNITS[unit]
    student = Student.open(path, hidden=tuple(str(ROOT / name) for name in spec.hidden),
                           imports=spec.worker_imports, budget=spec.budget)
    try:
        return [r.to_json() for part in parts for r in grade_part(spec, part, student)]
    finally:
        student.close()
        if usage is not None:
            usage.update(student.usage())


@pytest.mark.parametrize(("unit", "path"), submission_files("wrong"), ids=lambda v: getattr(v, "name", v))
def test_hand_written_mistakes_are_named(unit, path):
    expected = path.stem.removeprefix("wrong_").split("__")[0]  # wrong_<mistake>__<how>.py: one of several
    mistakes = {m.name: m for m in UNITS[unit].misconceptions}
    assert expected in mistakes, f"{path.name}: no misconception {expected}"
    checks = grade_parts_in_worker(unit, path, list(mistakes[expected].variants))
    assert sum(c["points"] for c in checks) < sum(c["max_points"] for c in checks)
    # Named, and the only name given in any part it is graded on: a named mistake that is not the
    # one written is a defect (precision, not only coverage: issue 29).
    named = {c["misconception"] for c in checks} - {None}
    assert named == {expected}, [c["message"] for c in checks if not c["passed"]]


@pytest.mark.parametrize(("unit", "path"), submission_files("wrong2"), ids=lambda v: getattr(v, "name", v))
def test_two_mistakes_in_one_part_are_both_named(unit, path):
    """wrong2_<mistake>__<mistake>.py: each shows in checks of its own, and each is named there."""
    expected = set(path.stem.removeprefix("wrong2_").split("__"))
    mistakes = {m.name: m for m in UNITS[unit].misconceptions}
    assert expected <= set(mistakes), f"{path.name}: not two catalogued mistakes"
    parts = set.intersection(*(set(mistakes[name].variants) for name in expected))
    checks = grade_parts_in_worker(unit, path, sorted(parts))
    named = {c["misconception"] for c in checks} - {None}
    assert named == expected, [c["message"] for c in checks if not c["passed"]]
    assert all("One of two mistakes" in c["message"] for c in checks if c["misconception"])


@pytest.mark.parametrize("unit", GRADED)
def test_every_part_has_an_unchanged_inputs_check_and_fixed_seeds(unit):
    spec = UNITS[unit]
    first = grade_student(spec, trusted(reference_namespace(unit)))
    second = grade_student(spec, trusted(reference_namespace(unit)))
    assert [r.to_json() for r in first] == [r.to_json() for r in second]


def test_a_looping_function_costs_its_own_checks_only():
    spec = UNITS["01_attention"]
    source = (SUBMISSIONS / "01_attention" / "correct_loops.py").read_text() + (
        "\n\ndef softmax(x, axis=-1):\n    while True:\n        pass\n")
    with worker(source) as student:
        results = grade_student(spec, student, seconds=0.5)
    lost = {r.name.split("/")[0] for r in results if not r.passed}
    assert lost == {"softmax"}
    assert "did not finish" in next(r.message for r in results if not r.passed)


def test_a_loop_that_swallows_the_interrupt_is_still_stopped():
    spec = UNITS["01_attention"]
    source = """
def softmax(x, axis=-1):
    try:
        while True:
            pass
    except BaseException:  # the student's bare except swallows the first stop
        pass
    while True:
        pass
"""
    with worker(source) as student:
        results = grade_part(spec, "softmax", student, seconds=0.3)
    assert all(not r.passed for r in results)


def test_a_loop_that_ignores_the_alarm_is_killed_and_the_rest_still_graded():
    spec = UNITS["01_attention"]
    source = REFERENCE_SOFTMAX + """
import signal

def scaled_dot_product_attention(Q, K, V, mask=None):
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    while True:
        pass
"""
    with worker(source) as student:
        looping = grade_part(spec, "scaled_dot_product_attention", student, seconds=0.5)
        softmax = grade_part(spec, "softmax", student)
        assert student.restarts >= 1
    assert all(not r.passed for r in looping) and "did not finish" in looping[0].message
    assert all(r.passed for r in softmax)


def test_modifying_inputs_in_place_is_caught():
    spec = UNITS["01_attention"]
    source = REFERENCE_SOFTMAX.replace("def softmax(x, axis=-1):", "def softmax(x, axis=-1):\n    x -= 1.0")
    with worker(source) as student:
        results = {r.name: r for r in grade_part(spec, "softmax", student)}
    assert not results["softmax/inputs_unchanged"].passed
    assert "in place" in results["softmax/inputs_unchanged"].message


def test_a_missing_function_is_reported_not_raised():
    results = grade_part(UNITS["01_attention"], "softmax", trusted({}))
    assert all(not r.passed and "not defined" in r.message for r in results)


def test_misconception_matching_needs_a_matching_answer_not_just_a_wrong_one():
    spec = UNITS["01_attention"]
    namespace = reference_namespace("01_attention")
    namespace["softmax"] = lambda x, axis=-1: np.full_like(np.asarray(x, float), 0.5)
    results = grade_part(spec, "softmax", trusted(namespace))
    value_checks = [r for r in results if not r.name.endswith("unchanged")]
    assert all(not r.passed and r.misconception is None for r in value_checks)
    assert any("largest error" in r.message or "sum" in r.message for r in value_checks)


def test_a_student_exception_is_one_line_with_no_traceback():
    spec = UNITS["01_attention"]
    with worker("def softmax(x, axis=-1):\n    return 1 / 0\n") as student:
        results = grade_part(spec, "softmax", student)
    assert all(not r.passed for r in results)
    assert "ZeroDivisionError" in results[0].message and "Traceback" not in results[0].message


def test_a_broken_grader_scores_zero_and_says_it_is_the_graders_fault(tmp_path):
    broken = ROOT / "autograder" / "tests" / "test_zz_broken_for_a_test.py"
    broken.write_text(
        "import pytest\n"
        "from autograder.grading.plugin import check_cases, grade\n"
        "from autograder.units.attention import UNIT\n\n"
        "@check_cases(UNIT, 'softmax')\n"
        "def test_softmax(student, check):\n"
        "    raise RuntimeError('a bug in the grader')\n"
    )
    report_path = tmp_path / "report.json"
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", str(broken), "--submission", str(solution_notebook("01_attention")),
             "--grading-json", str(report_path), "-q", "-p", "no:cacheprovider", "-o", "addopts="],
            cwd=ROOT, capture_output=True, text=True, timeout=300,
        )
    finally:
        broken.unlink()
    report = json.loads(report_path.read_text())
    assert proc.returncode == 1
    assert report["score"] == 0 and report["max_score"] == UNITS["01_attention"].part("softmax").points
    assert all("could not check" in c["message"] and "a bug in the grader" in c["message"]
               for c in report["checks"])


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
    grade_part(UNITS["01_attention"], "self_attention", trusted(ns))
    assert ns["scaled_dot_product_attention"] is sdpa
    assert isinstance(load_reference("01_attention"), SimpleNamespace)


def test_contract_helpers_are_the_references_while_a_part_is_graded():
    # The student's softmax is wrong; their attention calls it. Attention is graded with the
    # reference softmax in its place, so the softmax bug costs points once.
    source = (SUBMISSIONS / "01_attention" / "correct_loops.py").read_text() + (
        "\n\ndef softmax(x, axis=-1):\n    return x * 0.0\n")
    with worker(source) as student:
        results = grade_student(UNITS["01_attention"], student)
    lost = {r.name.split("/")[0] for r in results if not r.passed}
    assert lost == {"softmax"}


def test_modifying_the_mask_in_place_is_caught():
    spec = UNITS["01_attention"]
    source = (SUBMISSIONS / "01_attention" / "correct_loops.py").read_text() + """

_correct_sdpa = scaled_dot_product_attention

def scaled_dot_product_attention(Q, K, V, mask=None):
    if mask is not None:
        mask[..., 0] = True  # "make sure every row has something to attend to"
    return _correct_sdpa(Q, K, V, mask=mask)
"""
    with worker(source) as student:
        results = {r.name: r for r in grade_part(spec, "scaled_dot_product_attention", student)}
    assert not results["scaled_dot_product_attention/inputs_unchanged"].passed


FAKE_GENERATORS = """
import random

import numpy as np
import torch

# The generators replaced by constants, so that they "draw the same" after any load.
random.random = lambda: 0.25
np.random.rand = lambda *shape: np.full(shape, 0.25)
torch.rand = lambda *shape, **kwargs: torch.full(shape, 0.25)


def save_checkpoint(path, model, optimizer, step, **state):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step, "state": state}, path)


def load_checkpoint(path, model, optimizer):
    checkpoint = torch.load(path, weights_only=False)
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    return checkpoint["step"], checkpoint["state"]
"""


def test_generators_replaced_in_the_students_process_do_not_pass_for_restored(tmp_path):
    """Unit 08 reads the generators' draws from the student's process: replaced by constants, they
    would "draw again what they drew" after a load that restores nothing."""
    path = tmp_path / "fake_generators.py"
    path.write_text(FAKE_GENERATORS)
    checks = {c["name"]: c for c in grade_parts_in_worker("08_training", path, ["load_checkpoint"])}
    generators = checks["load_checkpoint/generators"]
    assert not generators["passed"] and "something replaced them" in generators["message"], generators


DOES_NOTHING = """
def clip_grad_norm(parameters, max_norm):
    return None


def save_checkpoint(path, model, optimizer, step, **state):
    return None


def load_checkpoint(path, model, optimizer):
    return None
"""


def test_functions_that_do_nothing_earn_nothing_from_checks_a_no_op_passes(tmp_path):
    """Unit 08's probes that see inputs left alone, small gradients left alone or a load that gives
    the same twice pass for a function that does nothing: they count only beside a check that
    shows the function works (`Check.kind == "unchanged"`, `requires`)."""
    path = tmp_path / "does_nothing.py"
    path.write_text(DOES_NOTHING)
    checks = grade_parts_in_worker("08_training", path, ["clip_grad_norm", "save_checkpoint", "load_checkpoint"])
    assert sum(c["points"] for c in checks) == 0, [c["message"] for c in checks if c["points"]]


def test_a_student_warning_or_stderr_print_costs_nothing():
    source = REFERENCE_SOFTMAX.replace("def softmax(x, axis=-1):", """def softmax(x, axis=-1):
    import sys, warnings
    warnings.warn("my softmax is experimental", stacklevel=2)
    print("debug: computing softmax", file=sys.stderr)
    np.exp(np.array([1e4]))  # an overflow RuntimeWarning, too""")
    with worker(source) as student:
        results = grade_part(UNITS["01_attention"], "softmax", student)
    assert all(r.passed for r in results), [r.message for r in results]


@pytest.mark.parametrize(("source", "says"), [
    ("from coursekit.gpt import GPT", "imports the course's `coursekit.gpt`"),
    ("import coursekit.gpt\n\nclass GPT(coursekit.gpt.GPT):\n    pass", "imports the course's `coursekit.gpt`"),
    # an import the text does not show: the course's file is empty in unit 05's sandbox
    ("import importlib\n\nGPT = importlib.import_module('coursekit' + '.gpt').GPT", "is not defined"),
])
def test_the_model_given_to_later_units_earns_nothing_in_unit_05(source, says):
    spec = UNITS["05_model"]
    with worker(source, hidden=tuple(str(ROOT / path) for path in spec.hidden)) as student:
        results = grade_part(spec, "GPT", student)
    assert all(not r.passed for r in results)
    assert says in results[0].message, results[0].message


@pytest.mark.parametrize(("part", "answer"), [
    ("count_parameters",
     "def count_parameters(config):\n    return sum(p.numel() for p in GPT(config).parameters())\n"),
    ("parameter_breakdown", "def parameter_breakdown(config):\n    model = GPT(config)\n"
     "    return {'embeddings': model.token_emb.weight.numel() + model.pos_emb.weight.numel(), 'attention': 0,\n"
     "            'ffn': 0, 'norms': 0, 'lm_head': 0}\n"),
])
def test_unit_05_counts_are_arithmetic_not_a_built_model(part, answer):
    # As the visible checks say: building the modules hands the count to PyTorch.
    spec = UNITS["05_model"]
    source = (SUBMISSIONS / "05_model" / "correct_loops.py").read_text() + "\n\n" + answer
    with worker(source, hidden=tuple(str(ROOT / path) for path in spec.hidden)) as student:
        results = grade_part(spec, part, student)
    assert all(not r.passed and "off limits" in r.message for r in results), [r.message for r in results]


def test_a_failure_says_which_helpers_were_the_references():
    spec = UNITS["01_attention"]
    mistake = next(m for m in spec.misconceptions if "scaled_dot_product_attention" in m.variants)
    namespace = variant_namespace(spec.part("scaled_dot_product_attention"), load_reference("01_attention"),
                                  mistake.variants["scaled_dot_product_attention"])
    failed = [r for r in grade_part(spec, "scaled_dot_product_attention", trusted(namespace)) if not r.passed]
    assert failed and all("the `softmax` it calls was the reference's, not yours" in r.message for r in failed)


def test_an_exception_costs_the_value_checks_not_the_inputs_unchanged_point():
    spec = UNITS["01_attention"]
    # Correct without a mask, and an unrelated exception with one: the inputs-unchanged check
    # (which passes a mask) is judged on the inputs as the failed call left them.
    source = (SUBMISSIONS / "01_attention" / "correct_loops.py").read_text() + """

_correct_sdpa = scaled_dot_product_attention

def scaled_dot_product_attention(Q, K, V, mask=None):
    if mask is not None:
        raise ValueError("masks are not supported yet")
    return _correct_sdpa(Q, K, V)
"""
    with worker(source) as student:
        results = {r.name.split("/")[1]: r for r in grade_part(spec, "scaled_dot_product_attention", student)}
    assert results["unbatched"].passed and not results["random_mask"].passed
    assert results["inputs_unchanged"].passed, results["inputs_unchanged"].message
    assert "masks are not supported yet" in results["inputs_unchanged"].message


def test_a_function_that_raises_everywhere_earns_nothing():
    with worker("def softmax(x, axis=-1):\n    raise ValueError('not yet')\n") as student:
        results = grade_part(UNITS["01_attention"], "softmax", student)
    assert sum(r.points for r in results) == 0
    unchanged = next(r for r in results if r.name.endswith("inputs_unchanged"))
    assert "not counted" in unchanged.message


@pytest.mark.parametrize("unit", GRADED)
def test_the_grader_loads_what_defines_the_answers_not_the_checks_figures_and_demos(unit, tmp_path):
    """The worker runs the setup cells, the answer cells and any cell the student added; the
    locked visible checks, figures and demos only test or show, and the kernel runs them."""
    import nbformat

    from autograder.trust.submission import SHOWS_ONLY_PREFIXES, code_cells, nbgrader_meta

    nb = nbformat.read(solution_notebook(unit), as_version=4)
    shows_only = [nbgrader_meta(c)["grade_id"] for c in nb.cells
                  if str(nbgrader_meta(c).get("grade_id", "")).startswith(SHOWS_ONLY_PREFIXES)]
    answers = [nbgrader_meta(c)["grade_id"] for c in nb.cells if nbgrader_meta(c).get("solution")]
    assert any(name.startswith("check_") for name in shows_only)
    nb.cells.append(nbformat.v4.new_code_cell("def helper_of_mine():\n    return 1"))
    path = tmp_path / "submission.ipynb"
    nbformat.write(nb, path)
    labels = [label for label, _ in code_cells(path)]
    assert labels[0] == "setup" and set(answers) <= set(labels)
    assert not set(shows_only) & set(labels)
    assert labels[-1] == f"cell {len(nb.cells)}", "a cell the student added must still be run"


FORKED_RUN = """
import json, os, sys
from pathlib import Path
from autograder.grading import run as grading_run
from autograder.grading.forked import Forked

unit, path, seconds = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3])
grading_run.prepare_forked_runs(unit)
run = grading_run.GradingRun(unit, path)
assert isinstance(run.proc, Forked), type(run.proc)
try:
    report, _ = run.result(seconds)
    print(json.dumps({"score": report["score"], "checks": report["checks"]}))
except grading_run.GradingFailed as err:
    try:
        os.waitpid(run.proc.pid, os.WNOHANG)
        reaped = False
    except ChildProcessError:
        reaped = True
    print(json.dumps({"failed": str(err), "reaped": reaped}))
"""


def test_a_forked_grading_run_grades_as_a_fresh_process_does(tmp_path):
    """`course.py autograde`'s workers fork the hidden tests from a process that has them
    imported; the report must be the one a fresh `python -m pytest` gives, and a run past its
    time is killed and reaped."""
    wrong = SUBMISSIONS / "01_attention" / "wrong_no_scaling.py"
    forked = subprocess.run([sys.executable, "-c", FORKED_RUN, "01_attention", str(wrong), "120"], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert forked.returncode == 0, forked.stderr
    fresh = check_cli("01_attention", wrong)
    assert json.loads(forked.stdout) == {"score": fresh["score"], "checks": fresh["checks"]}
    assert 0 < fresh["score"] < fresh["max_score"]

    looping = tmp_path / "loops.py"
    looping.write_text("def softmax(x, axis=-1):\n    while True:\n        pass\n")
    stopped = subprocess.run([sys.executable, "-c", FORKED_RUN, "01_attention", str(looping), "2"], cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
    assert stopped.returncode == 0, stopped.stderr
    assert json.loads(stopped.stdout) == {"failed": "the hidden tests of 01_attention ran past 2 s", "reaped": True}
