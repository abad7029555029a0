"""Hidden graders for the transformer course (instructor-only: never shipped to students).

The graders are pytest files, `autograder/tests/test_<unit>.py`, run on a submission
whose code executes in a sandboxed worker (`trust/`); nbgrader's grade
cells are filled from that run (`nbgrader/grades.py`).
"""
