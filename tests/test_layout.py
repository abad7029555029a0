"""`autograder/` is laid out as its architecture (README, "Changing the course"): no import
circle, no import that runs back up the folders' order, at most 8 modules at its top level.
The imports are read with `ast` from every file, those inside functions included
(`import_layout.py`, which prints the figures)."""

import shutil
import subprocess
import textwrap
from pathlib import Path

import import_layout as layout
import pytest

MAX_TOP_LEVEL_MODULES = 8


def test_no_import_circle_between_modules_or_folders():
    edges = layout.graph()
    assert layout.circles(edges) == [], "modules that import each other, through any path"
    assert layout.circles(layout.folder_graph(edges)) == [], "folders that import each other"


def test_no_import_runs_back_up():
    wrong = layout.back_up(layout.graph())
    assert wrong == [], "imports of a folder above (LAYERS in tests/import_layout.py): " + \
        ", ".join(" -> ".join(pair) for pair in wrong)


def test_few_modules_at_the_top_level():
    top = layout.figures()["top_level_modules"]
    assert top <= MAX_TOP_LEVEL_MODULES, f"{top} modules beside the folders"


def test_the_reader_sees_imports_inside_functions_and_catches_a_circle_and_a_climb(tmp_path):
    """The helper on a package made for it: an import inside a function closes a circle, and a
    lower folder imports a higher one, and both are found (so the checks above can fail)."""
    package = tmp_path / "autograder"
    for folder in ("trust", "engine"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "engine" / "grade.py").write_text("from ..trust import sandbox\n")
    (package / "trust" / "sandbox.py").write_text(textwrap.dedent("""\
        def late():
            from ..engine.grade import something
            return something
        """))
    edges = layout.graph(package)
    assert edges["autograder.trust.sandbox"] == {"autograder.engine.grade"}
    assert layout.circles(edges) == [["autograder.engine.grade", "autograder.trust.sandbox"]]
    assert layout.back_up(edges) == [("autograder.trust.sandbox", "autograder.engine.grade")]


def test_no_folder_of_the_course_is_hidden_from_git():
    """A file added to any folder the course keeps in git is not ignored: an unanchored `feedback/`
    in .gitignore (nbgrader's folder in the course root) once hid `autograder/feedback/` from git
    and from ruff, so a clean clone lacked two of its modules."""
    root = Path(__file__).resolve().parents[1]
    if shutil.which("git") is None or not (root / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True).stdout
    folders = sorted({str(Path(path).parent) for path in tracked.splitlines() if "/" in path})
    probes = [f"{folder}/a_new_module.py" for folder in folders]
    ignored = subprocess.run(["git", "check-ignore", "--no-index", "--stdin"], cwd=root, input="\n".join(probes),
                             capture_output=True, text=True).stdout.split()
    assert ignored == [], f"these folders' new files would be left out of git: {ignored}"
