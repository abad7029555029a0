"""Hidden tests for unit 03_multihead: one test per graded function, one case per check.

The checks, their inputs and points, and the misconception catalogue are in
`autograder/units/multihead.py`; the reference is the solution notebook.
"""

from autograder.grading.plugin import check_cases, grade
from autograder.units.multihead import UNIT


@check_cases(UNIT, "split_heads")
def test_split_heads(student, check):
    grade(student, UNIT, "split_heads", check)


@check_cases(UNIT, "merge_heads")
def test_merge_heads(student, check):
    grade(student, UNIT, "merge_heads", check)


@check_cases(UNIT, "multi_head_attention")
def test_multi_head_attention(student, check):
    grade(student, UNIT, "multi_head_attention", check)


@check_cases(UNIT, "attention_flops")
def test_attention_flops(student, check):
    grade(student, UNIT, "attention_flops", check)
