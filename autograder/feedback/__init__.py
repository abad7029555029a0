"""Feedback before the deadline: the report on a notebook (`reports`), the check line's warm
grader on a student's own machine (`warm_grader`), the service for a class (`service`), its
records (`db`), and the instructor's table of the class's mistakes (`class_mistakes`)."""
