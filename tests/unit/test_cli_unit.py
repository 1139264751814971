"""`grade`'s command line before any grading: `grade --help` parses with the standard library and the grader's
leaves alone, and imports the runner, pydantic and numpy only once the arguments ask for a grading."""

from __future__ import annotations

import subprocess
import sys

import pytest
from repo import REPO

pytestmark = pytest.mark.unit

# What a grading needs and the help does not: the runner and what it imports (numpy, pydantic), the checks, rich.
NOT_FOR_THE_HELP = ("numpy", "pydantic", "rich", "torch", "grader.host.runner", "grader.checks", "grader.shared.wire")


def imported_by(*argv: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    """`python -X importtime -m grader ARGV` and every module it imported (importtime lists each on stderr)."""
    ran = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "grader", *argv],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    lines = [line.partition("|")[2] for line in ran.stderr.splitlines() if line.startswith("import time:")]
    return ran, {line.rpartition("|")[2].strip() for line in lines}


def test_grade_help_imports_no_part_of_a_grading():
    ran, modules = imported_by("--help")
    assert ran.returncode == 0 and ran.stdout.startswith("usage: grade"), ran.stdout + ran.stderr
    assert "grader.host.cli" in modules  # the parser was built
    heavy = {module for module in modules for name in NOT_FOR_THE_HELP if f"{module}.".startswith(f"{name}.")}
    assert not heavy, sorted(heavy)


def test_grade_list_imports_the_checks_after_parsing():
    """The control: a command past the parser imports what it needs (--list: the checks)."""
    ran, modules = imported_by("--list")
    assert ran.returncode == 0 and "embed" in ran.stdout.split()
    assert "grader.checks" in modules and "grader.host.runner" not in modules
