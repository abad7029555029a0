"""Hidden tests for unit 05_model: one test per graded function or class, one case per check.

The checks, their inputs and points, and the misconception catalogue are in
`autograder/units/model.py`; the reference is the solution notebook.
"""

from autograder.grading.plugin import check_cases, grade
from autograder.units.model import UNIT


@check_cases(UNIT, "GPTConfig")
def test_GPTConfig(student, check):
    grade(student, UNIT, "GPTConfig", check)


@check_cases(UNIT, "sinusoidal_positions")
def test_sinusoidal_positions(student, check):
    grade(student, UNIT, "sinusoidal_positions", check)


@check_cases(UNIT, "GPT")
def test_GPT(student, check):
    grade(student, UNIT, "GPT", check)


@check_cases(UNIT, "count_parameters")
def test_count_parameters(student, check):
    grade(student, UNIT, "count_parameters", check)


@check_cases(UNIT, "parameter_breakdown")
def test_parameter_breakdown(student, check):
    grade(student, UNIT, "parameter_breakdown", check)


@check_cases(UNIT, "rope")
def test_rope(student, check):
    grade(student, UNIT, "rope", check)
