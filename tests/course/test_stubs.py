"""exercises/ is generated from solutions/ by nbgrader and holds no solution line."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from repo import EXERCISES, REPO, SOLUTIONS, stubs

from grader.host.tools.stubs import STUB, out_of_sync, strip_solutions

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


def committed(commit: str, folder: str, into: Path) -> Path:
    """The Python files of `folder` as `commit` holds them, written to `into`/`folder`."""
    for name in git("ls-tree", "--name-only", commit, f"{folder}/").split():
        if name.endswith(".py"):
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            (into / name).write_text(git("show", f"{commit}:{name}"))
    return into / folder


def test_exercises_are_in_sync_with_solutions(tmp_path):
    """The maintainers' guard that `make stubs` ran. exercises/ is the learner's to fill in, here too, so it is read
    as committed with the last change to solutions/ or the generator: a learner's edits, committed or not, come
    later. While solutions/ or the generator has changes not yet committed, the working tree's exercises/ is read."""
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout: which exercises/ was generated cannot be told from the learner's work")
    if git("status", "--porcelain", "--", *SOURCES):
        solutions, exercises = SOLUTIONS, EXERCISES
    else:
        commit = git("log", "-1", "--format=%H", "--", *SOURCES).strip()
        solutions, exercises = committed(commit, "solutions", tmp_path), committed(commit, "exercises", tmp_path)
    stale = out_of_sync(solutions, exercises)
    assert stale == [], f"out of sync with solutions/: {stale} (run `make stubs` and commit exercises/ with them)"


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
