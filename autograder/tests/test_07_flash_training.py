"""Hidden tests for unit 07_flash_training: one test per graded function, one case per check.

The checks, their inputs and points, and the misconception catalogue are in
`autograder/units/flash_training.py`; the reference is the solution notebook.
"""

from autograder.grading.plugin import check_cases, grade
from autograder.units.flash_training import UNIT


@check_cases(UNIT, "naive_attention")
def test_naive_attention(student, check):
    grade(student, UNIT, "naive_attention", check)


@check_cases(UNIT, "flash_attention")
def test_flash_attention(student, check):
    grade(student, UNIT, "flash_attention", check)


@check_cases(UNIT, "time_fn")
def test_time_fn(student, check):
    grade(student, UNIT, "time_fn", check)


@check_cases(UNIT, "train")
def test_train(student, check):
    grade(student, UNIT, "train", check)
