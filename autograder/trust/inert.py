"""What a student wrote, made inert HTML: one sanitizer for the feedback page and for the
autograded notebook that formgrader shows the instructor.

nbconvert renders markdown with harmful link protocols allowed and passes raw HTML through,
and nbgrader's `SanitizeHTML` (off unless enabled) cleans markdown *before* it is rendered,
so `[x](javascript:...)` survives it. Here HTML is cleaned *after* rendering, with an
allow-list (bleach, whose html5lib parser reads markup the way browsers do):

- `inert_html` keeps text, formatting, lists, tables, code, headings, links and images;
  drops every other element (script, style, iframe, object, embed, form, input, button,
  svg, math, meta, base, ...) keeping its text as text, every attribute not listed
  (`on*=`, `srcset`, `action`, `formaction`, `xlink:href`, `data-*`, ...), every URL whose
  scheme is not http, https or mailto, except PNG and JPEG images inline (`data:image/png`
  and `data:image/jpeg` in an `<img src>`: how figures and attachments are shown), and every
  style but a few colour and alignment declarations.
- `inert_markdown` renders a markdown cell the way nbconvert does (math, tables, code
  spans), with attachments reduced to PNG and JPEG, cleans the result and stores it as one
  line of HTML in a `<div>`: CommonMark (nbconvert's mistune, JupyterLab's renderers) reads
  such a line as an HTML block and passes it through as it is, so rendering it again, by any
  of them, yields exactly the cleaned HTML and nothing that markdown syntax would make
  active. Math stays as TeX text (`$x^2$`), for the page's MathJax to typeset.
- `InertNotebook` rewrites a notebook with these: markdown and raw cells, attachments, and
  the metadata that templates print, keeping nbgrader's metadata and the cell ids.
- `InertFeedbackExporter` is the HTML exporter of `nbgrader generate_feedback`: after the
  page is rendered it cleans the whole `<body>` with `inert_html`.
"""

from __future__ import annotations

import re

import bleach
import nbformat
from bleach.css_sanitizer import CSSSanitizer
from nbconvert.exporters import HTMLExporter
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
from nbconvert.preprocessors import Preprocessor

ALLOWED_TAGS = frozenset({
    "a", "abbr", "b", "blockquote", "br", "caption", "cite", "code", "col", "colgroup", "dd", "del", "dfn",
    "div", "dl", "dt", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "ins", "kbd", "li", "mark",
    "ol", "p", "pre", "q", "s", "samp", "small", "span", "strike", "strong", "sub", "sup", "table", "tbody",
    "td", "tfoot", "th", "thead", "tr", "u", "ul", "var",
})
ATTRIBUTES = {
    "*": {"class", "id", "title", "style"},
    "a": {"href", "name"},
    "img": {"src", "alt", "width", "height"},
    "ol": {"start"},
    "td": {"colspan", "rowspan"},
    "th": {"colspan", "rowspan"},
}
URL_ATTRIBUTES = {"href", "src"}
SAFE_SCHEMES = frozenset({"http", "https", "mailto"})
# Figures (outputs that InertOutputs kept) and image attachments are shown inline this way.
RASTER_DATA_URL = re.compile(r"data:image/(?:png|jpeg);base64,[A-Za-z0-9+/=\s]*", re.IGNORECASE)
RASTER_TYPES = ("image/png", "image/jpeg")
# Colour (nbconvert's ANSI outputs) and table alignment (markdown tables); a value is a
# keyword, a hex colour or rgb(), so no url(), expression() or var() can get in.
STYLE_PROPERTIES = frozenset({"color", "background-color", "text-align", "font-weight", "font-style",
                              "text-decoration"})
STYLE_DECLARATION = re.compile(
    r"\s*([a-z-]+)\s*:\s*(#[0-9a-f]{3,8}|[a-z-]+|rgba?\(\s*[0-9.%\s,]+\))\s*", re.IGNORECASE)
# A class that a page script acts on: mermaid.js (in nbconvert's classic and lab pages)
# renders every `.mermaid` element, so a student's element must not carry it.
SCRIPTED_CLASSES = frozenset({"mermaid"})
INERT_BLOCK = '<div class="inert-markdown">'
PRE_ELEMENT = re.compile(r"(<pre[\s>].*?</pre>)", re.DOTALL)
NUMBER = re.compile(r"[0-9]{1,6}")
# The notebook metadata kept: the kernel (OverwriteKernelspec has put the release's back)
# and the language, whose lexer highlights the code; each a plain name.
NOTEBOOK_METADATA = {"kernelspec": ("name", "display_name", "language"),
                     "language_info": ("name", "version", "pygments_lexer")}
PLAIN_NAME = re.compile(r"[\w .+()-]{1,80}")
# Browsers drop ASCII whitespace and control characters inside a URL's scheme (`java\tscript:`).
IGNORED_IN_URL = re.compile(r"[\x00-\x20\x7f-\xa0\s]+")


def _url_is_safe(value: str, image: bool) -> bool:
    if not value.strip():  # an empty URL is the page itself
        return False
    if image and RASTER_DATA_URL.fullmatch(value.strip()):
        return True
    compact = IGNORED_IN_URL.sub("", value)
    scheme = re.match(r"([^/?#:]*):", compact)
    return scheme is None or scheme.group(1).lower() in SAFE_SCHEMES  # None: a relative URL or #anchor


def _style_is_safe(value: str) -> bool:
    declarations = [d for d in value.split(";") if d.strip()]
    for declaration in declarations:
        match = STYLE_DECLARATION.fullmatch(declaration)
        if match is None or match.group(1).lower() not in STYLE_PROPERTIES:
            return False
    return bool(declarations)


def _attribute_is_safe(tag: str, name: str, value: str) -> bool:
    if name not in ATTRIBUTES["*"] and name not in ATTRIBUTES.get(tag, ()):
        return False
    if name in URL_ATTRIBUTES:
        return _url_is_safe(value, image=tag == "img")
    if name == "style":
        return _style_is_safe(value)
    if name == "class":
        return not SCRIPTED_CLASSES & set(value.lower().split())
    if name in ("id", "name"):
        # MathJax looks its own elements up by ids that start so; a student's must not answer.
        return not value.lower().startswith("mathjax")
    if name in ("width", "height", "start", "colspan", "rowspan"):
        return NUMBER.fullmatch(value) is not None
    return True


_CLEANER = bleach.sanitizer.Cleaner(
    tags=ALLOWED_TAGS,
    attributes=_attribute_is_safe,
    # bleach checks URLs again itself; "data" passes its check so that _url_is_safe decides.
    protocols=SAFE_SCHEMES | {"data"},
    strip=True,
    strip_comments=True,
    css_sanitizer=CSSSanitizer(allowed_css_properties=STYLE_PROPERTIES),
)


def inert_html(fragment: str) -> str:
    """`fragment` with only the allowed elements, attributes, URLs and styles left."""
    return _CLEANER.clean(fragment)


class _AttachmentRenderer(IPythonRenderer):
    """nbconvert's markdown renderer, but an `attachment:` image is shown only as PNG or
    JPEG, and one that is missing is an image without a source (nbconvert raises on it,
    which stops the whole page)."""

    def image(self, text: str, url: str, title: str | None = None) -> str:
        if url.startswith("attachment:"):
            bundle = self.attachments.get(url.removeprefix("attachment:"))
            url = next((f"data:{kind};base64,{bundle[kind]}" for kind in RASTER_TYPES
                        if isinstance(bundle, dict) and isinstance(bundle.get(kind), str)), "")
        return super(IPythonRenderer, self).image(text, url, title)  # mistune's: no embedding of files


def inert_markdown(source: str, attachments: dict | None = None) -> str:
    """A markdown cell's source, rendered as nbconvert renders it, cleaned, as one HTML block."""
    if not source.strip():
        return ""
    renderer = _AttachmentRenderer(escape=False, attachments=attachments or {})
    html = _one_line(inert_html(MarkdownWithMath(renderer=renderer).render(source))).strip()
    if html.startswith(INERT_BLOCK):  # cleaned before: the same, so that cleaning twice changes nothing
        return html
    return f"{INERT_BLOCK}{html}</div>"


def _one_line(html: str) -> str:
    """The same HTML on one line: CommonMark ends an HTML block at a blank line, after which
    markdown syntax would be read again. Outside `<pre>` a line break is a space to HTML;
    inside, it is written as a character reference, which means the same."""
    parts = PRE_ELEMENT.split(html)  # the serializer escapes any "</pre>" in text: the split is exact
    return "".join(part.replace("\r\n", "&#10;").replace("\r", "&#10;").replace("\n", "&#10;") if i % 2
                   else re.sub(r"[\r\n]+", " ", part) for i, part in enumerate(parts))


class InertNotebook(Preprocessor):
    """Every cell made inert whoever wrote it, for any viewer that renders the notebook.

    Markdown cells become cleaned HTML (`inert_markdown`), raw cells cleaned HTML of type
    `text/html`; attachments go (PNG and JPEG ones are inlined by `inert_markdown`); cell
    metadata keeps only `nbgrader` (grading reads it; OverwriteCells has restored it from the
    gradebook for grade and locked cells, and an unknown grade_id has been dropped) and
    notebook metadata only the kernel's and the language's names, the rest being what
    templates print (title, tags, widget state, ...). Cell ids are kept. Outputs are
    `InertOutputs`' work.
    """

    enabled = True

    def preprocess(self, nb, resources):
        kept = {}
        for key, fields in NOTEBOOK_METADATA.items():
            value = nb.metadata.get(key)
            if isinstance(value, dict):
                kept[key] = {k: v for k, v in value.items()
                             if k in fields and isinstance(v, str) and PLAIN_NAME.fullmatch(v)}
        nb.metadata = nbformat.from_dict(kept)
        return super().preprocess(nb, resources)

    def preprocess_cell(self, cell, resources, index):
        attachments = cell.pop("attachments", None)
        metadata = {"nbgrader": cell.metadata["nbgrader"]} if "nbgrader" in cell.metadata else {}
        if cell.cell_type == "markdown":
            cell.source = inert_markdown(cell.source, attachments if isinstance(attachments, dict) else None)
        elif cell.cell_type == "raw":
            cell.source = inert_html(cell.source)
            metadata["raw_mimetype"] = "text/html"
        elif cell.cell_type == "code":
            count = cell.get("execution_count")
            if not isinstance(count, int) or isinstance(count, bool):
                cell.execution_count = None
        cell.metadata = nbformat.from_dict(metadata)
        return cell, resources


class InertFeedbackExporter(HTMLExporter):
    """The feedback page, with its body cleaned after rendering.

    Design: the page's `<head>` is the feedback template's own (nbgrader's `feedback`
    template prints there the notebook's name, which is the gradebook's, the CSS and the
    MathJax loader and configuration, all fixed); nothing a student wrote is printed before
    the template's `<body>` tag or after its closing one. Everything between them (cells,
    outputs, scores, the grader's messages) goes through `inert_html`. So the only scripts
    on the page are MathJax's two, the same for every student, and math written by students
    stays TeX text in the body for it to typeset; MathJax loads with its `Safe` extension,
    which refuses `\\href{javascript:...}` and the like in that TeX.
    """

    def from_notebook_node(self, nb, resources=None, **kw):
        page, resources = super().from_notebook_node(nb, resources, **kw)
        return inert_page(page), resources


def inert_page(page: str) -> str:
    """A rendered page with everything inside its body made inert. The first `<body>` is the
    template's (student content comes after it), and so is the last `</body>`."""
    head, body_tag, rest = page.partition("<body>")
    body, end_tag, tail = rest.rpartition("</body>")
    if not body_tag or not end_tag:
        raise ValueError("the feedback template wrote no <body>...</body>: the page cannot be made inert")
    return head + body_tag + inert_html(body) + end_tag + tail
