"""The course repository as the tests use it: its paths, packages written wrong on purpose, and the `grade` command
as a learner runs it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from filelock import FileLock

from grader.host.main import wants_grading

REPO = Path(__file__).resolve().parents[2]
SOLUTIONS = REPO / "solutions"
# The learner's package: it holds whatever they have written so far, so a test reads it only for what holds at any
# stage of the course (test_learner_checkout, test_stubs' guard). The untouched stubs are `stubs()`.
EXERCISES = REPO / "exercises"
# Where the session's stubs are written (reference_session: Session.isolate sets it).
STUBS_AT = "GPT2_GRADER_TEST_STUBS"
# Set by the reference session for the test being run (reference_session.pytest_runtest_setup): whether it asked
# for the session's reference, which a test that runs a grading must (run_grade).
HAS_REFERENCE = "GPT2_GRADER_TEST_HAS_REFERENCE"


def stubs() -> Path:
    """exercises/ as `make stubs` generates it from solutions/, untouched: written into the session's root by the first
    process of the session to ask (the other xdist worker waits for it), as generating it imports nbgrader (seconds)."""
    where = Path(os.environ[STUBS_AT])
    if where.is_dir():  # renamed into place whole
        return where
    assert SOLUTIONS.is_dir(), "the stubs are generated from solutions/, which the learner's repository does not have"
    from grader.host.tools.stubs import write_exercises

    with FileLock(where.with_name(f"{where.name}.lock")):
        if not where.is_dir():
            staging = where.with_name(f"{where.name}.partial")
            shutil.rmtree(staging, ignore_errors=True)
            write_exercises(SOLUTIONS, staging)
            staging.rename(where)
    return where


def write_variant(directory: Path, edits: dict[str, list[tuple[str, str]]], base: Path = SOLUTIONS) -> Path:
    """A copy of `base` with each (old, new) replacement applied once to the named file.

    Every `old` must occur exactly once, so a variant can never silently equal the solution. The package it
    copies is written beside it (`variant_of`): the `grade` fixture checks the where invariant on variants.
    """
    package = directory / "pkg"
    shutil.copytree(base, package, ignore=shutil.ignore_patterns("__pycache__"))
    for file, replacements in edits.items():
        path = package / file
        text = path.read_text() if path.exists() else ""
        for old, new in replacements:
            assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times in {file}"
            text = text.replace(old, new)
        path.write_text(text)
    base_file(package).write_text(str(Path(base).resolve()))
    return package


def base_file(package: Path) -> Path:
    return package.parent / f"{package.name}.variant-of"


def variant_of(package: Path) -> Path | None:
    """The package `package` is a variant of (write_variant), or None."""
    written = base_file(package)
    return Path(written.read_text()) if written.exists() else None


def run_grade(*args: str, env: dict | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """The `grade` command as a learner runs it, from `cwd` (this repository's grader, wherever that is). One that
    grades reads the session's reference, which the test must ask for (the `reference` fixture): else it would build
    one of its own."""
    if wants_grading(list(args)) and os.environ.get(HAS_REFERENCE) == "0":
        test = os.environ.get("PYTEST_CURRENT_TEST", "this test").split(" ")[0]
        raise AssertionError(
            f"{test} runs grade, which waits for the session's reference: ask for the `reference` fixture"
        )
    return subprocess.run(
        [sys.executable, "-m", "grader", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **({} if cwd == REPO else importable()), **(env or {})},
        timeout=600,
    )


def importable() -> dict[str, str]:
    """PYTHONPATH with this repository first: `python -m grader` run elsewhere imports its grader."""
    return {"PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))}


def tiered(values, quick, ids=None) -> list:
    """Parameters for `parametrize`: those whose id is in `quick` run in `make test`, the others are marked slow and
    left to `make test-all`. `values` are the parameters as parametrize takes them (a dict's keys, say; a tuple is the
    values of several argument names); `ids`, when given, are their ids, else each value is its own id."""
    ids = list(values) if ids is None else list(ids)
    unknown = set(quick) - set(ids)
    assert not unknown, f"quick parameters that are not among the ids: {sorted(unknown)}"
    return [
        pytest.param(value, id=name, marks=() if name in quick else pytest.mark.slow)
        if not isinstance(value, tuple)
        else pytest.param(*value, id=name, marks=() if name in quick else pytest.mark.slow)
        for value, name in zip(values, ids, strict=True)
    ]


def by_id(report) -> dict:
    return {check.id: check for check in report.checks}
