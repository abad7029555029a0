"""Self-check quizzes: the checking logic, the widget (driven without a browser), and the
banks that feed the notebooks."""

from __future__ import annotations

import nbformat
import pytest

from autograder.paths import COURSE_UNITS, chapter_notebook, quiz_bank, solution_notebook
from autograder.release.quizzes import load_bank
from coursekit.quiz import Quiz, QuizWidget, answer, decode_quiz, encode_quiz, show_quiz

QUIZ = {
    "id": "demo",
    "question": "Why divide the scores by sqrt(d_k)?",
    "options": [
        {"text": "To keep the softmax out of saturation", "correct": True, "why": "Variance grows with d_k."},
        {"text": "To make the weights sum to one", "correct": False, "why": "The softmax already does that."},
    ],
}
UNITS_WITH_BANKS = [u for u in COURSE_UNITS if quiz_bank(u).exists()]


def test_each_option_gets_its_own_feedback():
    quiz = Quiz.from_dict(QUIZ)
    right, wrong = quiz.check("A"), quiz.check(1)
    assert right.correct and "Variance grows" in right.message
    assert not wrong.correct and "already does that" in wrong.message
    with pytest.raises(ValueError):
        quiz.check("C")


def test_the_answer_key_is_not_readable_in_the_encoded_cell():
    blob = encode_quiz(QUIZ)
    for secret in ("Variance grows", "already does that", "correct", "true"):
        assert secret not in blob
    assert decode_quiz(blob) == Quiz.from_dict(QUIZ)
    assert "already does that" in answer(blob, "B")


def test_the_widget_reacts_to_clicks():
    widget = show_quiz(encode_quiz(QUIZ))
    assert isinstance(widget, QuizWidget)
    widget.buttons[1].click()
    assert "Not quite" in widget.feedback.value and widget.buttons[1].button_style == "danger"
    widget.buttons[0].click()
    assert "Yes." in widget.feedback.value and widget.buttons[0].button_style == "success"
    bundle = widget._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    # The text fallback is a line a student can run as it stands, in a cell of their own.
    fallback = bundle["text/plain"].splitlines()[-1]
    command = fallback.split("run: ", 1)[1].split(", with your letter")[0]
    namespace = {}
    exec(command.replace('"A"', '"B"').replace("print(", "result = ("), namespace)
    assert "already does that" in namespace["result"]


def test_a_damaged_quiz_cell_says_so():
    with pytest.raises(ValueError, match="damaged"):
        decode_quiz("not a quiz")


def test_a_quiz_needs_a_correct_option():
    bad = dict(QUIZ, options=[dict(o, correct=False) for o in QUIZ["options"]])
    with pytest.raises(ValueError, match="no option is marked correct"):
        Quiz.from_dict(bad)


@pytest.mark.parametrize("unit", UNITS_WITH_BANKS)
def test_banks_are_complete(unit):
    bank = load_bank(unit)
    for quiz in bank.values():
        assert sum(o.correct for o in quiz.options) == 1, quiz.id
        assert all(len(o.why) > 20 for o in quiz.options), quiz.id
    used = set()
    for path in (chapter_notebook(unit), solution_notebook(unit)):
        if path.exists():
            ids = [c.metadata["quiz"] for c in nbformat.read(path, as_version=4).cells if "quiz" in c.metadata]
            assert ids, f"{path.name} has no quiz cell"
            used.update(ids)
    if solution_notebook(unit).exists():
        exercise_ids = [c.metadata["quiz"] for c in nbformat.read(solution_notebook(unit), 4).cells
                        if "quiz" in c.metadata]
        assert len(exercise_ids) >= 3
    assert used <= set(bank)


@pytest.mark.parametrize("unit", UNITS_WITH_BANKS)
def test_the_right_option_is_rarely_the_longest(unit):
    # A student who always picks the longest option must not do well: the right option may be
    # (one of) the longest in at most a third of a unit's questions.
    bank = load_bank(unit)
    longest = sorted(
        quiz.id for quiz in bank.values()
        if len(next(o for o in quiz.options if o.correct).text) == max(len(o.text) for o in quiz.options)
    )
    assert len(longest) <= len(bank) / 3, f"the right option is the longest in {len(longest)} of {len(bank)}: {longest}"
