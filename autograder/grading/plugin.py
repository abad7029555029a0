"""The pytest plugin behind the hidden graders (`autograder/tests/test_<unit>.py`).

A grader file reads like ordinary pytest: one test per graded function, parametrised by
that function's checks, each check carrying its points:

    @check_cases(UNIT, "softmax")
    def test_softmax(student, check):
        grade(student, UNIT, "softmax", check)

`student` is the submission named by `--submission PATH` (a notebook or a .py file),
running in a sandboxed worker (`student.py`). `grade` runs the check's comparison
against the reference, names the catalogued misconception the answer matches, and fails
the test with the message a student will read. At the end of the session the plugin
writes the report (`--grading-json PATH`: unit, score, max_score, checks, load_notes) that
`course.py check` prints and nbgrader's grade cells are filled from.

Run one by hand from the course root:

    python -m pytest autograder/tests/test_01_attention.py --submission path/to/attention.ipynb
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from ..engine.grade import grade_part
from ..engine.report import GRADER_FAILED, fmt, total
from ..engine.spec import CHECK_SECONDS, CheckResult, Unit
from ..trust.budget import Budget
from ..trust.sandbox import SandboxUnavailable
from ..trust.submission import Unreadable


def pytest_addoption(parser):
    group = parser.getgroup("grading", "hidden graders")
    group.addoption("--submission", help="the notebook or .py file to grade")
    group.addoption("--grading-json", help="write the grading report here as JSON")
    group.addoption("--call-seconds", type=float, default=CHECK_SECONDS,
                    help="seconds one call of a student's function may take (default %(default)s)")
    group.addoption("--cell-seconds", type=float, default=None,
                    help="seconds one cell of the submission may run while it is loaded (default: nbgrader's)")
    group.addoption("--parts", default=None,
                    help="grade these parts only (comma-separated names; default: every part)")


def pytest_configure(config):
    config.addinivalue_line("markers", "points(n): the points a hidden check is worth")
    config._grading = {"results": {}, "order": [], "units": [], "notes": [], "error": None, "grader_error": None}


# ---------------------------------------------------------------- fixtures


def worker_setup(unit_names: list[str]) -> dict:
    """What the worker of these units' submissions is started with, before any of their code:
    the course files it shows empty, and what it imports first (what the checks need imported
    before a timed call, and what the unit's notebook imports: its start is nobody's account,
    and a worker started ahead, `student.PreparedWorker`, has it done before a check comes)."""
    from ..paths import ROOT
    from ..units import get_unit

    units = [get_unit(name) for name in unit_names]
    imports = [name for unit in units for name in (*unit.worker_imports, *release_imports(unit.name))]
    return {"hidden": tuple(str(ROOT / name) for unit in units for name in unit.hidden),
            "imports": tuple(dict.fromkeys(imports))}


@functools.cache
def release_imports(unit_name: str) -> tuple[str, ...]:
    """The modules the unit's released notebook imports, course modules apart (the student's
    code imports those itself: some are the exercise, shown empty), read from its source."""
    import ast

    from ..paths import EXERCISES
    from ..trust.submission import Unreadable, code_cells

    found = []
    for notebook in sorted((EXERCISES / unit_name).glob("*.ipynb")):
        try:
            cells = code_cells(notebook)
        except Unreadable:
            continue
        for _, source in cells:
            try:
                tree = ast.parse(source)
            except SyntaxError:
                continue
            for node in tree.body:
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
                found += [n for n in names if n.split(".")[0] != "coursekit"]
    return tuple(dict.fromkeys(found))


@pytest.fixture(scope="session")
def student(request):
    from ..trust.student import Student
    from ..units import get_unit

    path = request.config.getoption("--submission")
    if not path:
        raise pytest.UsageError("the hidden graders need --submission PATH (a notebook or a .py file)")
    state = request.config._grading
    units = [get_unit(name) for name in state["units"]]
    try:
        budgets = [unit.budget for unit in units]
        options = {"call_seconds": request.config.getoption("--call-seconds"),
                   **worker_setup(state["units"]),
                   # several units in one run (the course's own tests): their budgets add up
                   "budget": Budget(sum(b.cpu_seconds for b in budgets), sum(b.waiting_seconds for b in budgets))
                   if budgets else None}
        if request.config.getoption("--cell-seconds"):
            options["cell_seconds"] = request.config.getoption("--cell-seconds")
        submission = Student.open(path, **options)
    except Unreadable as err:
        state["error"] = str(err)
        pytest.exit(f"cannot grade: {err}", returncode=2)
    except SandboxUnavailable as err:
        _grader_failed(state, err)
    state["notes"] = submission.notes
    state["student"] = submission
    yield submission
    submission.close()


def _grader_failed(state: dict, err: Exception):
    """The grader, not the submission, failed (no sandbox could start): the whole run stops,
    and its report says so, so that nothing is recorded for this student."""
    state["grader_error"] = str(err)
    pytest.exit(f"the grader failed: {err}", returncode=3)


# ---------------------------------------------------------------- what a grader file uses


def check_cases(unit: Unit, part: str):
    """Parametrise a test over the checks of one graded part, each with its points."""
    checks = unit.part(part).checks
    return pytest.mark.parametrize(
        "check", [pytest.param(c, id=c.name, marks=pytest.mark.points(c.points)) for c in checks]
    )


def grade(student, unit: Unit, part: str, check) -> CheckResult:
    """Pass or fail this check, with the message the student will read.

    A part's checks are graded together, once (a check may count only with another, and a
    function that timed out is not called again), then reported one test at a time.
    """
    config = _session_config()
    cache = config._grading.setdefault("parts", {})
    key = (unit.name, part)
    if key not in cache:
        try:
            results = grade_part(unit, part, student, config.getoption("--call-seconds"))
        except SandboxUnavailable as err:
            _grader_failed(config._grading, err)
        cache[key] = {r.name.split("/", 1)[1]: r for r in results}
    result = cache[key][check.name]
    config._grading["results"][_current_nodeid()] = result
    if not result.passed:
        pytest.fail(result.message, pytrace=False)
    return result


_CONFIG = None
_NODEID = None


def pytest_sessionstart(session):
    global _CONFIG
    _CONFIG = session.config


def _session_config():
    return _CONFIG


def _current_nodeid():
    return _NODEID


def pytest_collection_modifyitems(session, config, items):
    """Remember each check's place and points, for checks the grader never got to report;
    with --parts, keep only those parts' checks (a check line asking about one part pays for
    that part's checks alone: its report has no other part in it)."""
    state = config._grading
    asked = config.getoption("--parts", default=None)
    if asked:
        wanted = set(asked.split(","))
        keep = [item for item in items if item.originalname.removeprefix("test_") in wanted]
        config.hook.pytest_deselected(items=[item for item in items if item not in keep])
        items[:] = keep
    for item in items:
        marker = item.get_closest_marker("points")
        check = getattr(item, "callspec", None) and item.callspec.params.get("check")
        module_unit = getattr(item.module, "UNIT", None)
        if marker is None or check is None or module_unit is None:
            continue
        part = item.originalname.removeprefix("test_")
        state["order"].append((item.nodeid, f"{part}/{check.name}", float(marker.args[0])))
        if module_unit.name not in state["units"]:
            state["units"].append(module_unit.name)


def pytest_runtest_setup(item):
    global _NODEID
    _NODEID = item.nodeid


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    state = item.config._grading
    if report.when == "call" or (report.when == "setup" and report.failed):
        if item.nodeid not in state["results"] and report.failed:
            # The grader itself raised: the student loses nothing they can fix, and sees why.
            detail = str(call.excinfo.value).strip().splitlines()[0][:200] if call.excinfo else "no detail"
            name = next((n for nodeid, n, _ in state["order"] if nodeid == item.nodeid), item.name)
            points = next((p for nodeid, _, p in state["order"] if nodeid == item.nodeid), 0.0)
            state["results"][item.nodeid] = CheckResult(
                name=name, points=0.0, max_points=points, passed=False,
                message=GRADER_FAILED.format(f"{call.excinfo.typename}: {detail}" if call.excinfo else detail),
            )
    return report


def grading_report(config) -> dict:
    state = config._grading
    results = []
    for nodeid, name, points in state["order"]:
        result = state["results"].get(nodeid)
        if result is None:  # never ran (deselected, or the session stopped early)
            result = CheckResult(name=name, points=0.0, max_points=points, passed=False,
                                 message=GRADER_FAILED.format("the check did not run"))
        results.append(result)
    score, max_score = total(results)
    unit = state["units"][0] if len(state["units"]) == 1 else ",".join(state["units"])
    report = {"unit": unit, "path": config.getoption("--submission"), "score": score, "max_score": max_score,
              "checks": [r.to_json() for r in results], "load_notes": list(state["notes"])}
    if state.get("student") is not None:  # what the submission's code spent of the run's budget
        report["budget"] = state["student"].usage()
    if state["error"]:
        report = {"unit": unit, "path": config.getoption("--submission"), "error": state["error"]}
    if state["grader_error"]:
        report = {"unit": unit, "path": config.getoption("--submission"), "grader_error": state["grader_error"]}
    return report


def pytest_sessionfinish(session, exitstatus):
    path = session.config.getoption("--grading-json", default=None)
    if path and session.config.getoption("--submission", default=None):
        Path(path).write_text(json.dumps(grading_report(session.config), indent=2))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not config.getoption("--submission", default=None) or config._grading["error"] or \
            config._grading["grader_error"]:
        return
    report = grading_report(config)
    for note in report["load_notes"]:
        terminalreporter.write_line(f"note: {note}")
    terminalreporter.write_line(f"score for {report['unit']}: {fmt(report['score'])} / {fmt(report['max_score'])}",
                                bold=True)
