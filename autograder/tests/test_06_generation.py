"""Hidden tests for unit 06_generation: one test per graded function, one case per check.

The checks, their inputs and points, and the misconception catalogue are in
`autograder/units/generation.py`; the reference is the solution notebook.
"""

from autograder.grading.plugin import check_cases, grade
from autograder.units.generation import UNIT


@check_cases(UNIT, "sample_next")
def test_sample_next(student, check):
    grade(student, UNIT, "sample_next", check)


@check_cases(UNIT, "generate")
def test_generate(student, check):
    grade(student, UNIT, "generate", check)


@check_cases(UNIT, "generate_cached")
def test_generate_cached(student, check):
    grade(student, UNIT, "generate_cached", check)
