"""exercises/ is generated from solutions/ by nbgrader and holds no solution line."""

from __future__ import annotations

from repo import EXERCISES, SOLUTIONS

from grader.host.tools.stubs import STUB, out_of_sync, strip_solutions


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


def test_exercises_are_in_sync_with_solutions():
    assert out_of_sync(SOLUTIONS, EXERCISES) == []


def test_out_of_sync_is_detected(tmp_path):
    (tmp_path / "embedding.py").write_text((EXERCISES / "embedding.py").read_text() + "\n# an edit\n")
    stale = out_of_sync(SOLUTIONS, tmp_path)
    assert "embedding.py" in stale and "attention.py" in stale


def test_no_solution_line_survives():
    for path in SOLUTIONS.glob("*.py"):
        exercise = {line.strip() for line in (EXERCISES / path.name).read_text().splitlines()}
        leaked = [line for line in solution_lines(path.read_text()) if line in exercise]
        assert leaked == [], f"{path.name} still holds solution lines"


def test_each_solution_region_becomes_a_todo_stub():
    source = 'def f(x):\n    """Doc."""\n    ### BEGIN SOLUTION\n    return x + 1\n    ### END SOLUTION\n'
    stub = "\n".join("    " + line for line in STUB.splitlines())
    assert strip_solutions(source) == f'def f(x):\n    """Doc."""\n{stub}\n'
    assert strip_solutions("x = 1\n") == "x = 1\n"
