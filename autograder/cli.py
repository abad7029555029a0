"""`python -m autograder check <unit> <path> [--json]`: grade a notebook or a .py file.

Runs the same checks as the hidden grade cells, outside nbgrader. Exit status: 0 when
every check passed, 1 when some failed, 2 when the file or unit could not be graded.
"""

from __future__ import annotations

import argparse
import json
import sys

from .core import grade_namespace
from .report import fmt, summary, total
from .submission import load_file
from .units import get_unit


def check(unit_name: str, path: str) -> dict:
    unit = get_unit(unit_name)
    loaded = load_file(path)
    results = grade_namespace(unit, loaded.namespace)
    score, max_score = total(results)
    return {
        "unit": unit.name,
        "path": str(path),
        "score": score,
        "max_score": max_score,
        "checks": [r.to_json() for r in results],
        "load_notes": loaded.notes,
        "_results": results,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder check", description=__doc__.split("\n")[0])
    parser.add_argument("unit", help="e.g. 01_attention")
    parser.add_argument("path", help="a .ipynb or .py file defining the unit's functions")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    try:
        report = check(args.unit, args.path)
    except (KeyError, FileNotFoundError, ValueError, RuntimeError) as err:  # RuntimeError: a broken reference
        message = err.args[0] if err.args else str(err)
        if args.json:
            print(json.dumps({"unit": args.unit, "path": args.path, "error": message}))
        else:
            print(f"Cannot grade: {message}", file=sys.stderr)
        return 2
    results = report.pop("_results")
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for note in report["load_notes"]:
            print(f"note: {note}")
        unit = get_unit(args.unit)
        for part in unit.parts:
            prefix = part.name + "/"
            print(summary(f"`{part.name}`", [r for r in results if r.name.startswith(prefix)]))
        score, max_score = total(results)
        print(f"\nTotal for {unit.name}: {fmt(score)} / {fmt(max_score)}")
    return 0 if report["score"] == report["max_score"] else 1
