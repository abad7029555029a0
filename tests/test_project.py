"""Project hygiene: dependencies declared once in spirit (pip and conda agree), CI runs the
README's command, and the code is ruff clean."""

from __future__ import annotations

import re
import subprocess
import sys

import yaml

from autograder.paths import ROOT


def pinned(lines):
    pins = {}
    for line in lines:
        line = line.split("#")[0].strip()
        if not line or line.startswith("-"):
            continue
        name, _, version = line.partition("==")
        pins[re.sub(r"[-_.]+", "-", name.strip().lower())] = version.strip()
    return pins


def test_conda_environment_and_requirements_name_the_same_dependencies():
    requirements = pinned((ROOT / "requirements.txt").read_text().splitlines())
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    conda_names = [d for d in env["dependencies"] if isinstance(d, str)]
    assert any(d.startswith("python=3.11") for d in conda_names)
    assert pinned(pip_section) == requirements
    assert "torch" in requirements and requirements["torch"]


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    command = "python3 course.py test"
    assert command in readme and command in ci


def test_ruff_is_clean():
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
