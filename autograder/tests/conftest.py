"""The hidden graders' pytest set-up: everything comes from the grading plugin."""

from autograder.grading.plugin import (  # noqa: F401 - pytest finds hooks and fixtures by name
    pytest_addoption,
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_runtest_makereport,
    pytest_runtest_setup,
    pytest_sessionfinish,
    pytest_sessionstart,
    pytest_terminal_summary,
    student,
)
