"""Student-facing helpers for the transformer course: self-check quizzes and plots."""
