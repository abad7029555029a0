"""Hidden tests for unit 02_masking: one test per graded function, one case per check.

The checks, their inputs and points, and the misconception catalogue are in
`autograder/units/masking.py`; the reference is the solution notebook.
"""

from autograder.grading.plugin import check_cases, grade
from autograder.units.masking import UNIT


@check_cases(UNIT, "causal_mask")
def test_causal_mask(student, check):
    grade(student, UNIT, "causal_mask", check)


@check_cases(UNIT, "causal_self_attention")
def test_causal_self_attention(student, check):
    grade(student, UNIT, "causal_self_attention", check)


@check_cases(UNIT, "next_token_pairs")
def test_next_token_pairs(student, check):
    grade(student, UNIT, "next_token_pairs", check)


@check_cases(UNIT, "looks_causal")
def test_looks_causal(student, check):
    grade(student, UNIT, "looks_causal", check)
