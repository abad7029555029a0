"""Shared fixtures. The slow one is `sample_class`: one real nbgrader run (generate,
autograde, feedback, export) over every graded unit, shared by the tests that need it."""

from __future__ import annotations

import pytest

from autograder.demo import run_sample_class


@pytest.fixture(scope="session")
def sample_class(tmp_path_factory):
    return run_sample_class(tmp_path_factory.mktemp("sample_class"), log=lambda *a: None)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Keep `xdist_group` tests on one worker under pytest 9.

    pytest-xdist 3.8 tags a grouped test by appending "@group" to `item._nodeid`, which
    pytest 9 no longer reads (a node's id lives in `item._id`), so `--dist loadgroup` spread
    the sample-class tests over both workers and each built the whole class (12 minutes
    twice). Where the tag did not take, set it the way pytest 9 stores ids.
    """
    if not getattr(config.option, "loadgroup", False):
        return
    try:
        from _pytest.nodeid import coerce_node_id
    except ImportError:  # an older pytest: xdist's own tagging works there
        return
    for item in items:
        groups = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                         for m in item.iter_markers("xdist_group")})
        if groups and not item.nodeid.endswith("@" + "_".join(groups)) and hasattr(item, "_id"):
            item._id = coerce_node_id(f"{item.nodeid}@{'_'.join(groups)}")
