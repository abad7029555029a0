"""Check results, in words for a student and as JSON for tools."""

from __future__ import annotations

from .core import CheckResult


def total(results: list[CheckResult]) -> tuple[float, float]:
    return sum(r.points for r in results), sum(r.max_points for r in results)


def fmt(points: float) -> str:
    return f"{points:g}"


def summary(title: str, results: list[CheckResult]) -> str:
    """A short block: the score, then one line per check (failures say what to look at)."""
    score, max_score = total(results)
    lines = [f"{title}: {fmt(score)} / {fmt(max_score)} points"]
    seen_failures = set()
    for r in results:
        mark = "ok  " if r.passed else "FAIL"
        message = r.message
        if not r.passed and message in seen_failures:
            message = "(same problem as above)"
        seen_failures.add(r.message)
        lines.append(f"  {mark} [{fmt(r.points)}/{fmt(r.max_points)}] {message}")
    return "\n".join(lines)
