"""nbgrader settings for an instructor working in the course root (see README.md).

All settings live in autograder/nbgrader/course.py, shared with the tests and the
sample-class demo, so the three run nbgrader the same way.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from autograder.nbgrader.course import configure  # noqa: E402

configure(get_config(), Path(__file__).resolve().parent)  # noqa: F821 - provided by nbgrader
