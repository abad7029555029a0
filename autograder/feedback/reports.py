"""Named feedback before the deadline: the hidden graders' report on a saved notebook, part by
part, worded exactly as the grade cells word it after `nbgrader autograde`.

    python -m autograder feedback UNIT PATH [--part NAME]   # JSON on stdout

The student's check line (`coursekit.feedback`) runs this on the student's own machine when
the graders are there, and the feedback service (`service.py`) runs `check_task` on its
pool when they are not. Both grade with `run.GradingRun`, the same trusted pytest run (and the
same sandboxed worker) that fills the grade cells, so the three can never disagree.

What leaves here is what a grade cell shows: each part's points and messages, and the ids of
the catalogued mistakes it was named with. No test code, no reference values.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from ..engine.grade import NOT_COUNTED
from ..engine.report import grade_cell_text
from ..engine.spec import CheckResult
from ..grading import pool
from ..grading.run import GradingFailed, start_grading
from ..trust.submission import nbgrader_meta
from ..units import UNITS, get_unit

ALL = "all"  # a request for every part of the unit
MAX_NOTEBOOK_BYTES = 4 * 1024 * 1024  # an exercise notebook without outputs is 20-60 KB
# At most this many JSON values (an upper bound: the count of `{`, `[` and `,` anywhere in its
# bytes): an exercise notebook has about 3,000, and a parser's time grows with the values (a
# 4 MB body of a million empty objects takes json.loads 0.2-1 s; 50,000 at most take 10-30 ms).
MAX_NOTEBOOK_VALUES = 50_000


class NotGradable(ValueError):
    """The file cannot be graded as this unit's notebook; the message says why, in one sentence."""


def parts_asked(unit: str, part: str | None) -> list[str]:
    names = [p.name for p in get_unit(unit).parts]
    if part in (None, "", ALL):
        return names
    if part not in names:
        raise NotGradable(f"{unit} has no graded part named {part!r}; its parts are {', '.join(names)}")
    return [part]


def part_reports(unit: str, report: dict, parts: list[str]) -> dict:
    """The grading run's report, cut down to what the grade cells of `parts` would show."""
    results = [CheckResult(**c) for c in report.get("checks", [])]
    notes = list(report.get("load_notes", []))
    out = []
    for spec in get_unit(unit).parts:
        if spec.name not in parts:
            continue
        mine = [r for r in results if r.name.split("/", 1)[0] == spec.name]
        text, score = grade_cell_text(spec.name, mine, spec.points, notes)
        mistakes = sorted({r.misconception for r in mine if not r.passed and r.misconception})
        out.append({"name": spec.name, "points": score, "max_points": spec.points, "text": text,
                    "mistakes": mistakes})
    return {"unit": unit, "parts": out, "score": sum(p["points"] for p in out),
            "max_score": sum(p["max_points"] for p in out)}


def too_large_message(size: int) -> str:
    return (f"the notebook is {size / 1e6:.1f} MB, over the {MAX_NOTEBOOK_BYTES / 1e6:.0f} MB limit: "
            "clear its outputs (Edit > Clear Outputs of All Cells), save, and check again")


def json_values(data: bytes) -> int:
    """An upper bound on the values `json.loads(data)` would make, read off the raw bytes: every
    value after a container's first follows a comma, and a container holds one value without
    (keys and values of an object: twice that). Cheap (a byte count), so it can refuse a body
    that is costly to parse before it is parsed, a chunk at a time as it arrives."""
    return data.count(b"{") + data.count(b"[") + data.count(b",")


def too_complex_message() -> str:
    return (f"that notebook is built of over {MAX_NOTEBOOK_VALUES:,} JSON values, where an exercise notebook has "
            "about 3,000: clear its outputs, remove any large pasted data, save, and check again")


def notebook_problem(unit: str, data: bytes) -> str | None:
    """Why `data` is not a notebook this unit can grade, in one sentence; None when it is."""
    if len(data) > MAX_NOTEBOOK_BYTES:
        return too_large_message(len(data))
    if json_values(data) > MAX_NOTEBOOK_VALUES:
        return too_complex_message()
    try:
        nb = json.loads(data)
    except (ValueError, RecursionError):
        return "that is not a notebook (not JSON): send the .ipynb file itself"
    if not isinstance(nb, dict) or nb.get("nbformat") != 4 or not isinstance(nb.get("cells"), list):
        return "that is not a Jupyter notebook (nbformat 4)"
    ids = {grade_id for cell in nb["cells"] if isinstance(cell, dict)
           if isinstance(grade_id := nbgrader_meta(cell).get("grade_id"), str)}
    ours = {f"grade_{p.name}" for p in get_unit(unit).parts}
    if ids and not ids & ours:
        for other, spec in UNITS.items():
            if ids & {f"grade_{p.name}" for p in spec.parts}:
                return f"this is the notebook of {other}, not of {unit}"
    return None


def feedback_for(unit: str, data: bytes, part: str | None = None, name: str = "submission.ipynb") -> dict:
    """Grade the notebook `data` as `unit`: the report of the parts asked for.

    Raises NotGradable (the student's to fix) or GradingFailed (the grader's own failure)."""
    parts = parts_asked(unit, part)
    return part_reports(unit, graded(unit, data, name, parts), parts)


def graded(unit: str, data: bytes, name: str = "submission.ipynb", parts: list[str] | None = None) -> dict:
    """The grading run's report on the notebook `data` (with its "budget"), once it is known to
    be one this unit can grade: of `parts` only (every part when None, or all of them), so one
    part's check costs that part's checks. Raises NotGradable or GradingFailed."""
    # A .py file (the CLI's, as `course.py check` takes) is graded as it is; the service sends notebooks.
    problem = None if name.endswith(".py") else notebook_problem(unit, data)
    if problem:
        raise NotGradable(problem)
    with tempfile.TemporaryDirectory(prefix="feedback-") as folder:
        path = Path(folder) / Path(name).name
        path.write_bytes(data)
        every = parts is None or set(parts) == {p.name for p in get_unit(unit).parts}
        report, _ = start_grading(unit, path, None if every else parts).result()
    if "error" in report:
        raise NotGradable(f"your notebook could not be graded: {report['error']}")
    return report


def unexplained_failures(unit: str, report: dict, parts: list[str]) -> dict[str, dict]:
    """Per part asked for that failed with no catalogued mistake named, its failure signature, for
    the instructor's report (`db.class_report`): {"step": the step its locator found to go wrong
    first (engine/grade.locate_step; None where it has none or found none), "failed": the names of
    its failed checks}, leaving out checks passed but not counted (those say nothing about the
    mistake). Not sent to the student: the report they get says the same in the grade cells' words."""
    from ..engine.grade import LOCATED, step_of

    asked = set(parts)
    found: dict[str, dict] = {}
    for check in report.get("checks", []):
        part, _, name = str(check.get("name", "")).partition("/")
        message = str(check.get("message", ""))
        if part in asked and not check.get("passed") and not check.get("misconception") \
                and NOT_COUNTED not in message:
            signature = found.setdefault(part, {"step": None, "failed": []})
            signature["failed"].append(name)
            if LOCATED in message:
                signature["step"] = step_of(message.split(LOCATED, 1)[1])
    return {part: {"step": s["step"], "failed": sorted(s["failed"])} for part, s in found.items()}


def check_task(task: dict) -> dict:
    """One check, as a task for the class-grading pool (local or Dask): {unit, part, notebook}
    in, {"ok": True, "report": ..., "unexplained": `unexplained_failures`, "over_budget": whether
    the run used up its budget} or {"ok": False, "kind": "student"|"grader", "error"} out."""
    unit = task["unit"]
    if task.get("fork", True):
        pool.warm_up_checks(unit)
    try:
        parts = parts_asked(unit, task.get("part"))
        report = graded(unit, task["notebook"], parts=parts)
        return {"ok": True, "report": part_reports(unit, report, parts),
                "unexplained": unexplained_failures(unit, report, parts),
                "over_budget": bool((report.get("budget") or {}).get("exceeded"))}
    except NotGradable as err:
        return {"ok": False, "kind": "student", "error": str(err)}
    except GradingFailed as err:
        return {"ok": False, "kind": "grader", "error": str(err).splitlines()[0]}


def answer(unit: str, data: bytes, part: str = ALL, name: str = "submission.ipynb") -> dict:
    """What `main` prints: the report of the parts asked for, or {"error", "kind"} with kind
    "student" (the notebook's to fix) or "grader" (the grader's own failure). The check line's
    warm grader (`warm_grader.py`) answers with this too."""
    try:
        return feedback_for(unit, data, part, name)
    except (KeyError, NotGradable) as err:
        return {"error": str(err.args[0] if err.args else err), "kind": "student"}
    except GradingFailed as err:
        return {"error": str(err).splitlines()[0], "kind": "grader"}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder feedback", description=__doc__.split("\n")[0])
    parser.add_argument("unit")
    parser.add_argument("path", help="the saved .ipynb")
    parser.add_argument("--part", default=ALL, help="one graded part (default: all)")
    args = parser.parse_args(argv)
    try:
        data = Path(args.path).read_bytes()
    except OSError as err:
        print(json.dumps({"error": str(err), "kind": "student"}))
        return 2
    result = answer(args.unit, data, args.part, Path(args.path).name)
    print(json.dumps(result, indent=1))
    return {"student": 2, "grader": 3}.get(result.get("kind"), 0) if "error" in result else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
