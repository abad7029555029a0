"""The self-check bank (`quizzes/<unit>.yml`) and the quiz cells built from it.

A quiz cell is a code cell whose metadata holds `"quiz": "<id>"`; `python3 course.py build`
rewrites its source from the bank, so the bank stays the one place a question is written.
"""

from __future__ import annotations

import yaml

from coursekit.quiz import Quiz, encode_quiz

from ..paths import quiz_bank


def load_bank(unit: str) -> dict[str, Quiz]:
    path = quiz_bank(unit)
    if not path.exists():
        return {}
    entries = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    bank: dict[str, Quiz] = {}
    for entry in entries:
        quiz = Quiz.from_dict(entry)
        if quiz.id in bank:
            raise ValueError(f"{path}: quiz id {quiz.id!r} appears twice")
        bank[quiz.id] = quiz
    return bank


def quiz_cell_source(quiz: Quiz) -> str:
    first_line = " ".join(quiz.question.split())
    return (
        f"# Self-check (not graded): {first_line}\n"
        "# Run the cell, then click an answer (the answers are packed, not in plain sight).\n"
        "from coursekit.quiz import show_quiz\n\n"
        f'show_quiz("{encode_quiz(quiz)}")'
    )


def quiz_id(cell) -> str | None:
    return cell.get("metadata", {}).get("quiz")


def sync_quiz_cells(nb, unit: str, where: str) -> None:
    """Rewrite every quiz cell of `nb` from the unit's bank (in place)."""
    bank = load_bank(unit)
    for cell in nb.cells:
        qid = quiz_id(cell)
        if qid is None:
            continue
        if qid not in bank:
            raise KeyError(f"{where}: quiz cell {qid!r} is not in quizzes/{unit}.yml")
        cell.source = quiz_cell_source(bank[qid])
        # Only the question (the output) shows: the packed string is nothing to read.
        cell.metadata.setdefault("jupyter", {})["source_hidden"] = True
