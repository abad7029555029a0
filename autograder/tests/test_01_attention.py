"""Hidden tests for unit 01_attention: one test per graded function, one case per check.

The checks, their inputs and points, and the misconception catalogue are in
`autograder/units/attention.py`; the reference is the solution notebook.
"""

from autograder.grading.plugin import check_cases, grade
from autograder.units.attention import UNIT


@check_cases(UNIT, "softmax")
def test_softmax(student, check):
    grade(student, UNIT, "softmax", check)


@check_cases(UNIT, "scaled_dot_product_attention")
def test_scaled_dot_product_attention(student, check):
    grade(student, UNIT, "scaled_dot_product_attention", check)


@check_cases(UNIT, "self_attention")
def test_self_attention(student, check):
    grade(student, UNIT, "self_attention", check)
