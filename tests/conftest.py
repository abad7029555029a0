"""Shared fixtures. The slow one is `sample_class`: one real nbgrader run (generate,
autograde, feedback, export) over every graded unit, shared by the tests that need it."""

from __future__ import annotations

import pytest

from autograder.tools.demo import run_sample_class


@pytest.fixture(scope="session")
def sample_class(tmp_path_factory):
    # The compact class: every case of `course.py demo`'s six students, in three notebooks a unit
    # (the looping part in the first unit only).
    return run_sample_class(tmp_path_factory.mktemp("sample_class"), log=lambda *a: None, compact=True)


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


class Unprivileged:
    """Commands run as an ordinary user, the way most instructors grade: as the suite's own user
    when that is not root, else as `nobody` (65534) by `setpriv`. A limit that Linux applies per
    user (RLIMIT_NPROC) does not apply to root, so a test of one must not run as root."""

    UID = GID = 65534

    def __init__(self):
        import os

        self.dropping = os.geteuid() == 0
        self.opened: list[tuple[str, int]] = []  # folders given o+x so the user can reach Python: restored

    @property
    def uid(self) -> int:
        import os

        return self.UID if self.dropping else os.getuid()

    def reach(self, *paths) -> None:
        """Let the user traverse to `paths` (CI keeps Python under /root, mode 0700)."""
        import os
        import stat
        from pathlib import Path

        if not self.dropping:
            return
        for path in paths:
            for folder in [*reversed(Path(path).resolve().parents), Path(path).resolve()]:
                mode = folder.stat().st_mode
                if folder.is_dir() and not mode & stat.S_IXOTH:
                    self.opened.append((str(folder), stat.S_IMODE(mode)))
                    os.chmod(folder, stat.S_IMODE(mode) | stat.S_IXOTH)

    def restore(self) -> None:
        import os

        for folder, mode in reversed(self.opened):
            os.chmod(folder, mode)
        self.opened.clear()

    def own(self, path) -> None:
        """Hand `path` (and everything under it) to the user."""
        import os

        if not self.dropping:
            return
        for folder, _, files in os.walk(path):
            os.chown(folder, self.UID, self.GID)
            for name in files:
                os.chown(os.path.join(folder, name), self.UID, self.GID, follow_symlinks=False)

    def command(self, argv: list[str]) -> list[str]:
        if not self.dropping:
            return list(argv)
        return ["setpriv", f"--reuid={self.UID}", f"--regid={self.GID}", "--clear-groups", "--", *argv]

    def environment(self, home) -> dict:
        """The user's environment: a home and temporary folder of its own under `home` (theirs)."""
        import os
        import sys
        from pathlib import Path

        from autograder.paths import ROOT

        tmp = Path(home) / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        self.reach(home)
        self.own(home)
        env = dict(os.environ, HOME=str(home), TMPDIR=str(tmp), PYTHONPATH=str(ROOT), MPLBACKEND="Agg",
                   PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
        env.pop("PYTEST_XDIST_WORKER", None)
        return env

    def run(self, argv, home, **kwargs):
        import subprocess

        from autograder.paths import ROOT

        return subprocess.run(self.command(argv), env=self.environment(home), cwd=kwargs.pop("cwd", ROOT), **kwargs)

    def popen(self, argv, home, **kwargs):
        import subprocess

        from autograder.paths import ROOT

        return subprocess.Popen(self.command(argv), env=self.environment(home), cwd=kwargs.pop("cwd", ROOT),
                                **kwargs)


@pytest.fixture(scope="session")
def unprivileged():
    """See `Unprivileged`. Tests that use it share one xdist group ("unprivileged"): the folders
    opened for the user are closed again when the last of them ends."""
    import shutil
    import sys

    from autograder.paths import ROOT
    from autograder.trust import sandbox

    if not sandbox.bwrap_works():
        pytest.skip("bubblewrap cannot make a sandbox on this machine (no user namespaces?)")
    user = Unprivileged()
    if user.dropping and shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is needed to run the grader as an ordinary user")
    user.reach(sys.base_prefix, sys.prefix, sys.executable, ROOT)
    try:
        yield user
    finally:
        user.restore()
