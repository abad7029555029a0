#!/usr/bin/env python3
"""The course's one entry point.

    python3 course.py demo     # the instructor's loop on the bundled sample class
    python3 course.py test     # the whole test suite (what CI runs)
    python3 course.py lab      # open the course in JupyterLab
    python3 course.py build    # regenerate quiz cells, grade cells and the student release
    python3 course.py check UNIT PATH [--json]   # grade one notebook or .py file
    python3 course.py bench generation|attention|tokenizer|...  # benchmarks that print figures
    python3 course.py train [--minutes M] [--device D]   # unit 08's tokenizer and recipe on the standard library
    python3 course.py autograde UNIT [--workers N] [--students A,B] [--scheduler ADDRESS] [--feedback]
                               # grade every new or changed submission of a unit, N at a time
    python3 course.py feedback-server [UNIT...] [--host H] [--port P] [--db URL] [--limit N]
                               # the feedback service for a class; --add-students A,B makes their tokens
    python3 course.py feedback-report UNIT [--db URL]   # the mistakes the class makes most, per part

Every task first makes sure `.venv/` exists and holds what `requirements.txt` pins (it
reinstalls only when that file changes), then runs inside it. Needs nothing but Python 3.11.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
VENV_PYTHON = VENV / "bin" / "python"
REQUIREMENTS = ROOT / "requirements.txt"
STAMP = VENV / ".requirements.sha256"

TASKS = {
    "demo": ["-m", "autograder", "demo"],
    # Two workers; the real-nbgrader tests share one sample-class run, so they stay together.
    "test": ["-m", "pytest", "-n", "2", "--dist", "loadgroup"],
    "build": ["-m", "autograder", "build"],
    "check": ["-m", "autograder", "check"],
    "bench": ["-m", "autograder", "bench"],
    "train": ["-m", "autograder", "train"],
    "autograde": ["-m", "autograder", "autograde"],
    "feedback-server": ["-m", "autograder", "feedback-server"],
    "feedback-report": ["-m", "autograder", "feedback-report"],
    "lab": ["-m", "jupyter", "lab"],  # in the course folder (its cwd): the file browser opens there
}


def requirements_digest() -> str:
    # pyproject.toml counts too: it decides what `-e .` installs.
    data = REQUIREMENTS.read_bytes() + (ROOT / "pyproject.toml").read_bytes()
    return hashlib.sha256(data).hexdigest()


def ensure_venv() -> None:
    if not VENV_PYTHON.exists():
        print(f"Creating {VENV.relative_to(ROOT)}/ ...", flush=True)
        venv.create(VENV, with_pip=True)
    digest = requirements_digest()
    if STAMP.exists() and STAMP.read_text().strip() == digest:
        return
    print("Installing requirements.txt into .venv/ (once; about a minute) ...", flush=True)
    log = VENV / "pip-install.log"
    with log.open("w") as out:
        result = subprocess.run(
            [str(VENV_PYTHON), "-m", "pip", "install", "-r", str(REQUIREMENTS)],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
        )
    if result.returncode != 0:
        print(log.read_text()[-4000:], file=sys.stderr)
        raise subprocess.CalledProcessError(result.returncode, "pip install")
    STAMP.write_text(digest + "\n")


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in TASKS:
        print(__doc__)
        return 2
    task, extra = argv[0], argv[1:]
    try:
        ensure_venv()
    except subprocess.CalledProcessError as err:
        print(f"Setting up .venv/ failed ({err}); pip's log is .venv/pip-install.log.", file=sys.stderr)
        return 1
    env = dict(
        os.environ,
        PATH=os.pathsep.join([str(VENV / "bin"), os.environ.get("PATH", "")]),
        PYTHONPATH=str(ROOT),
        MPLBACKEND=os.environ.get("MPLBACKEND", "Agg"),
    )
    if task == "lab":
        env.pop("MPLBACKEND")  # inline figures in the browser
        # The check line's grader, started while the lab opens, so the first check does not wait
        # for it to import pytest and PyTorch (coursekit.feedback starts it itself otherwise).
        subprocess.Popen([str(VENV_PYTHON), "-c", "from coursekit.feedback import start_warm_grader; "
                          "start_warm_grader()"], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if task == "autograde" and "--course" in extra[:-1]:  # a course folder named from where you stand
        at = extra.index("--course") + 1
        extra[at] = str(Path(extra[at]).resolve())
    command = [str(VENV_PYTHON), *TASKS[task], *extra]
    return subprocess.run(command, cwd=ROOT, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
