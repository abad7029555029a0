"""Shared fixtures. The slow one is `sample_class`: one real nbgrader run (generate,
autograde, feedback, export) over every graded unit, shared by the tests that need it."""

from __future__ import annotations

import pytest

from autograder.demo import run_sample_class


@pytest.fixture(scope="session")
def sample_class(tmp_path_factory):
    return run_sample_class(tmp_path_factory.mktemp("sample_class"), log=lambda *a: None)
