"""The copy checks: a submission that copies one of the course's own classes, or imports a
course module the exercise asks the student to write, earns no points for it."""

from __future__ import annotations

from pathlib import Path

# difflib's ratio of two token streams at which one is a copy of the other: a pasted copy with its
# names changed scores 0.99, the reference solution's GPT 0.78 (they share the contract's names)
COPY_SIMILARITY = 0.92


def _class_tokens(source: str, name: str | None = None) -> list[list[str]]:
    """The token streams (no comments, docstrings or layout) of the classes defined in `source`
    (those named `name`, or all of them); none where it does not parse."""
    import ast
    import io
    import tokenize

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    streams = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef) or (name is not None and node.name != name):
            continue
        for inner in ast.walk(node):  # drop docstrings: words, not code
            body = getattr(inner, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and \
                    isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                inner.body = body[1:] or [ast.Pass()]
        text = ast.unparse(node)
        try:
            tokens = [t.string for t in tokenize.generate_tokens(io.StringIO(text).readline)
                      if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                                        tokenize.DEDENT, tokenize.ENDMARKER)]
        except (tokenize.TokenError, SyntaxError):
            continue
        streams.append(tokens[2:])  # without `class Name`: a renamed copy is still a copy
    return streams


def copies_course_class(source: str, dotted: str) -> bool:
    """Whether any class in the submission's code is (nearly token for token) the course's class
    `dotted` ("coursekit.gpt.GPT"): judged on the text the grader read, not on anything the
    submission's process reports about its classes."""
    import difflib
    import importlib.util

    module_name, class_name = dotted.rsplit(".", 1)
    spec = importlib.util.find_spec(module_name)
    if not source or spec is None or not spec.origin:
        return False
    course = _class_tokens(Path(spec.origin).read_text(), class_name)
    if not course:
        return False
    for candidate in _class_tokens(source):
        matcher = difflib.SequenceMatcher(None, candidate, course[0], autojunk=False)
        if matcher.real_quick_ratio() >= COPY_SIMILARITY and matcher.ratio() >= COPY_SIMILARITY:
            return True
    return False


def imports_course_module(source: str, dotted: str) -> bool:
    """Whether the submission's text imports the course module `dotted` ("coursekit.blocks"):
    `import coursekit.blocks`, `from coursekit.blocks import ...` or `from coursekit import blocks`."""
    import re

    package, _, module = dotted.rpartition(".")
    pattern = (rf"^\s*(import|from)\s+{re.escape(package)}\s*\.\s*{re.escape(module)}\b"
               rf"|^\s*from\s+{re.escape(package)}\s+import\s+[^\n]*\b{re.escape(module)}\b")
    return bool(source) and re.search(pattern, source, flags=re.M) is not None
