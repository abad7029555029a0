"""What a hidden grade cell runs inside nbgrader's kernel.

nbgrader reads a grade cell's last value as the points earned, scores 0 for any error
output or anything on stderr, and shows the whole cell output in the feedback. So
`grade` prints a short message for the student, never raises, keeps the student's own
stderr and warnings away, and returns a plain float clamped to [0, the part's points].
"""

from __future__ import annotations


def grade(unit: str, part: str, namespace: dict) -> float:
    try:
        from .core import grade_part
        from .report import summary, total
        from .units import get_unit

        spec = get_unit(unit)
        results = grade_part(spec, part, namespace)
        score, max_score = total(results)
        print(summary(f"`{part}`", results))
        return float(min(max(score, 0.0), spec.part(part).points))
    except BaseException as err:  # noqa: BLE001 - the student must never see a traceback
        detail = str(err).strip().splitlines()[0][:200] if str(err).strip() else ""
        print(
            f"`{part}`: the grader could not check this part ({type(err).__name__}: {detail}). "
            "This is a problem with the grader, not with your work: tell your instructor."
        )
        return 0.0
