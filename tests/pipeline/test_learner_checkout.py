"""What holds in a learner's checkout at any stage of the exercises, with no `solutions/`.

This module ships in the learner release (see `grader.host.tools.release`): it must pass without
`solutions/`, whatever the learner has written so far.
"""

from __future__ import annotations

import ast

import pytest
from repo import EXERCISES, run_grade

from grader.checks import registry

pytestmark = pytest.mark.learner


def test_grade_lists_every_check_with_its_points():
    listed = run_grade("--list")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    rows = {line.split()[0]: line.split()[1] for line in lines if line.startswith("    ")}  # a check, under its file
    assert rows == {check.id: str(check.points) for check in registry()}
    assert "  embedding.py" in lines and any(line.startswith("model (") for line in lines)


def test_an_unknown_check_is_a_usage_error(reference):
    result = run_grade("--reference", "random", "attenton")
    assert result.returncode == 2 and "no check matches 'attenton'" in result.stderr


def test_a_missing_package_is_a_usage_error(reference, tmp_path):
    result = run_grade("--reference", "random", "--exercises", str(tmp_path / "nowhere"))
    assert result.returncode == 2 and "is not a Python package" in result.stderr


def test_the_exercises_define_everything_the_grader_calls():
    """Every check's class or function, and its method, is still defined where the grader looks."""
    for check in registry():
        target = check.target
        path = EXERCISES / f"{target.file}.py"
        assert path.is_file(), f"{path} is missing"
        definitions = {
            node.name: node
            for node in ast.parse(path.read_text()).body
            if isinstance(node, (ast.ClassDef, ast.FunctionDef))
        }
        assert target.name in definitions, f"{path.name} no longer defines {target.name}"
        if target.method:
            methods = {node.name for node in definitions[target.name].body if isinstance(node, ast.FunctionDef)}
            assert target.method in methods, f"{target.name} in {path.name} no longer defines {target.method}"
