"""Where the course's pieces live. Every unit has one folder or file per concern:

    chapters/<unit>.ipynb                    the reading chapter
    solutions/<unit>/<name>.ipynb            nbgrader source, with the reference solution
    exercises/<unit>/<name>.ipynb            the student release (generated, committed)
    quizzes/<unit>.yml                       the self-check bank (instructor-only: plain answers)
    autograder/units/<name>.py               the hidden checks and the misconception catalogue
"""

from __future__ import annotations

from pathlib import Path

# The contract's units (../shared/CURRICULUM.md), in teaching order.
COURSE_UNITS = (
    "01_attention",
    "02_masking",
    "03_multihead",
    "04_block",
    "05_model",
    "06_generation",
    "07_flash_training",
    "08_training",
)

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = ROOT / "chapters"
SOLUTIONS = ROOT / "solutions"
EXERCISES = ROOT / "exercises"
QUIZZES = ROOT / "quizzes"


def unit_notebook_name(unit: str) -> str:
    """`01_attention` -> `attention.ipynb` (the contract's naming rule)."""
    return unit.split("_", 1)[1] + ".ipynb"


def solution_notebook(unit: str) -> Path:
    return SOLUTIONS / unit / unit_notebook_name(unit)


def release_notebook(unit: str) -> Path:
    return EXERCISES / unit / unit_notebook_name(unit)


def chapter_notebook(unit: str) -> Path:
    return CHAPTERS / f"{unit}.ipynb"


def quiz_bank(unit: str) -> Path:
    return QUIZZES / f"{unit}.yml"
