"""Hidden graders for the transformer course (instructor-only: never shipped to students).

A hidden grade cell in a solution notebook calls `grade(unit, part, globals())`.
"""

from .nbgrader_cell import grade

__all__ = ["grade"]
