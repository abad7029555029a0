"""Hidden tests for unit 08_training: one test per graded function, one case per check.

The checks, their inputs and points, and the misconception catalogue are in
`autograder/units/training_tokenizer.py` (the tokenizer) and `autograder/units/training_recipe.py`
(the training recipe); the reference is the solution notebook.
"""

from autograder.grading.plugin import check_cases, grade
from autograder.units.training import UNIT


@check_cases(UNIT, "pretokenize")
def test_pretokenize(student, check):
    grade(student, UNIT, "pretokenize", check)


@check_cases(UNIT, "train_bpe")
def test_train_bpe(student, check):
    grade(student, UNIT, "train_bpe", check)


@check_cases(UNIT, "encode")
def test_encode(student, check):
    grade(student, UNIT, "encode", check)


@check_cases(UNIT, "decode")
def test_decode(student, check):
    grade(student, UNIT, "decode", check)


@check_cases(UNIT, "cross_entropy")
def test_cross_entropy(student, check):
    grade(student, UNIT, "cross_entropy", check)


@check_cases(UNIT, "lr_at")
def test_lr_at(student, check):
    grade(student, UNIT, "lr_at", check)


@check_cases(UNIT, "clip_grad_norm")
def test_clip_grad_norm(student, check):
    grade(student, UNIT, "clip_grad_norm", check)


@check_cases(UNIT, "evaluate")
def test_evaluate(student, check):
    grade(student, UNIT, "evaluate", check)


@check_cases(UNIT, "save_checkpoint")
def test_save_checkpoint(student, check):
    grade(student, UNIT, "save_checkpoint", check)


@check_cases(UNIT, "load_checkpoint")
def test_load_checkpoint(student, check):
    grade(student, UNIT, "load_checkpoint", check)


@check_cases(UNIT, "train_loop")
def test_train_loop(student, check):
    grade(student, UNIT, "train_loop", check)
