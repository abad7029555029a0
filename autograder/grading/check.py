"""`python -m autograder check UNIT PATH [--json]`: grade one file with the hidden tests and
print each part's points and messages (or the JSON report).

Exit status: 0 when every check passed, 1 when some failed, 2 when the file or unit could
not be graded (with `--json`: `{"unit", "path", "error"}`)."""

from __future__ import annotations

import argparse
import json
import sys

from ..engine.report import fmt, summary
from ..units import get_unit
from .run import GradingFailed, check, results_of


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder check", description=__doc__.split("\n")[0])
    parser.add_argument("unit", help="e.g. 01_attention")
    parser.add_argument("path", help="a .ipynb or .py file defining the unit's functions")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    try:
        report = check(args.unit, args.path)
    except (KeyError, GradingFailed) as err:
        report = {"unit": args.unit, "path": args.path, "error": err.args[0] if err.args else str(err)}
    if "error" in report:
        if args.json:
            print(json.dumps(report))
        else:
            print(f"Cannot grade: {report['error']}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for note in report["load_notes"]:
            print(f"note: {note}")
        results = results_of(report)
        for part in get_unit(args.unit).parts:
            prefix = part.name + "/"
            print(summary(f"`{part.name}`", [r for r in results if r.name.startswith(prefix)]))
        print(f"\nTotal for {args.unit}: {fmt(report['score'])} / {fmt(report['max_score'])}")
    return 0 if report["score"] == report["max_score"] else 1
