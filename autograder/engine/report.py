"""Check results, in words for a student and as JSON for tools."""

from __future__ import annotations

from .spec import CheckResult

GRADER_FAILED = ("the grader could not check this ({}). This is a problem with the grader, not with your "
                 "work: tell your instructor.")



def total(results: list[CheckResult]) -> tuple[float, float]:
    return sum(r.points for r in results), sum(r.max_points for r in results)


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def fmt(points: float) -> str:
    return f"{points:g}"


def summary(title: str, results: list[CheckResult]) -> str:
    """A short block: the score, then one line per check (failures say what to look at)."""
    score, max_score = total(results)
    lines = [f"{title}: {fmt(score)} / {fmt(max_score)} points"]
    seen_failures, seen_mistakes = set(), set()
    for r in results:
        mark = "ok  " if r.passed else "FAIL"
        message = r.message
        if not r.passed and message in seen_failures:
            message = "(same problem as above)"
        elif not r.passed and r.misconception is not None and r.misconception in seen_mistakes:
            # Name a mistake and its fix once; later checks only say what they saw.
            message = message.split(" This looks like ")[0].rstrip(".") + " (the same mistake as above)."
        seen_failures.add(r.message)
        seen_mistakes.add(r.misconception)
        lines.append(f"  {mark} [{fmt(r.points)}/{fmt(r.max_points)}] {message}")
    return "\n".join(lines)


def grade_cell_text(part: str, results: list[CheckResult], max_score: float,
                    load_notes: list[str]) -> tuple[str, float]:
    """What a part's grade cell shows, and its points (clamped to [0, max_score])."""
    if not results:
        return f"`{part}`: 0 / {fmt(max_score)} points. The grader has no checks for this cell.", 0.0
    text = summary(f"`{part}`", results)
    score = min(max(sum(r.points for r in results), 0.0), max_score)
    if load_notes and score < max_score:
        text += "\nWhile loading your notebook: " + "; ".join(load_notes[:5])
    return text, score
