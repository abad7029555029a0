"""`python3 course.py feedback-report UNIT`: the mistakes the class made, per part, from the
feedback service's records (`db.class_report`): how many students checked each part, how many
reached full marks, each catalogued mistake with the students and checks that made it, and the
failures no catalogued mistake explained, grouped by the step that goes wrong (where the part's
locator found one) and which checks failed, with one notebook's hash
per group (the sha256 the service recorded), so that a new common mistake shows and can be
catalogued."""

from __future__ import annotations

import argparse
import sys

from ..engine.report import plural
from .db import DEFAULT_DB, Database, class_report
from .service import served_units


def format_report(unit: str, table: list[dict]) -> str:
    lines = [f"{unit}: the class's checks, per part"]
    for row in table:
        lines.append("")
        lines.append(f"{row['part']}: {plural(row['students'], 'student')} checked it, "
                     f"{row['full_marks']} reached full marks")
        if row["students"] and not row["mistakes"]:
            lines.append("  no catalogued mistake named")
        for mistake in row["mistakes"]:
            lines.append(f"  {plural(mistake['students'], 'student'):>12} {plural(mistake['checks'], 'check'):>10}  "
                         f"{mistake['description']} ({mistake['id']})")
        if row.get("unexplained"):
            lines.append("  failed, with no catalogued mistake named, by the step that goes wrong and the checks "
                         "that failed:")
        for group in row.get("unexplained", []):
            example = f" (latest notebook {group['example'][:12]})" if group["example"] else ""
            step = f"{group['step']}: " if group.get("step") else "(no step located): "
            lines.append(f"  {plural(group['students'], 'student'):>12} {plural(group['checks'], 'check'):>10}  "
                         f"{step}{', '.join(group['failed'])}{example}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python3 course.py feedback-report",
                                     description="the mistakes the class makes most, per part")
    parser.add_argument("unit")
    parser.add_argument("--db", default=DEFAULT_DB, help=f"the service's database (default {DEFAULT_DB})")
    args = parser.parse_args(argv)
    served_units([args.unit])
    db = Database(args.db)
    try:
        print(format_report(args.unit, class_report(db, args.unit)))
    finally:
        db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
