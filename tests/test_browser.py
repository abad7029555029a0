"""Issue 19 in a real browser: a student in JupyterLab writes a wrong answer, runs the check
line under the part, and sees the graders name the mistake; the same through the class's
feedback service; and a self-check quiz answers a click.

One JupyterLab and one Chromium serve every test here (each costs seconds on two cores). The
service's check runs in a second notebook whose kernel carries the service's address and a
student's token in its environment, as a hub would set them; the first notebook's kernel has
neither, so it grades with the graders of this repository.

Skipped where Chromium or its driver is missing; Debian's packages install both:
    apt-get install -y chromium chromium-driver
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.browser_lab import (
    CHROMEDRIVER,
    CHROMIUM,
    INSTALL_LINE,
    RUN_MARKER,
    JupyterLab,
    NotebookPage,
    free_port,
    kill_marked,
    start_chromium,
    stop_group,
)

missing = [name for name, path in (("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER)) if not path]
needs_chromium = pytest.mark.skipif(
    bool(missing), reason=f"no {' or '.join(missing)} on PATH: `{INSTALL_LINE}` installs the browser test's Chromium")
# One JupyterLab and one browser for the module: under xdist its tests stay on one worker.
pytestmark = pytest.mark.xdist_group("browser")
pytest.importorskip("selenium", reason="selenium is not installed: `pip install -r requirements.txt`")

from autograder.feedback.reports import feedback_for  # noqa: E402 (after the skip: the check is cheap, the import is not)
from autograder.paths import ROOT  # noqa: E402
from autograder.units import get_unit  # noqa: E402
from coursekit.quiz import LETTERS, decode_quiz  # noqa: E402

UNIT = "01_attention"
RELEASE = ROOT / "exercises" / UNIT / "attention.ipynb"
PART = "softmax"
MISTAKE = "softmax_global_max"
# The mistake, typed as a student would; one line, so the editor's auto-indent cannot reshape it.
WRONG_ANSWER = ("def softmax(x, axis=-1): "
                "return np.exp(x - x.max()) / np.exp(x - x.max()).sum(axis=axis, keepdims=True)")
ALONE, IN_CLASS = "attention.ipynb", "attention_in_class.ipynb"
SERVICE_KERNEL = "course-feedback-service"
SERVICE_COMMAND = [sys.executable, str(ROOT / "course.py"), "feedback-server"]
CHECK_SECONDS = 120  # a check on an idle machine answers in 2-5 s; CI's two cores are shared


def named(mistake: str) -> str:
    """How the grade cells name `mistake`: the catalogue's own words."""
    [found] = [m for m in get_unit(UNIT).misconceptions if m.name == mistake]
    return f"This looks like {found.description}."


# ---------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def service(tmp_path_factory):
    """`course.py feedback-server` for this unit, with one student; None and why where it
    cannot start (the test of the service fails with that; the others go on without it)."""
    home = tmp_path_factory.mktemp("feedback_service")
    db = f"sqlite:///{home / 'f.db'}"
    made = subprocess.run([*SERVICE_COMMAND, "--add-students", "ada", "--db", db],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    tokens = dict(line.split(None, 1) for line in made.stdout.splitlines() if line.count(" ") == 1)
    if made.returncode or "ada" not in tokens:
        said = (made.stderr or made.stdout).strip().splitlines()
        yield None, (f"`course.py feedback-server --add-students ada` gave no token (exit {made.returncode}"
                     f"{': ' + said[0] if said else ''})")
        return
    port, marker = free_port(), secrets.token_hex(8)
    log = home / "service.log"
    process = subprocess.Popen([*SERVICE_COMMAND, UNIT, "--port", str(port), "--db", db, "--workers", "1"],
                               cwd=ROOT, env=dict(os.environ, **{RUN_MARKER: marker}),
                               stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield {"url": f"http://127.0.0.1:{port}", "token": tokens["ada"].strip(), "db": db, "log": log,
               "process": process}, None
    finally:
        stop_group(process)
        kill_marked(marker)


def wait_healthy(service: dict, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if service["process"].poll() is not None:
            pytest.fail(f"the feedback service exited:\n{service['log'].read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{service['url']}/api/health", timeout=2) as answer:
                if json.load(answer).get("ok"):
                    return
        except OSError:
            time.sleep(0.3)
    pytest.fail(f"the feedback service did not answer in {timeout:.0f} s:\n{service['log'].read_text()[-2000:]}")


@pytest.fixture(scope="module")
def lab(tmp_path_factory, service):
    """JupyterLab on copies of the student release, outside the repository (coursekit finds the
    graders from there, as it does for a student's own copy)."""
    root = tmp_path_factory.mktemp("lab_root")
    shutil.copy(RELEASE, root / ALONE)
    kernels = {}
    running, _ = service
    if running:
        class_copy = json.loads(RELEASE.read_text())
        class_copy["metadata"]["kernelspec"] = {"name": SERVICE_KERNEL, "display_name": SERVICE_KERNEL,
                                                "language": "python"}
        (root / IN_CLASS).write_text(json.dumps(class_copy, indent=1))
        kernels[SERVICE_KERNEL] = {"COURSE_FEEDBACK_URL": running["url"],
                                   "COURSE_FEEDBACK_TOKEN": running["token"]}
    server = JupyterLab(root, tmp_path_factory.mktemp("lab_home"), kernels)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory, lab):
    driver = start_chromium(tmp_path_factory.mktemp("chromium_profile"))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def notebooks(browser, lab):
    """The notebook pages made so far, by file name."""
    return {}


@pytest.fixture
def open_notebook(browser, lab, notebooks, tmp_path):
    """Open (or bring back to the front) a notebook of the lab's folder."""
    def opening(name: str) -> NotebookPage:
        page = notebooks.setdefault(name, NotebookPage(browser, lab, name, tmp_path))
        page.artifacts = tmp_path  # a timeout's screenshot goes with the test that waited
        page.open()
        return page

    return opening


# ---------------------------------------------------------------------------------- the tests
def test_without_chromium_the_browser_tests_are_skipped_with_the_line_that_installs_it():
    """What a machine without Chromium sees (the browser tests cannot show it where it is)."""
    path = [d for d in os.environ.get("PATH", "").split(os.pathsep)
            if d and not any((Path(d) / name).exists() for name in ("chromium", "chromedriver"))]
    # --noconftest: the suite's conftest imports the class-grading demo (3 s) these tests never use.
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "--noconftest",
                          "-k", "not without_chromium", __file__],
                         cwd=ROOT, env=dict(os.environ, PATH=os.pathsep.join(path)),
                         capture_output=True, text=True, timeout=300)
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    all_skipped = re.fullmatch(r"[3-9] skipped, 1 deselected in .*", summary)
    assert run.returncode == 0 and all_skipped and INSTALL_LINE in run.stdout, (
        f"without Chromium the browser tests should all be skipped, saying how to install it:\n{run.stdout[-2000:]}")


def write_wrong_answer_and_check(page: NotebookPage) -> str:
    """Type the wrong softmax, save, run the setup and answer cells, run the check line; the
    check line's output once it names the mistake."""
    answer, check_line = page.index_of(grade_id=PART), page.index_of(grade_id=f"feedback_{PART}")
    assert check_line == page.index_of(grade_id=f"grade_{PART}") + 1, "the check line follows the grade cell"
    page.type_source(answer, WRONG_ANSWER)
    page.save(WRONG_ANSWER)
    for index in (page.index_of(grade_id="setup"), answer):
        page.run(index)
        page.wait_ran(index, 60)
    page.run(check_line)
    shown = page.wait_output(check_line, named(MISTAKE), CHECK_SECONDS)
    # Above the report, the line that counted the seconds while the graders worked, in its last state.
    assert re.search(rf"Graded {re.escape(page.path)} as saved \(`{PART}`\) in \d+ s\.", shown), shown
    return shown


def saved_report_text(page: NotebookPage) -> str:
    """What the grade cell would say about the notebook as saved (the graders run here)."""
    report = feedback_for(UNIT, (page.lab.root / page.path).read_bytes(), PART)
    [part] = report["parts"]
    assert MISTAKE in part["mistakes"], part
    return part["text"]


def assert_shows(shown: str, text: str) -> None:
    squeeze = " ".join
    assert squeeze(text.split()) in squeeze(shown.split()), f"the check line showed:\n{shown}\n\nnot:\n{text}"


@needs_chromium
def test_the_check_line_names_the_mistake_in_jupyterlab(open_notebook):
    page = open_notebook(ALONE)
    shown = write_wrong_answer_and_check(page)
    # The whole grade cell's report, its points line first: what `nbgrader autograde` would show.
    assert_shows(shown, saved_report_text(page))


@needs_chromium
def test_a_quiz_option_shows_its_explanation(open_notebook):
    from selenium.webdriver.common.by import By

    page = open_notebook(ALONE)
    index = page.index_of(metadata_key="quiz")
    source = "".join(page.cells_on_disk[index]["source"])
    quiz = decode_quiz(re.search(r'show_quiz\("([^"]+)"\)', source).group(1))
    page.run(index)
    buttons = page.wait(lambda: page.cell(index).find_elements(By.CSS_SELECTOR, ".jp-OutputArea button"),
                        "the quiz's buttons", 60, lambda: page.output_text(index))
    assert [b.text for b in buttons] == list(LETTERS[: len(quiz.options)])
    wrong = next(i for i, o in enumerate(quiz.options) if not o.correct)
    right = next(i for i, o in enumerate(quiz.options) if o.correct)
    for choice in (wrong, right):
        buttons[choice].click()
        verdict = quiz.check(choice)
        assert verdict.message.startswith("Yes." if choice == right else "Not quite.")
        page.wait_output(index, f"{LETTERS[choice]}. {verdict.message}", 30)


@needs_chromium
def test_the_check_line_names_the_mistake_through_the_feedback_service(open_notebook, service):
    running, why_not = service
    if not running:
        pytest.fail(why_not)
    wait_healthy(running)
    page = open_notebook(IN_CLASS)
    shown = write_wrong_answer_and_check(page)
    assert_shows(shown, saved_report_text(page))
    # The answer came from the service: it recorded this student's check of the saved file,
    # with the mistake it named.
    from autograder.feedback.db import Database

    database = Database(running["db"])
    try:
        records = database.records()
    finally:
        database.close()
    recorded = [(r["student"], r["unit"], r["part"], r["outcome"], r["parts"].get(PART, {}).get("mistakes"))
                for r in records]
    assert recorded == [("ada", UNIT, PART, "graded", [MISTAKE])], (
        f"the service should have recorded this one check, with the mistake it named; its records: {records}")



# ---------------------------------------------------------------------------------- figures
CHAPTER = ROOT / "chapters" / "01_attention.ipynb"
FIGURE_CELLS = (1, 3, 5)  # the imports, the recurrent network's set-up, and its first figure


@pytest.fixture(scope="module")
def course_lab(tmp_path_factory):
    """`course.py lab` as a student starts it (from the course folder, so the Jupyter server
    reads the course's nbgrader settings, with the environment a shell gives it), serving a
    copy of chapter 01: its figures are drawn, never saved over the repository's notebook."""
    root = tmp_path_factory.mktemp("course_lab_root")
    shutil.copy(CHAPTER, root / CHAPTER.name)
    server = JupyterLab(root, tmp_path_factory.mktemp("course_lab_home"),
                        command=[sys.executable, str(ROOT / "course.py"), "lab"])
    driver = None
    try:
        server.wait_ready()
        driver = start_chromium(tmp_path_factory.mktemp("course_lab_chromium"))
        yield server, driver
    finally:
        if driver is not None:
            driver.quit()
        server.stop()


@needs_chromium
def test_a_chapter_shows_its_figures_in_the_course_lab(course_lab, tmp_path):
    """Issue 27: nothing the course's nbgrader settings do reaches a student's kernel, so
    `plt.show()` in a chapter draws its figure inline (it printed nothing while the settings
    set MPLBACKEND=Agg in the Jupyter server, whose kernels inherit its environment)."""
    lab, driver = course_lab
    page = NotebookPage(driver, lab, CHAPTER.name, tmp_path)
    page.open()
    for index in FIGURE_CELLS:
        page.run(index)
        page.wait_ran(index, CHECK_SECONDS)
    figure = FIGURE_CELLS[-1]
    shown = page.wait(lambda: [src for src in page.images(figure) if src.startswith("data:image/png;base64,")],
                      f"cell {figure}'s figure (an <img> of a PNG)", 60,
                      lambda: f"images {page.images(figure)}; text:\n{page.output_text(figure)}")
    assert len(shown) == 1 and len(shown[0]) > 5000, "the figure should be one PNG of a plotted chart"
