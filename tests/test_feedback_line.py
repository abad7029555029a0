"""The check line (coursekit.feedback): the hidden graders' report on the saved notebook, in
the notebook, before the deadline; and nbgrader's Validate, which must not call an unfinished
or wrong notebook a pass. (The feedback service has its own tests; the browser test drives
both through JupyterLab.)"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from autograder.feedback.reports import feedback_for, graded
from autograder.paths import ROOT, release_notebook, solution_notebook
from autograder.trust.submission import nbgrader_meta
from autograder.units import UNITS
from coursekit import feedback

GRADED = [u for u in UNITS if solution_notebook(u).exists()]
GLOBAL_MAX_SOFTMAX = (
    "def softmax(x, axis=-1):\n"
    "    e = np.exp(x - x.max())\n"
    "    return e / e.sum(axis=axis, keepdims=True)\n"
)
NAMED = "This looks like a softmax shifted by the maximum of the whole array"


def grade_id(cell) -> str:
    return str(nbgrader_meta(cell).get("grade_id", ""))


@pytest.fixture
def private_cache(tmp_path, monkeypatch):
    """Each test its own cache of answers (and no configured service), and so its own warm
    grader if a check starts one: it leaves within seconds of its socket's removal, at the end."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for name in (feedback.ENV_URL, feedback.ENV_TOKEN, "NBGRADER_EXECUTION", "JPY_SESSION_NAME"):
        monkeypatch.delenv(name, raising=False)
    yield tmp_path
    feedback.warm_grader_socket().unlink(missing_ok=True)


def with_answer(unit: str, part: str, source: str, folder: Path) -> Path:
    """A copy of the student release of `unit` with `part`'s answer cell replaced."""
    nb = nbformat.read(release_notebook(unit), as_version=4)
    [cell] = [c for c in nb.cells if grade_id(c) == part]
    cell.source = source
    path = folder / release_notebook(unit).name
    nbformat.write(nb, path)
    return path


@pytest.mark.parametrize("unit", GRADED)
def test_every_graded_part_has_a_check_line_after_its_grade_cell(unit):
    nb = nbformat.read(release_notebook(unit), as_version=4)
    ids = [grade_id(c) for c in nb.cells]
    for part in UNITS[unit].parts:
        at = ids.index(f"grade_{part.name}")
        line = nb.cells[at + 1]
        assert grade_id(line) == f"feedback_{part.name}" and nbgrader_meta(line).get("locked")
        assert f'ask_graders("{unit}", "{part.name}")' in line.source
        assert f'validate_part("{unit}", "{part.name}")' in nb.cells[at].source
    assert grade_id(nb.cells[-1]) == "feedback_all" and f'ask_graders("{unit}")' in nb.cells[-1].source
    quizzes = [c for c in nb.cells if "quiz" in c.metadata]
    assert quizzes and all(c.metadata.get("jupyter", {}).get("source_hidden") for c in quizzes)


def test_the_check_line_in_a_kernel_names_the_mistake_of_the_saved_answer(private_cache, monkeypatch):
    """The line as a student runs it: in a Jupyter kernel started for the saved notebook (as
    Jupyter Server starts it: JPY_SESSION_NAME), with the course's own graders."""
    path = with_answer("01_attention", "softmax", GLOBAL_MAX_SOFTMAX, private_cache)
    nb = nbformat.read(path, as_version=4)
    ids = [grade_id(c) for c in nb.cells]
    wanted = ("setup", "softmax", "feedback_softmax")
    run = nbformat.v4.new_notebook(cells=[nb.cells[ids.index(i)] for i in wanted])
    monkeypatch.setenv("JPY_SESSION_NAME", str(path))  # the kernel inherits it, as from Jupyter Server
    NotebookClient(run, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(private_cache)}}
                   ).execute()
    text = "".join(o.get("text", "") for o in run.cells[-1].outputs)
    assert "`softmax`: 3 / 4 points" in text and NAMED in text, text
    # Above the report, the line that counted the seconds while the graders worked, in its last state.
    shown = [o["data"]["text/plain"] for o in run.cells[-1].outputs if o.get("output_type") == "display_data"]
    assert len(shown) == 1 and re.fullmatch(rf"Graded {path.name} as saved \(`softmax`\) in \d+ s\.", shown[0]), shown
    assert "as saved at" in text and "Careful" not in text, text
    # The same report, word for word, as the graders' own (`python -m autograder feedback`).
    report = feedback_for("01_attention", path.read_bytes(), "softmax")
    assert report["parts"][0]["text"] in text


def test_the_check_line_asks_a_configured_service_and_shows_its_refusal(private_cache, monkeypatch, capsys):
    """What a student in a class sees: `connect` once, then the line grades through the service,
    which records the check; a changed notebook over the limit gets the service's sentence."""
    from autograder.feedback.db import GRADED as RECORDED_GRADED
    from autograder.feedback.db import OVER_LIMIT, Database
    from autograder.feedback.service import Grading, Service

    db = Database(f"sqlite:///{private_cache / 'feedback.db'}")
    tokens = db.add_students(["ada"])
    service = Service(["01_attention"], db, Grading(workers=1), limit=1, log=lambda line: None)
    try:
        port = service.start()
        feedback.connect(f"http://127.0.0.1:{port}", tokens["ada"])
        path = with_answer("01_attention", "softmax", GLOBAL_MAX_SOFTMAX, private_cache)
        monkeypatch.setenv("JPY_SESSION_NAME", str(path))
        feedback.ask_graders("01_attention", "softmax")
        out = capsys.readouterr().out
        assert NAMED in out and f"feedback service (http://127.0.0.1:{port})" in out, out
        path.write_text(path.read_text().replace("x.max()", "x.max(axis=axis, keepdims=True)"))
        feedback.ask_graders("01_attention", "softmax")
        out = capsys.readouterr().out
        assert "You have used your 1 check of `softmax` per hour" in out and NAMED not in out, out
        assert [(r["student"], r["outcome"]) for r in db.records()] == [("ada", RECORDED_GRADED)]
        assert [(r["student"], r["outcome"], r["count"]) for r in db.refusals()] == [("ada", OVER_LIMIT, 1)]
    finally:
        service.stop()


def test_a_part_asked_alone_is_graded_alone_and_reads_as_in_the_whole_report():
    """Issue 27: asking about one part runs that part's checks only (so it costs what they cost),
    and its report is word for word the one the whole notebook's grading gives that part."""
    data = (ROOT / "tests" / "submissions" / "01_attention" / "wrong_softmax_axis_zero.py").read_bytes()
    whole = feedback_for("01_attention", data, None, "submission.py")
    for part in ("softmax", "self_attention"):  # the mistake's own part, and one that uses it
        run = graded("01_attention", data, "submission.py", [part])
        assert {check["name"].split("/")[0] for check in run["checks"]} == {part}
        alone = feedback_for("01_attention", data, part, "submission.py")
        assert alone["parts"] == [p for p in whole["parts"] if p["name"] == part]
    assert whole["parts"][0]["points"] < whole["parts"][0]["max_points"]  # the mistake is seen


def test_the_check_line_estimates_from_this_machines_last_checks(private_cache):
    assert feedback.past_duration("04_block", "gelu") is None  # nothing known before the first check
    for seconds in (4.0, 30.0, 5.0):
        feedback._remember_duration("04_block", "gelu", seconds)
    assert feedback.past_duration("04_block", "gelu") == 5.0  # the median: one slow check does not move it
    assert feedback.past_duration("04_block", "layer_norm") == 5.0  # another part: the unit's checks
    assert feedback.past_duration("05_model", "GPT") is None
    for seconds in range(10):
        feedback._remember_duration("04_block", "gelu", float(seconds))
    assert feedback.past_duration("04_block", "gelu") == 7.0  # the last five: 5, 6, 7, 8, 9


def test_the_check_line_says_when_the_saved_file_is_not_what_ran():
    saved = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(GLOBAL_MAX_SOFTMAX),
                                            nbformat.v4.new_code_cell("def other():\n    return 1\n")])
    ran_then_edited = [GLOBAL_MAX_SOFTMAX, "def softmax(x, axis=-1):\n    return x\n", "def other():\n    return 1"]
    assert feedback.unsaved_names(saved, ran_then_edited) == ["softmax"]
    assert feedback.unsaved_names(saved, [GLOBAL_MAX_SOFTMAX, "def other():\n    return 1"]) == []
    assert feedback.unsaved_names(saved, []) == []  # a fresh kernel: the file is all there is


def test_without_graders_or_service_the_line_says_so_in_one_sentence(private_cache, monkeypatch, capsys):
    path = with_answer("01_attention", "softmax", GLOBAL_MAX_SOFTMAX, private_cache)
    monkeypatch.setenv("JPY_SESSION_NAME", str(path))
    monkeypatch.setattr(feedback, "COURSE_ROOT", private_cache)  # a class release: no autograder/
    feedback.ask_graders("01_attention", "softmax")
    out = capsys.readouterr().out.strip()
    assert out.startswith("The hidden graders are not part of this copy") and out.count(". ") == 0, out
    assert not (private_cache / "cache").exists()  # nothing was started


def test_while_nbgrader_runs_the_notebook_the_line_does_nothing(private_cache, monkeypatch, capsys):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    feedback.ask_graders("01_attention", "softmax")
    feedback.validate_part("01_attention", "softmax")
    assert "does nothing while nbgrader runs" in capsys.readouterr().out
    assert not (private_cache / "cache").exists()


def validate(folder: Path) -> str:
    """`nbgrader validate` on every notebook in `folder`, configured as the course configures it
    (the course root's nbgrader_config.py), as a student's JupyterLab would run it."""
    (folder / "nbgrader_config.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from autograder.nbgrader.course import configure\n"
        f"configure(get_config(), {str(ROOT)!r})\n")
    notebooks = sorted(p.name for p in folder.glob("*.ipynb"))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("JPY_SESSION_NAME", None)
    proc = subprocess.run([sys.executable, "-m", "nbgrader", "validate", *notebooks], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=900)
    return proc.stdout + proc.stderr


@pytest.mark.parametrize("unit", GRADED)
def test_validate_fails_the_untouched_release(unit, private_cache):
    shutil.copy(release_notebook(unit), private_cache)
    out = validate(private_cache)
    assert "Success" not in out and "VALIDATION FAILED" in out, out[-3000:]
    assert "does not pass its visible checks" in out, out[-3000:]


def answers(private_cache: Path) -> list[dict]:
    """The check line's answers that a test left in its private cache."""
    folder = private_cache / "cache" / "transformer-course" / "feedback"
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


@pytest.mark.parametrize("unit", GRADED)
def test_validate_passes_the_reference(unit, private_cache):
    """Also every unit's reference at full marks from the hidden graders, run as their command
    line (`python -m autograder feedback`) in a fresh process: test_graders.py checks the
    `check --json` command on one unit only, so the references are not graded twice."""
    shutil.copy(solution_notebook(unit), private_cache)
    out = validate(private_cache)
    assert "Success! Your notebook passes all the tests." in out, out[-3000:]
    [answer] = answers(private_cache)  # one grading served every grade cell
    report = answer["report"]
    assert [p["name"] for p in report["parts"]] == [p.name for p in UNITS[unit].parts]
    assert all(p["points"] == p["max_points"] and not p["mistakes"] for p in report["parts"]), report
    assert report["score"] == report["max_score"] == UNITS[unit].points


def test_validate_fails_a_part_only_the_hidden_graders_catch(private_cache):
    """A softmax that changes its input in place passes the visible checks (softmax does not
    change when its input is shifted); the hidden graders' verdict fails the cell."""
    nb = nbformat.read(solution_notebook("01_attention"), as_version=4)
    [cell] = [c for c in nb.cells if grade_id(c) == "softmax"]
    assert "shifted = x - x.max(axis=axis, keepdims=True)" in cell.source
    cell.source = cell.source.replace("shifted = x - x.max(axis=axis, keepdims=True)",
                                      "x -= x.max(axis=axis, keepdims=True)\n    shifted = x")
    nbformat.write(nb, private_cache / "attention.ipynb")
    out = validate(private_cache)
    assert "VALIDATION FAILED ON 1 CELL(S)" in out and "`softmax`: 3 / 4 points" in out, out[-3000:]
    assert "changed its input" in out and "Success" not in out, out[-3000:]
    [answer] = answers(private_cache)  # graded once for the three grade cells
    assert answer["ok"] and answer["report"]["score"] == 14
