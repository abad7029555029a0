"""Self-check quiz cells: immediate feedback on every option, not graded.

A quiz cell in a notebook looks like

    from coursekit.quiz import show_quiz
    show_quiz("eJy...")

The string is the question, its options and the feedback on each, packed by
`encode_quiz` (zlib + base64), so the answer key is not readable in the notebook. It is
an obstacle to a glance, not encryption: the quizzes are for learning, not for marks.
The plain-text source of every quiz is the instructor's bank in `quizzes/<unit>.yml`;
`python3 course.py build` writes the packed cells into the notebooks.

The checking logic (`Quiz.check`) needs no browser; `QuizWidget` puts it behind one
button per option with ipywidgets, which JupyterLab 4 and Notebook 7 render.
"""

from __future__ import annotations

import base64
import html
import json
import zlib
from dataclasses import dataclass

LETTERS = "ABCDEFGHIJ"


@dataclass(frozen=True)
class Option:
    text: str
    correct: bool
    why: str


@dataclass(frozen=True)
class Verdict:
    correct: bool
    message: str


@dataclass(frozen=True)
class Quiz:
    id: str
    question: str
    options: tuple[Option, ...]

    @classmethod
    def from_dict(cls, data: dict) -> Quiz:
        options = tuple(
            Option(str(o["text"]), bool(o.get("correct", False)), str(o["why"]))
            for o in data["options"]
        )
        if not 2 <= len(options) <= len(LETTERS):
            raise ValueError(f"quiz {data['id']!r}: needs 2 to {len(LETTERS)} options")
        if not any(o.correct for o in options):
            raise ValueError(f"quiz {data['id']!r}: no option is marked correct")
        return cls(str(data["id"]), str(data["question"]), options)

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "question": self.question,
            "options": [{"text": o.text, "correct": o.correct, "why": o.why} for o in self.options],
        }

    def check(self, choice: int | str) -> Verdict:
        """The verdict on one option, given by index (0, 1, ...) or letter ("A", "b", ...)."""
        index = LETTERS.index(choice.upper()) if isinstance(choice, str) else int(choice)
        if not 0 <= index < len(self.options):
            raise ValueError(f"no option {choice!r}: pick one of {LETTERS[: len(self.options)]}")
        option = self.options[index]
        lead = "Yes." if option.correct else "Not quite."
        return Verdict(option.correct, f"{lead} {option.why}")


def encode_quiz(quiz: Quiz | dict) -> str:
    data = quiz.to_dict() if isinstance(quiz, Quiz) else Quiz.from_dict(quiz).to_dict()
    packed = zlib.compress(json.dumps(data, sort_keys=True).encode("utf-8"), 9)
    return base64.urlsafe_b64encode(packed).decode("ascii")


def decode_quiz(blob: str) -> Quiz:
    try:
        data = json.loads(zlib.decompress(base64.urlsafe_b64decode(blob.encode("ascii"))))
    except (ValueError, zlib.error) as err:
        raise ValueError("this quiz cell is damaged; restore it from the original notebook") from err
    return Quiz.from_dict(data)


class QuizWidget:
    """One button per option; a click shows whether it holds up, and why."""

    def __init__(self, quiz: Quiz, blob: str | None = None):
        import ipywidgets as widgets

        self.quiz = quiz
        self.blob = blob if blob is not None else encode_quiz(quiz)
        self.feedback = widgets.HTML(value="")
        self.buttons = []
        rows = []
        for index, option in enumerate(quiz.options):
            button = widgets.Button(
                description=LETTERS[index], layout=widgets.Layout(width="3em", min_width="3em")
            )
            button.on_click(lambda _button, i=index: self.choose(i))
            self.buttons.append(button)
            rows.append(widgets.HBox([button, widgets.HTML(html.escape(option.text))]))
        title = widgets.HTML(f"<b>Self-check.</b> {html.escape(quiz.question)}")
        self.box = widgets.VBox([title, *rows, self.feedback])

    def choose(self, index: int) -> Verdict:
        verdict = self.quiz.check(index)
        self.buttons[index].button_style = "success" if verdict.correct else "danger"
        colour = "#1a7f37" if verdict.correct else "#b42318"
        self.feedback.value = (
            f'<div style="color:{colour}"><b>{LETTERS[index]}.</b> '
            f"{html.escape(verdict.message)}</div>"
        )
        return verdict

    def _repr_mimebundle_(self, **kwargs):
        bundle = self.box._repr_mimebundle_(**kwargs)
        # Where widgets cannot render (a plain console, nbconvert), say how to answer instead.
        letters = ", ".join(LETTERS[: len(self.quiz.options)])
        lines = [f"Self-check: {self.quiz.question}"]
        lines += [f"  {LETTERS[i]}. {o.text}" for i, o in enumerate(self.quiz.options)]
        # The quiz cell imports only show_quiz, so the fallback spells out the import too.
        lines.append(f"(Widgets are not shown here. To answer, run: from coursekit.quiz import answer; "
                     f'print(answer("{self.blob}", "A")), with your letter ({letters}) in place of A.)')
        bundle["text/plain"] = "\n".join(lines)
        return bundle


def show_quiz(blob: str) -> QuizWidget:
    """Decode a quiz cell's string and show it as buttons (the cell's last value)."""
    return QuizWidget(decode_quiz(blob), blob)


def answer(blob: str, choice: int | str) -> str:
    """The text fallback: the feedback on one option, for frontends without widgets."""
    return decode_quiz(blob).check(choice).message
