"""exercises/ is generated from solutions/ by nbgrader and holds no solution line."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from repo import EXERCISES, REPO, SOLUTIONS, stubs

from grader.host.tools.stubs import STUB, expected_exercises, out_of_sync, strip_solutions

# What exercises/ is generated from: a change to either needs `make stubs`.
SOURCES = ("solutions", "grader/host/tools/stubs.py")


def solution_lines(source: str) -> list[str]:
    lines, inside = [], False
    for line in source.splitlines():
        if "### BEGIN SOLUTION" in line:
            inside = True
        elif "### END SOLUTION" in line:
            inside = False
        elif inside and line.strip():
            lines.append(line.strip())
    return lines


def git(*args: str) -> str:
    ran = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    return ran.stdout


def committed_exercises(commit: str) -> dict[str, str]:
    """File name -> text, for the Python files of exercises/ as `commit` holds them."""
    names = git("ls-tree", "--name-only", commit, "exercises/").split()
    return {Path(name).name: git("show", f"{commit}:{name}") for name in names if name.endswith(".py")}


def test_exercises_are_in_sync_with_solutions():
    """The maintainers' guard that `make stubs` ran: exercises/ is what solutions/ generates, in the working tree or
    at a commit since solutions/ or the generator last changed. exercises/ is the learner's to fill in, here too:
    their edits, committed or not, come after such a commit and do not hide it."""
    wanted = expected_exercises(SOLUTIONS)
    if {path.name: path.read_text() for path in EXERCISES.glob("*.py")} == wanted:
        return
    if not (REPO / ".git").exists():
        pytest.skip("exercises/ differs from the stubs and this is no git checkout: the learner's work, or stale?")
    since = git("log", "-1", "--format=%H", "--", *SOURCES).strip()
    commits = [since, *git("rev-list", "--reverse", f"{since}..HEAD", "--", "exercises").split()]
    assert any(committed_exercises(commit) == wanted for commit in commits), (
        f"exercises/ out of sync with solutions/ since {since[:12]}: {out_of_sync(SOLUTIONS, EXERCISES)} "
        "(run `make stubs` and commit exercises/)"
    )


def test_out_of_sync_is_detected(tmp_path):
    (tmp_path / "embedding.py").write_text((stubs() / "embedding.py").read_text() + "\n# an edit\n")
    stale = out_of_sync(SOLUTIONS, tmp_path)
    assert "embedding.py" in stale and "attention.py" in stale


def test_no_solution_line_survives():
    for path in SOLUTIONS.glob("*.py"):
        exercise = {line.strip() for line in (stubs() / path.name).read_text().splitlines()}
        leaked = [line for line in solution_lines(path.read_text()) if line in exercise]
        assert leaked == [], f"{path.name} still holds solution lines"


def test_each_solution_region_becomes_a_todo_stub():
    source = 'def f(x):\n    """Doc."""\n    ### BEGIN SOLUTION\n    return x + 1\n    ### END SOLUTION\n'
    stub = "\n".join("    " + line for line in STUB.splitlines())
    assert strip_solutions(source) == f'def f(x):\n    """Doc."""\n{stub}\n'
    assert strip_solutions("x = 1\n") == "x = 1\n"
