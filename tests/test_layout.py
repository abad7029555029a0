"""`autograder/` is laid out as its architecture (README, "Changing the course"): no import
circle, no import that runs back up the folders' order, at most 8 modules at its top level.
The imports are read with `ast` from every file, those inside functions included
(`import_layout.py`, which prints the figures)."""

import textwrap

import import_layout as layout

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
