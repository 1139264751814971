"""The learner's path on every Python the project supports: a fresh virtual environment, torch and the project
installed as `python -m grader.host.tools.setup` does, then `grade --solutions` (every check passes) and `grade` on the
stubs (every check todo), without a traceback. Each Python this machine lacks is skipped, with the reason; a Python
older than the oldest gets setup's one-line refusal and pip's."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from filelock import FileLock
from repo import REPO, stubs

from grader.host.tools.setup import OLDEST_PYTHON, venv_python

SUPPORTED = ("3.10", "3.11", "3.12", "3.13")  # ci.yml's matrix names the same
pytestmark = pytest.mark.slow


def interpreter(version: str) -> str | None:
    """pyenv's Python `version`, else a `python3.X` on PATH; one that starts (a pyenv shim of a version not chosen
    does not)."""
    pyenv = sorted((Path.home() / ".pyenv" / "versions").glob(f"{version}.*/bin/python"), reverse=True)
    for candidate in [*map(str, pyenv), shutil.which(f"python{version}")]:
        if candidate and subprocess.run([candidate, "-c", ""], capture_output=True).returncode == 0:
            return candidate
    return None


def run(*command, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(part) for part in command], capture_output=True, text=True, timeout=900, **kwargs)


def statuses(report: Path) -> set[str]:
    return {check["status"] for check in json.loads(report.read_text())["checks"]}


def test_the_workflow_and_pyproject_name_these_pythons():
    workflow = (REPO / ".github/workflows/ci.yml").read_text()
    assert re.search(r"python: \[" + ", ".join(f'"{v}"' for v in SUPPORTED) + r"\]", workflow)
    requires = re.search(r'requires-python = ">=(\d+)\.(\d+)"', (REPO / "pyproject.toml").read_text())
    assert (int(requires[1]), int(requires[2])) == OLDEST_PYTHON == tuple(map(int, SUPPORTED[0].split(".")))


@pytest.mark.parametrize("version", SUPPORTED)
def test_the_learners_path_on_each_python(version, tmp_path, reference):
    python = interpreter(version)
    if python is None:
        pytest.skip(f"no Python {version} on this machine (PATH or pyenv)")
    venv = tmp_path / "venv"
    with FileLock(tmp_path.parent / "editable-install.lock"):  # one editable build of the repository at a time
        setup = run(python, "-m", "grader.host.tools.setup", "--venv", venv, cwd=REPO)
    if setup.returncode == 1 and " does not answer (" in setup.stderr:  # no local wheel, and no PyTorch index here
        pytest.skip(f"no torch for Python {version} on this machine: {setup.stderr.strip()}")
    assert setup.returncode == 0, setup.stderr[-3000:]
    grade = venv_python(venv).parent / "grade"
    solutions = run(grade, "--solutions", "--reference", "random", "--json", tmp_path / "solutions.json", cwd=REPO)
    assert solutions.returncode == 0 and statuses(tmp_path / "solutions.json") == {"pass"}, solutions.stdout[-3000:]
    # `grade` with no package grades ./exercises: here the session's stubs, as the repository's hold the learner's work
    todo = run(grade, "--reference", "random", "--json", tmp_path / "stubs.json", cwd=stubs().parent)
    assert todo.returncode == 1 and statuses(tmp_path / "stubs.json") == {"todo"}, todo.stdout[-3000:]
    assert "Traceback" not in solutions.stderr + todo.stderr


def test_a_python_too_old_is_refused_in_one_line(tmp_path):
    version = f"{OLDEST_PYTHON[0]}.{OLDEST_PYTHON[1] - 1}"
    python = interpreter(version)
    if python is None:
        pytest.skip(f"no Python {version} on this machine (PATH or pyenv)")
    setup = run(python, "-m", "grader.host.tools.setup", "--venv", tmp_path / "venv", cwd=REPO)
    assert setup.returncode == 2 and "Traceback" not in setup.stderr
    assert setup.stderr.strip() == f"setup: the grader needs Python 3.10 or later, and this is Python {version}"
    pip = run(python, "-m", "pip", "install", "--dry-run", "--no-deps", REPO, cwd=tmp_path)
    assert pip.returncode != 0 and "requires a different Python" in pip.stderr, pip.stderr[-2000:]
