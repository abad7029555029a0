"""The check line: the hidden graders' verdict on your saved notebook, now, in the notebook.

Each exercise has, after every graded part, a line such as

    from coursekit.feedback import ask_graders; ask_graders("01_attention", "softmax")

It grades the notebook *as saved on disk* with the course's real hidden graders (the same
run that fills the grade cells when your instructor runs `nbgrader autograde`, with your code
in the same sandbox), and prints that part's report: points, and which common mistake your
answer looks like. `ask_graders("01_attention")` reports every part.

Where the graders run:
- a feedback service, when one is configured (your instructor gives you its address and your
  token: `connect(URL, TOKEN)` once, or the environment variables COURSE_FEEDBACK_URL and
  COURSE_FEEDBACK_TOKEN); it limits how often each part may be checked;
- otherwise the graders of the course folder this package was installed from, when they are
  there (a clone of the whole course, for someone working alone);
- otherwise nowhere: the line says so and the visible checks are all there is.

`validate_part` is what the grade cells run under `nbgrader validate` (JupyterLab's Validate
button): it fails the cell when the part's visible checks fail or the graders' verdict is
short of full marks, so an unfinished or wrong notebook never validates as passing.

Every grading runs in a child process that writes its answer to a cache file named by the
notebook's content: checking every part of an unchanged notebook grades it once, and an
interrupted line or a validation that stopped waiting leaves the answer for the next call.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import io
import json
import os
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.parse
import urllib.request
import warnings
from pathlib import Path

ALL = "all"
ENV_URL, ENV_TOKEN = "COURSE_FEEDBACK_URL", "COURSE_FEEDBACK_TOKEN"
VALIDATE_WAIT_ENV = "COURSE_VALIDATE_WAIT"  # seconds a grade cell waits under validate (nbgrader/course.py sets it)
VALIDATE_WAIT = 25.0  # below nbgrader's default 30 s per cell, for a validate configured elsewhere
REQUEST_SECONDS = 1800.0
COURSE_ROOT = Path(__file__).resolve().parent.parent  # the course folder, for a clone of the whole course


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "transformer-course" / "feedback.json"


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "transformer-course" / "feedback"


# ---------------------------------------------------------------- where the graders are


def service() -> tuple[str, str] | None:
    """(url, token) of the configured feedback service, or None."""
    url, token = os.environ.get(ENV_URL, "").strip(), os.environ.get(ENV_TOKEN, "").strip()
    if not (url and token):
        try:
            saved = json.loads(config_path().read_text())
            url, token = str(saved.get("url", "")).strip(), str(saved.get("token", "")).strip()
        except (OSError, ValueError, AttributeError):
            return None
    return (url.rstrip("/"), token) if url and token else None


def local_graders(unit: str) -> bool:
    return (COURSE_ROOT / "autograder" / "feedback" / "reports.py").is_file() and \
        (COURSE_ROOT / "autograder" / "tests" / f"test_{unit}.py").is_file()


def connect(url: str, token: str) -> None:
    """Remember the course's feedback service (address and your token) for every notebook."""
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # the token is yours alone
    with os.fdopen(fd, "w") as out:
        json.dump({"url": url, "token": token}, out)
    print(f"Saved: the check lines will ask {url} (written to {path}).")


# ---------------------------------------------------------------- the notebook on disk


def _grade_ids(nb: dict) -> list[str]:
    ids = []
    for cell in nb.get("cells", []):
        meta = cell.get("metadata", {}).get("nbgrader", {}) if isinstance(cell, dict) else {}
        if isinstance(meta, dict) and isinstance(meta.get("grade_id"), str):
            ids.append(meta["grade_id"])
    return ids


def _read(path: Path) -> dict | None:
    try:
        nb = json.loads(path.read_bytes())
        return nb if isinstance(nb, dict) else None
    except (OSError, ValueError):
        return None


def find_notebook(part: str | None) -> Path | None:
    """The saved notebook this kernel belongs to.

    Jupyter Server tells the kernel its notebook's path when it starts it (JPY_SESSION_NAME,
    in JupyterLab and Notebook 7); when that is missing or moved, the notebook in the working
    folder that has this part's grade cell (the newest, if several do)."""
    session = os.environ.get("JPY_SESSION_NAME", "")
    if session.endswith(".ipynb") and Path(session).is_file():
        return Path(session)
    wanted = f"grade_{part}" if part and part != ALL else None
    found = []
    for path in Path.cwd().glob("*.ipynb"):
        nb = _read(path)
        if nb is not None and (wanted is None or wanted in _grade_ids(nb)):
            found.append((path, nb))
    if len(found) > 1:  # several copies side by side: the one whose cells this kernel has run, in order
        history = [entry.strip() for entry in _history()]

        def cells_run(nb: dict) -> int:  # a magic shows in the history as transformed: count, not equal
            return sum(a == b for a, b in zip(_code_sources(nb), history, strict=False))

        return max(found, key=lambda item: (cells_run(item[1]), item[0].stat().st_mtime))[0]
    return found[0][0] if found else None


def _code_sources(nb: dict) -> list[str]:
    return [_cell_source(c).strip() for c in nb.get("cells", [])
            if isinstance(c, dict) and c.get("cell_type") == "code"]


def _defined_names(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.ClassDef)}


def _cell_source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def unsaved_names(nb: dict, history: list[str]) -> list[str]:
    """The functions and classes whose last run in this kernel differs from the saved file.

    `history` is the kernel's input history, oldest first (IPython's `In`). A name defined in
    a saved answer cell counts when the last input that defined it is not that cell's text:
    the student changed the cell and ran it without saving (or saved and did not run it, when
    the visible checks they saw were of the old code)."""
    saved = {}
    for cell in nb.get("cells", []):
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            text = _cell_source(cell)
            for name in _defined_names(text):
                saved[name] = text.strip()
    last = {}
    for entry in history:
        for name in _defined_names(entry):
            last[name] = entry.strip()
    return sorted(name for name, text in last.items() if name in saved and saved[name] != text)


def _history() -> list[str]:
    try:
        from IPython import get_ipython

        shell = get_ipython()
        return [str(x) for x in shell.user_ns.get("In", [])[1:]] if shell is not None else []
    except ImportError:
        return []


# ---------------------------------------------------------------- one grading, in a child


def _key(unit: str, part: str, data: bytes) -> str:
    # Where the answer comes from is part of the key: a student who is given a service later
    # has their next check graded (and recorded) there, not answered from a local grading.
    where = service()
    route = hashlib.sha256(f"{where[0]}\0{where[1]}".encode()).hexdigest()[:8] if where else "local"
    return f"{unit}-{part}-{route}-{hashlib.sha256(data).hexdigest()[:24]}"


def _cached(unit: str, part: str, data: bytes) -> dict | None:
    """A finished answer for these bytes: the part's own, or the whole notebook's."""
    for asked in dict.fromkeys([ALL, part]):
        path = cache_dir() / f"{_key(unit, asked, data)}.json"
        try:
            answer = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not answer.get("ok") and answer.get("kind") != "student":
            path.unlink(missing_ok=True)  # the grader's or the network's trouble: ask again next time
        return answer
    return None


def _running(pending: Path) -> bool:
    try:
        os.kill(int(pending.read_text()), 0)
        return True
    except (OSError, ValueError):
        return False


def grade(unit: str, part: str, data: bytes, wait: float = REQUEST_SECONDS, progress=None) -> dict | None:
    """The answer for notebook bytes `data` (see `_answer`), or None if none came within `wait`.
    `progress(seconds)`, if given, is called about once a second while the answer is awaited."""
    answer = _cached(unit, part, data)
    if answer is not None:
        return answer
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    key = _key(unit, part, data)
    out, pending, snapshot = folder / f"{key}.json", folder / f"{key}.pending", folder / f"{key}.ipynb"
    if not _running(pending):
        snapshot.write_bytes(data)  # what is graded is this copy, whatever happens to the file later
        child = subprocess.Popen(
            [sys.executable, "-m", "coursekit.feedback", unit, part, str(snapshot), str(out)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,  # it finishes (and leaves its answer) even if this kernel stops waiting
        )
        pending.write_text(str(child.pid))
    began = time.monotonic()
    shown = 0
    while time.monotonic() < began + wait:
        answer = _cached(unit, part, data)
        if answer is not None:
            return answer
        if not _running(pending) and not out.exists():
            return {"ok": False, "kind": "grader", "error": "the grading process stopped without an answer"}
        if progress is not None and int(time.monotonic() - began) > shown:
            shown = int(time.monotonic() - began)
            progress(shown)
        time.sleep(0.2)
    return None


# How long this machine's last checks of each unit and part took (the check line's estimate).
DURATIONS_KEPT = 5


def _durations_path() -> Path:
    return cache_dir() / "durations.json"


def past_duration(unit: str, part: str) -> float | None:
    """The median of the last checks of this part (or, failing that, of any part of the unit)
    that were graded, not answered from the cache; None before the first."""
    try:
        known = json.loads(_durations_path().read_text())
    except (OSError, ValueError):
        return None
    seconds = known.get(f"{unit}/{part}") or [s for key, kept in known.items()
                                            if key.startswith(f"{unit}/") for s in kept]
    seconds = sorted(s for s in seconds if isinstance(s, (int, float)))
    return seconds[len(seconds) // 2] if seconds else None


def _remember_duration(unit: str, part: str, seconds: float) -> None:
    path = _durations_path()
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    if not isinstance(known, dict):
        known = {}
    kept = [s for s in known.get(f"{unit}/{part}", []) if isinstance(s, (int, float))]
    known[f"{unit}/{part}"] = [*kept, round(seconds, 1)][-DURATIONS_KEPT:]
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(known))


class _Line:
    """One line of output that can be rewritten in place: a display in a Jupyter kernel (the
    page shows its latest text); elsewhere the first and the last text are printed."""

    def __init__(self, text: str):
        self.handle = None
        try:
            from IPython import get_ipython
            from IPython.display import display

            if getattr(get_ipython(), "kernel", None) is not None:
                self.handle = display({"text/plain": text}, raw=True, display_id=True)
        except ImportError:
            pass
        if self.handle is None:
            print(text, flush=True)
        self.text = text

    def update(self, text: str) -> None:
        self.text = text
        if self.handle is not None:
            self.handle.update({"text/plain": text}, raw=True)

    def close(self, text: str) -> None:
        if self.handle is not None:
            self.update(text)
        else:
            print(text, flush=True)


def _answer(unit: str, part: str, snapshot: Path) -> dict:
    """In the child: {"ok": True, "report": ..., "by": ...} or {"ok": False, "kind", "error"}."""
    where = service()
    if where is not None:
        return _ask_service(*where, unit, part, snapshot.read_bytes())
    if not local_graders(unit):
        return {"ok": False, "kind": "absent",
                "error": "The hidden graders are not part of this copy of the course and no feedback service is "
                         "set up, so only the visible checks can tell you anything before your work is graded."}
    result = _ask_warm_grader(unit, part, snapshot)
    if result is None:  # no warm grader could be started here: a grading process of its own
        proc = subprocess.run([sys.executable, "-m", "autograder", "feedback", unit, str(snapshot), "--part", part],
                              cwd=COURSE_ROOT, env=_grader_env(), capture_output=True, text=True,
                              timeout=REQUEST_SECONDS)
        try:
            result = json.loads(proc.stdout)
        except ValueError:
            return {"ok": False, "kind": "grader", "error": f"the graders gave no report (exit {proc.returncode})"}
    if "error" in result:
        return {"ok": False, "kind": result.get("kind", "grader"), "error": result["error"]}
    return {"ok": True, "report": result, "by": "the course's hidden graders, on this machine"}


def _grader_env() -> dict:
    return dict(os.environ, PYTHONPATH=str(COURSE_ROOT), MPLBACKEND="Agg")


# ---------------------------------------------------------------- the warm grader
# With the graders on this machine, a check is answered by a long-lived grading process
# (`python -m autograder warm-grader`) that has pytest and PyTorch imported and a sandboxed worker
# started ahead for the next check, instead of by processes that start from nothing each time.

WARM_START_SECONDS = 120.0  # for a warm grader just started to listen (it imports pytest and PyTorch)


def warm_grader_socket() -> Path:
    """Where this course folder's warm grader listens: named after the graders' sources, so a
    changed course tree (an instructor's edit, a pull) is graded by a grader that has read it."""
    stamp = hashlib.sha256(f"{sys.executable}\0{COURSE_ROOT}\0{cache_dir()}".encode())
    for folder in ("autograder", "coursekit"):
        for path in sorted((COURSE_ROOT / folder).rglob("*.py")):
            with contextlib.suppress(OSError):
                info = path.stat()
                stamp.update(f"{path}\0{info.st_mtime_ns}\0{info.st_size}\0".encode())
    name = f"grader-{stamp.hexdigest()[:16]}.sock"
    path = cache_dir() / name
    if len(str(path)) > 100:  # past what a Unix socket's address holds: a short folder of this user's
        path = Path("/tmp") / f"transformer-course-{os.getuid()}" / name
    return path


def start_warm_grader(unit: str | None = None) -> subprocess.Popen | None:
    """Start this course folder's warm grader, in the background (a no-op, apart from a process
    that sees the lock and leaves, when one runs). None where the graders are not here."""
    if not (COURSE_ROOT / "autograder" / "feedback" / "warm_grader.py").is_file():
        return None
    path = warm_grader_socket()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    return subprocess.Popen([sys.executable, "-m", "autograder", "warm-grader", str(path),
                             *(["--unit", unit] if unit else [])],
                            cwd=COURSE_ROOT, env=_grader_env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def _warm_request(path: Path, request: dict, timeout: float) -> dict | None:
    """One request to the warm grader at `path`: its answer, or None if none is listening."""
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(5.0)
        try:
            connection.connect(str(path))
        except OSError:
            return None
        connection.settimeout(timeout)
        try:
            connection.sendall(json.dumps(request).encode() + b"\n")
            chunks = []
            while chunk := connection.recv(1 << 16):
                chunks.append(chunk)
        except OSError:
            return {"error": "the warm grader stopped before it answered", "kind": "grader"}
    try:
        answer = json.loads(b"".join(chunks))
    except ValueError:
        return {"error": "the warm grader stopped before it answered", "kind": "grader"}
    return answer if isinstance(answer, dict) else None


def _ask_warm_grader(unit: str, part: str, snapshot: Path) -> dict | None:
    """The warm grader's answer for the notebook at `snapshot`, starting it if it is not running;
    None if it cannot be started (the caller grades in a process of its own)."""
    path = warm_grader_socket()
    request = {"unit": unit, "part": part, "path": str(snapshot.resolve())}
    answer = _warm_request(path, request, REQUEST_SECONDS)
    if answer is not None:
        return answer
    started = start_warm_grader(unit)
    if started is None:
        return None
    deadline = time.monotonic() + WARM_START_SECONDS
    while time.monotonic() < deadline:
        time.sleep(0.1)
        answer = _warm_request(path, request, REQUEST_SECONDS)
        if answer is not None:
            return answer
        if started.poll() is not None and not _warm_grader_starting(path):
            # It left, and no other grader holds the socket's lock: it could not start here.
            return _warm_request(path, request, REQUEST_SECONDS)
    return None


def _warm_grader_starting(path: Path) -> bool:
    """Whether a warm grader holds the lock of the socket at `path` (it may still be importing)."""
    import fcntl

    try:
        with open(path.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    return False


def _ask_service(url: str, token: str, unit: str, part: str, data: bytes) -> dict:
    try:
        notebook = json.loads(data)
    except ValueError:
        return {"ok": False, "kind": "student", "error": "the saved notebook is not valid JSON"}
    for cell in notebook.get("cells", []) if isinstance(notebook, dict) else []:
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            cell["outputs"], cell["execution_count"] = [], None  # figures are not graded: send the code only
    # The unit and part go in the address, so that the service can refuse a check (the limit, a
    # full line) from the request's headers, before it reads the notebook; the body is the notebook.
    body = json.dumps(notebook).encode()
    query = urllib.parse.urlencode({"unit": unit, "part": part})
    request = urllib.request.Request(f"{url}/api/check?{query}", data=body, method="POST", headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/x-ipynb+json"})
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_SECONDS) as response:
            return {"ok": True, "report": json.loads(response.read()), "by": f"the course's feedback service ({url})"}
    except urllib.error.HTTPError as err:
        try:
            said = json.loads(err.read()).get("error")
        except (ValueError, AttributeError):
            said = None
        # 400/404/411/413: the notebook or request (the student's to fix); anything else (429: over the
        # limit or too many waiting, 503: busy): ask again later.
        kind = "student" if err.code in (400, 404, 411, 413) else "service"
        return {"ok": False, "kind": kind, "error": said or f"the feedback service answered {err.code} {err.reason}"}
    except (urllib.error.URLError, OSError, ValueError) as err:
        reason = getattr(err, "reason", err)
        return {"ok": False, "kind": "service", "error": f"the feedback service at {url} cannot be reached ({reason})"}


# ---------------------------------------------------------------- the check line


def _render(answer: dict, saved_at: str) -> str:
    if not answer.get("ok"):
        error = str(answer["error"])
        return error[:1].upper() + error[1:] + ("" if error.endswith(".") else ".")
    report = answer["report"]
    lines = [p["text"] for p in report["parts"]]
    if len(report["parts"]) > 1:
        lines.append(f"Total: {report['score']:g} / {report['max_score']:g} points")
    lines.append(f"(Graded by {answer['by']}, from the notebook as saved at {saved_at}.)")
    return "\n\n".join(lines)


def ask_graders(unit: str, part: str | None = None) -> None:
    """Grade the saved notebook with the hidden graders and print `part`'s report (every part's
    when `part` is None)."""
    part = part or ALL
    if os.environ.get("NBGRADER_EXECUTION"):  # nbgrader is running the notebook: it grades it itself
        print("(The check line does nothing while nbgrader runs the notebook.)")
        return
    path = find_notebook(part)
    if path is None:
        print("Cannot find this notebook's file: save it (Ctrl-S) and run this line again.")
        return
    data = path.read_bytes()
    nb = _read(path) or {}
    stale = unsaved_names(nb, _history())
    if stale:
        names = ", ".join(f"`{n}`" for n in stale)
        print(f"Careful: the saved file differs from what you last ran for {names}. The graders read the "
              "saved file: save (Ctrl-S) and run your cells again, then this line, if that is not what you want.\n")
    if service() is None and not local_graders(unit):
        print(_answer(unit, part, path)["error"])
        return
    what = "every part" if part == ALL else f"`{part}`"
    if _cached(unit, part, data) is not None:
        line, began = None, None  # graded before, unchanged since: the answer is at hand
    else:
        before = past_duration(unit, part)
        estimate = f" (about {before:.0f} s, as the last checks here took)" if before else ""
        line, began = _Line(f"Grading {path.name} as saved ({what}){estimate} ..."), time.monotonic()

    def progress(seconds: int) -> None:
        line.update(f"Grading {path.name} as saved ({what}){estimate}: {seconds} s so far ...")

    saved_at = time.strftime("%H:%M:%S", time.localtime(path.stat().st_mtime))
    answer = grade(unit, part, data, progress=progress if line else None)
    if answer is None:
        answer = {"ok": False, "kind": "grader", "error": f"the graders gave no answer within {REQUEST_SECONDS:g} s"}
    if line is not None:
        took = time.monotonic() - began
        if answer is not None and answer.get("ok"):
            _remember_duration(unit, part, took)
        line.close(f"Graded {path.name} as saved ({what}) in {took:.0f} s.")
    print(_render(answer, saved_at))


# ---------------------------------------------------------------- nbgrader validate


class NotPassing(Exception):
    """Fails a grade cell under `nbgrader validate`; IPython shows only the message."""

    def _render_traceback_(self):
        # Lines nbgrader's validator prints whole (it cuts lines past 90 characters).
        lines = []
        for line in str(self).splitlines():
            indent = " " * (len(line) - len(line.lstrip()) + 2)
            lines += textwrap.wrap(line, 80, subsequent_indent=indent) or [""]
        return lines


def _visible_check_failure(nb: dict, part: str) -> str | None:
    """Run the part's visible checks (cell `check_<part>`) again in the kernel; what failed."""
    cells = [c for c in nb.get("cells", []) if isinstance(c, dict)
             and c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == f"check_{part}"]
    if not cells:
        return None
    from IPython import get_ipython

    shell = get_ipython()
    namespace = shell.user_ns if shell is not None else {}
    try:  # its prints and warnings were shown when the cell itself ran
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(compile(_cell_source(cells[0]), f"check_{part}", "exec"), namespace)  # noqa: S102
    except NotImplementedError:
        return "not written yet (it raises NotImplementedError)"
    except Exception as err:  # noqa: BLE001 - any failure of the student's code is the answer
        return f"{type(err).__name__}: {err}".strip().rstrip(":")
    return None


def validate_part(unit: str, part: str) -> None:
    """A grade cell's code. Under `nbgrader validate`, fail unless the part passes its visible
    checks and (where graders or a service are reachable) gets full marks from the hidden ones."""
    if os.environ.get("NBGRADER_EXECUTION") != "validate":
        return  # in your own session, and while autograding: nothing (the grade comes from outside)
    path = find_notebook(part)
    nb = _read(path) if path else None
    if nb is None:
        raise NotPassing(f"`{part}`: cannot find the notebook's file to validate")
    failure = _visible_check_failure(nb, part)
    if failure:
        raise NotPassing(f"`{part}` does not pass its visible checks: {failure}")
    if service() is None and not local_graders(unit):
        print(f"`{part}`: visible checks pass. (No hidden graders or feedback service here: that is all "
              "validation can say.)")
        return
    wait = float(os.environ.get(VALIDATE_WAIT_ENV) or VALIDATE_WAIT)
    answer = grade(unit, ALL, path.read_bytes(), wait=wait)
    if answer is None:
        raise NotPassing(f"`{part}`: the hidden graders have not answered within {wait:g} s; they go on "
                         "grading: validate again in a minute")
    if not answer.get("ok"):
        if answer.get("kind") == "student":
            raise NotPassing(f"`{part}`: {answer['error']}")
        print(f"`{part}`: visible checks pass; the hidden graders could not be asked ({answer['error']}).")
        return
    mine = [p for p in answer["report"]["parts"] if p["name"] == part]
    if mine and mine[0]["points"] < mine[0]["max_points"]:
        raise NotPassing(mine[0]["text"])
    print(f"`{part}`: visible checks pass, and the hidden graders give full marks.")


def main(argv: list[str]) -> int:
    """The child: `python -m coursekit.feedback UNIT PART SNAPSHOT OUT`."""
    unit, part, snapshot, out = argv
    out = Path(out)
    try:
        answer = _answer(unit, part, Path(snapshot))
    except Exception as err:  # noqa: BLE001 - whatever happens, the waiting kernel gets an answer
        answer = {"ok": False, "kind": "grader", "error": f"the check failed ({type(err).__name__}: {err})"}
    temporary = out.with_suffix(".tmp")
    temporary.write_text(json.dumps(answer))
    os.replace(temporary, out)  # appears whole, or not at all
    for leftover in (out.with_suffix(".pending"), Path(snapshot)):
        leftover.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
