"""Hidden tests for unit 04_block: one test per graded function or class, one case per check.

The checks, their inputs and points, and the misconception catalogue are in
`autograder/units/block.py`; the reference is the solution notebook.
"""

from autograder.grading.plugin import check_cases, grade
from autograder.units.block import UNIT


@check_cases(UNIT, "layer_norm")
def test_layer_norm(student, check):
    grade(student, UNIT, "layer_norm", check)


@check_cases(UNIT, "rms_norm")
def test_rms_norm(student, check):
    grade(student, UNIT, "rms_norm", check)


@check_cases(UNIT, "gelu")
def test_gelu(student, check):
    grade(student, UNIT, "gelu", check)


@check_cases(UNIT, "MultiHeadAttention")
def test_MultiHeadAttention(student, check):
    grade(student, UNIT, "MultiHeadAttention", check)


@check_cases(UNIT, "FeedForward")
def test_FeedForward(student, check):
    grade(student, UNIT, "FeedForward", check)


@check_cases(UNIT, "TransformerBlock")
def test_TransformerBlock(student, check):
    grade(student, UNIT, "TransformerBlock", check)
