"""Feedback pages and formgrader views are inert (issue 17, part 4).

One scratch course, graded by the real `nbgrader autograde` and `generate_feedback`: `ben`
hands in the untouched release (the page nothing was done to), `mallory` the reference
answers plus every way we know to put live markup into a page: raw HTML and dangerous link
targets in markdown cells, raw cells of several types, image attachments (an SVG with
script, an `attachment:` reference to nothing), metadata that templates print, and an HTML
output. Between autograde and feedback, mallory's autograded notebook is tampered with too,
because the feedback converter must not trust it to be inert.

Pages are read with the standard library's `html.parser`. What counts as active: a script,
an element that embeds, submits or redirects (iframe, object, embed, frame, form, input,
button, base, meta http-equiv, svg, math, style, link), an `on*` attribute, a style with
`url(`, and a URL attribute whose scheme is not http, https or mailto (PNG and JPEG images
inline, `data:image/png;base64,` in an `<img src>`, are how figures are shown and stay).
Mallory's page may hold only active things that ben's page holds too, byte for byte: the
template's own. Her honest text, math, table, code span, link and PNG attachment must show.
"""

from __future__ import annotations

import base64
import re
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest

from autograder.nbgrader.course import ScratchCourse
from autograder.paths import unit_notebook_name
from autograder.tools.demo import SampleMaker
from autograder.trust.submission import nbgrader_meta
from autograder.units import UNITS

UNIT = "01_attention"
NAME = unit_notebook_name(UNIT)
pytestmark = [pytest.mark.nbgrader, pytest.mark.xdist_group("feedback_inert")]  # one course, built once

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
SVG_WITH_SCRIPT = base64.b64encode(b'<svg xmlns="http://www.w3.org/2000/svg" onload="alert(\'svg-attachment\')">'
                                   b"<script>alert('svg-attachment')</script></svg>").decode()

HONEST = ("## Honest heading\n\n"
          "Some *emphasis*, a code span `softmax(x)`, inline math $x^2 + y_i$ and $a < b$, display math:\n\n"
          "$$\\sum_i e^{x_i}$$\n\n"
          "| column | value |\n|---|---:|\n| alpha | 0.5 |\n\n"
          "- first item\n- second item\n\n"
          "A [normal link](https://example.org/honest-link).\n\n"
          "![diagram](attachment:diagram.png)")

# One markdown cell each, so that an HTML block in one does not swallow the next.
MARKDOWN_ATTACKS = [
    '<script>alert("md-script")</script>',
    'inline <b onmouseover=alert("md-onmouseover")>bold</b> and <img src="x" onerror="alert(1)">',
    '<svg onload=alert("md-svg")><circle r="1"/></svg>',
    '<iframe srcdoc="<script>alert(\'md-iframe\')</script>"></iframe>',
    '<object data="javascript:alert(1)"></object><embed src="javascript:alert(1)">',
    '<frameset><frame src="javascript:alert(1)"></frameset>',
    '<form action="javascript:alert(1)"><input type="submit" formaction="javascript:alert(2)">'
    '<button formaction="javascript:alert(3)">go</button></form>',
    '[js link](javascript:alert("md-js")) and [vb link](vbscript:msgbox(1)) and '
    '[data link](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)',
    '<javascript:alert("autolink")>',
    '[reference link][evil]\n\n[evil]: javascript:alert("md-ref")',
    '![svg image](data:image/svg+xml;base64,' + SVG_WITH_SCRIPT + ') ![js image](javascript:alert(1))',
    '<a href="jav&#x09;ascript:alert(1)">tab</a> <a href=" JaVaScRiPt:alert(1)">case</a> '
    '<a href="&#106;avascript:alert(1)">entity</a>',
    '<p style="background:url(javascript:alert(1))">styled</p> <img srcset="javascript:alert(1) 1x">',
    '<svg><a xlink:href="javascript:alert(1)"><text>svg link</text></a></svg>',
    '<meta http-equiv="refresh" content="0;url=javascript:alert(1)"><base href="javascript:alert(1)//">',
    '<math><mtext><table><mglyph><style><img src=x onerror=alert("mxss")>',
    '<style>body { background: url(javascript:alert(1)) }</style><link rel="stylesheet" href="javascript:alert(1)">',
    '<details open ontoggle=alert("md-toggle")>details</details>',
    '![evil attachment](attachment:evil.svg) ![missing attachment](attachment:missing.png)',
]
RAW_ATTACKS = [  # (raw_mimetype, source); None: no mimetype
    ("text/html", '<b>RAW-HTML-MARKER</b><script>alert("raw-html")</script><img src=x onerror=alert(1)>'
                  '<a href="javascript:alert(1)">raw link</a>'),
    (None, '<script>alert("raw-plain")</script><iframe src="javascript:alert(1)"></iframe>'),
    ("TEXT/HTML", '<svg onload=alert("raw-upper")></svg>'),
    ("text/markdown", '[raw md](javascript:alert("raw-md")) <script>alert("raw-md")</script>'),
    ("text/latex", '<script>alert("raw-latex")</script>'),
]
KERNEL_HTML = ('from IPython.display import HTML, Javascript, SVG, display\n'
               'display(HTML("<script>alert(\'kernel-html\')</script>"))\n'
               'display(Javascript("alert(\'kernel-js\')"))\n'
               'display(SVG("<svg xmlns=\'http://www.w3.org/2000/svg\' onload=\'alert(1)\'></svg>"))')


def hostile_notebook(maker: SampleMaker):
    nb = maker.notebook(maker.answers)  # full marks: grading must not suffer from any of this
    honest = nbformat.v4.new_markdown_cell(HONEST)
    honest.attachments = {"diagram.png": {"image/png": PNG},
                          "evil.svg": {"image/svg+xml": SVG_WITH_SCRIPT}}
    honest.metadata["tags"] = ['x" onmouseover="alert(\'tag\')', "<script>alert('tag')</script>"]
    honest.metadata["jupyter"] = {"source_hidden": "<script>alert('hidden')</script>", "outputs_hidden": True}
    cells = [honest]
    for source in MARKDOWN_ATTACKS:
        cell = nbformat.v4.new_markdown_cell(source)
        cell.attachments = {"evil.svg": {"image/svg+xml": SVG_WITH_SCRIPT}}
        cells.append(cell)
    for mimetype, source in RAW_ATTACKS:
        cell = nbformat.v4.new_raw_cell(source)
        if mimetype:
            cell.metadata["raw_mimetype"] = mimetype
        cells.append(cell)
    cells.append(nbformat.v4.new_code_cell(KERNEL_HTML))
    nb.cells[1:1] = cells  # after the title, before the exercises
    nb.metadata["title"] = "</title><script>alert('title')</script>"
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {
        "version_major": 2, "version_minor": 0, "state": {"x": "</script><script>alert('widget')</script>"}}}
    nb.metadata["kernelspec"]["display_name"] = "<script>alert('kernel')</script>"
    nb.metadata["language_info"] = {"name": "python", "pygments_lexer": "<script>alert('lexer')</script>"}
    return nb


def tamper(path: Path) -> None:
    """What an autograded notebook that is not inert could hold, written after autograde."""
    nb = nbformat.read(path, as_version=4)
    output = nbformat.v4.new_output("display_data", data={
        "text/html": "<script>alert('late-html')</script>",
        "application/javascript": "alert('late-js')",
        "image/svg+xml": "<svg xmlns='http://www.w3.org/2000/svg' onload=\"alert('late-svg')\"></svg>",
        "text/markdown": "[late](javascript:alert('late-md'))",
        "image/png": PNG,
    }, metadata={"image/png": {"width": '1" onerror="alert(\'late-width\')'}})
    code = nbformat.v4.new_code_cell("print('late')", outputs=[output])
    markdown = nbformat.v4.new_markdown_cell('<script>alert("late-md-cell")</script>\n\n'
                                            '[late link](javascript:alert("late-link")) ![gone](attachment:gone.png)')
    raw = nbformat.v4.new_raw_cell('<img src=x onerror=alert("late-raw")>', metadata={"raw_mimetype": "text/html"})
    nb.cells[1:1] = [code, markdown, raw]
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": "</script><script>x</script>"}}
    nbformat.write(nb, path)


class Page(HTMLParser):
    """A page's elements, with their attributes, and its text (scripts' text apart)."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, tuple[tuple[str, str], ...]]] = []
        self.scripts: list[str] = []
        self.text_parts: list[str] = []
        self._in_script = False
        self.feed(html)
        self.close()

    def handle_starttag(self, tag, attrs):
        attrs = tuple((name, value or "") for name, value in attrs)
        self.elements.append((tag, attrs))
        if tag == "script":
            self._in_script = True
            self.scripts.append(repr(attrs))

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data
        else:
            self.text_parts.append(data)

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    def attributes(self, tag: str, name: str) -> list[str]:
        return [value for t, attrs in self.elements if t == tag for n, value in attrs if n == name]


ACTIVE_TAGS = {"script", "iframe", "object", "embed", "frame", "frameset", "form", "input", "button", "base",
               "svg", "math", "style", "link", "textarea", "select"}
URL_ATTRIBUTES = {"href", "src", "action", "formaction", "xlink:href", "srcset", "data", "poster", "background",
                  "ping", "codebase", "cite", "dynsrc", "lowsrc"}
RASTER_IMAGE = re.compile(r"data:image/(png|jpeg);base64,[A-Za-z0-9+/=\s]*")


def bad_url(tag: str, name: str, value: str) -> bool:
    if tag == "img" and name == "src" and RASTER_IMAGE.fullmatch(value.strip()):
        return False
    if name == "srcset":  # every candidate, not just the first
        return any(bad_url(tag, "src", part.split()[0]) for part in value.split(",") if part.split())
    compact = re.sub(r"[\x00-\x20\x7f-\xa0]", "", value)  # what browsers ignore in a scheme
    scheme = re.match(r"([^/?#:]*):", compact)
    return scheme is not None and scheme.group(1).lower() not in ("http", "https", "mailto")


def active_parts(page: Page) -> list[str]:
    """Everything on the page that can run, load or submit something, as text to compare."""
    found = [f"script {s}" for s in page.scripts]
    for tag, attrs in page.elements:
        names = {name for name, _ in attrs}
        if tag in ACTIVE_TAGS - {"script"} or (tag == "meta" and "http-equiv" in names):
            found.append(f"element {tag} {attrs}")
        for name, value in attrs:
            if name.startswith("on"):
                found.append(f"handler {tag} {name}={value}")
            elif name in URL_ATTRIBUTES and bad_url(tag, name, value):
                found.append(f"url {tag} {name}={value}")
            elif name == "style" and re.search(r"url\s*\(|expression\s*\(", value, re.IGNORECASE):
                found.append(f"style {tag} {value}")
    return found


def formgrade_page(path: Path, student: str) -> str:
    """The autograded notebook as formgrader renders it for manual grading: its template, its resources."""
    import nbgrader
    from nbconvert.exporters import HTMLExporter

    templates = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates"
    exporter = HTMLExporter(template_name="formgrade", extra_template_basedirs=[str(templates)])
    resources = {"assignment_id": UNIT, "notebook_id": NAME.removesuffix(".ipynb"), "submission_id": "s1",
                 "index": 0, "total": 2, "base_url": "", "student": student, "last_name": "", "first_name": "",
                 "notebook_path": f"autograded/{student}/{UNIT}/{NAME}"}
    html, _ = exporter.from_filename(str(path), resources=resources)
    return html


def lab_page(path: Path) -> str:
    """The autograded notebook as `jupyter nbconvert --to html` renders it (the lab template)."""
    from nbconvert.exporters import HTMLExporter

    html, _ = HTMLExporter(template_name="lab").from_filename(str(path))
    return html


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    course = ScratchCourse(tmp_path_factory.mktemp("inert") / "course")
    course.create()
    course.generate_assignment(UNIT)
    maker = SampleMaker(UNIT, course.release / UNIT / NAME)
    submitted = {"ben": maker.notebook(), "mallory": hostile_notebook(maker)}
    for student, nb in submitted.items():
        course.submit(student, UNIT, nb, NAME)
    proc = course.autograde(UNIT)
    autograded = {s: course.path / "autograded" / s / UNIT / NAME for s in submitted}
    views, view_errors = {}, {}
    for student, path in autograded.items():
        for kind, render in (("formgrade", lambda p, s=student: formgrade_page(p, s)), ("lab", lab_page)):
            try:
                views[(student, kind)] = render(path)
            except Exception as err:  # noqa: BLE001 - a view that cannot be rendered is a finding
                views[(student, kind)], view_errors[(student, kind)] = "", repr(err)
    notebooks = {s: nbformat.read(path, as_version=4) for s, path in autograded.items()}
    tamper(autograded["mallory"])
    feedback = course.nbgrader("generate_feedback", UNIT, "--force", check=False)
    pages = {}
    for student in submitted:
        page = course.path / "feedback" / student / UNIT / NAME.replace(".ipynb", ".html")
        pages[student] = page.read_text(encoding="utf-8") if page.exists() else ""
    with course.gradebook() as gb:
        scores = {s: gb.find_submission_notebook(NAME.removesuffix(".ipynb"), UNIT, s).score for s in submitted}
    return {"submitted": submitted, "autograded": notebooks, "views": views, "view_errors": view_errors,
            "pages": pages, "scores": scores,
            "log": proc.stdout + proc.stderr + feedback.stdout + feedback.stderr, "feedback_rc": feedback.returncode}


def test_grading_is_untouched_and_every_feedback_page_is_written(graded):
    assert graded["scores"] == {"ben": 0.0, "mallory": UNITS[UNIT].points}, graded["log"][-3000:]
    assert graded["feedback_rc"] == 0, graded["log"][-3000:]
    assert all(graded["pages"].values())
    assert graded["view_errors"] == {}  # formgrader's view too: an attachment reference to nothing once broke it


def test_nbgrader_metadata_and_cell_ids_are_kept(graded):
    def graded_cells(nb):
        return {(c.get("id"), nbgrader_meta(c).get("grade_id")) for c in nb.cells if nbgrader_meta(c)}

    submitted, autograded = graded["submitted"]["mallory"], graded["autograded"]["mallory"]
    assert graded_cells(autograded) == graded_cells(submitted)
    assert [c.get("id") for c in autograded.cells] == [c.get("id") for c in submitted.cells]


VIEWS = ["feedback", "formgrade", "lab"]  # the feedback page; the autograded notebook in formgrader and nbconvert


def pages_of(graded, view) -> tuple[Page, Page]:
    """(mallory's page, ben's page) in one view; a page that is not there is not inert, it is missing."""
    if view == "feedback":
        hostile, clean = graded["pages"]["mallory"], graded["pages"]["ben"]
    else:
        hostile, clean = graded["views"][("mallory", view)], graded["views"][("ben", view)]
    assert "Honest heading" in hostile and clean, view
    return Page(hostile), Page(clean)


@pytest.mark.parametrize("view", VIEWS)
def test_the_only_scripts_are_the_templates_own(graded, view):
    hostile, clean = pages_of(graded, view)
    assert clean.scripts  # the comparison means something: every template has a script or more
    assert hostile.scripts == clean.scripts  # byte for byte, in the same order


@pytest.mark.parametrize("view", VIEWS)
def test_nothing_active_comes_from_the_student(graded, view):
    hostile, clean = pages_of(graded, view)
    extra = set(active_parts(hostile)) - set(active_parts(clean))
    assert not extra, sorted(extra)


def test_the_feedback_page_has_no_event_handler_or_unsafe_url_at_all(graded):
    page = Page(graded["pages"]["mallory"])  # the feedback template has none of its own
    for tag, attrs in page.elements:
        for name, value in attrs:
            assert not name.startswith("on"), (tag, name, value)
            assert not (name in URL_ATTRIBUTES and bad_url(tag, name, value)), (tag, name, value)


@pytest.mark.parametrize("view", VIEWS)
def test_the_students_honest_text_math_and_link_show(graded, view):
    html = graded["pages"]["mallory"] if view == "feedback" else graded["views"][("mallory", view)]
    page = Page(html)
    text = re.sub(r"\s+", " ", page.text)
    for shown in ("Honest heading", "first item", "second item", "alpha", "0.5", "RAW-HTML-MARKER",
                  "$x^2 + y_i$", "$a < b$", "$$\\sum_i e^{x_i}$$"):
        assert shown in text, shown
    for markup in ("<em>emphasis</em>", "<code>softmax(x)</code>", "<td", "<li>first item</li>"):
        assert markup in html, markup
    assert re.search(r"<h2[^>]*>Honest heading", html)
    assert "https://example.org/honest-link" in page.attributes("a", "href")
    assert f"data:image/png;base64,{PNG}" in page.attributes("img", "src")  # the PNG attachment


def test_the_feedback_page_still_shows_the_grade_messages(graded):
    text = re.sub(r"\s+", " ", Page(graded["pages"]["mallory"]).text)
    for part in UNITS[UNIT].parts:
        assert f"`{part.name}`: {part.points:g} / {part.points:g} points" in text, part.name


def test_inert_markdown_renders_to_itself():
    """What InertNotebook stores for a markdown cell is read back by a markdown renderer as
    one HTML block, unchanged, and cleaning it again changes nothing."""
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    from autograder.trust.inert import inert_markdown

    for source in [HONEST, *MARKDOWN_ATTACKS, "```\ncode\n\nwith a blank line\n```\n\n[after](javascript:x)"]:
        stored = inert_markdown(source, {"diagram.png": {"image/png": PNG}})
        assert "\n" not in stored and "\r" not in stored
        assert markdown2html_mistune(stored).strip() == stored
        assert inert_markdown(stored) == stored


def test_the_feedback_exporter_alone_cleans_what_the_template_renders():
    """The page is cleaned after rendering even when the notebook reaches the exporter as it
    is (no InertNotebook, no InertOutputs): the last line of defence, on its own."""
    from nbgrader.converters import GenerateFeedback

    from autograder.trust.inert import InertFeedbackExporter

    def page(cells):
        nb = nbformat.v4.new_notebook(cells=cells, metadata={"title": "</title><script>alert('title')</script>"})
        config = GenerateFeedback().config  # the template and template paths nbgrader sets for feedback
        resources = {"nbgrader": {"notebook": "attention", "score": 1.0, "max_score": 2.0, "late_penalty": 0.0}}
        html, _ = InertFeedbackExporter(config=config).from_notebook_node(nb, resources=resources)
        return Page(html)

    attacks = [nbformat.v4.new_markdown_cell(source) for source in MARKDOWN_ATTACKS if "missing" not in source]
    attacks += [nbformat.v4.new_raw_cell(source, metadata={"raw_mimetype": mimetype or ""})
                for mimetype, source in RAW_ATTACKS]
    attacks.append(nbformat.v4.new_code_cell("x", outputs=[nbformat.v4.new_output("display_data", data={
        "text/html": "<script>alert('output')</script><a href='javascript:alert(1)'>x</a>",
        "image/svg+xml": "<svg xmlns='http://www.w3.org/2000/svg' onload='alert(1)'></svg>"})]))
    honest = nbformat.v4.new_markdown_cell(HONEST)
    honest.attachments = {"diagram.png": {"image/png": PNG}}
    hostile, clean = page([*attacks, honest]), page([])
    assert clean.scripts and hostile.scripts == clean.scripts
    extra = set(active_parts(hostile)) - set(active_parts(clean))
    assert not extra, sorted(extra)
    assert "https://example.org/honest-link" in hostile.attributes("a", "href")


def test_every_listed_preprocessor_runs(tmp_path):
    """A preprocessor listed in the course's settings but disabled (nbconvert's SanitizeHTML,
    ClearMetadataPreprocessor, CSSHTMLHeaderPreprocessor; nbgrader's IgnorePattern) does
    nothing, silently: every one listed must run."""
    from nbconvert.exporters import HTMLExporter, NotebookExporter
    from traitlets.config import Config

    from autograder.nbgrader.course import configure

    config = Config()
    configure(config, tmp_path)
    lists = {"sanitize": (NotebookExporter, config.Autograde.sanitize_preprocessors),
             "autograde": (NotebookExporter, config.Autograde.autograde_preprocessors),
             "feedback": (HTMLExporter, config.GenerateFeedback.preprocessors)}
    for name, (exporter_class, listed) in lists.items():
        exporter = exporter_class(config=config)
        exporter._preprocessors = []  # only the listed ones, registered as nbgrader registers them
        for preprocessor in listed:
            exporter.register_preprocessor(preprocessor)
        disabled = [type(p).__name__ for p in exporter._preprocessors if not p.enabled]
        assert not disabled, (name, disabled)
