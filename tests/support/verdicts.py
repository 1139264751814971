"""Gradings shared by the test modules that compare paths (forks or none, a device or another):
each package is graded once per set of limits in a session, as gradings cost seconds each.

The packages: the solutions and the stubs at every check, and each written-wrong variant of
`test_mistakes` at its own check.
"""

from __future__ import annotations

import re
from pathlib import Path

from repo import SOLUTIONS, stubs, write_variant
from test_mistakes import MISTAKES

_ROOT: list[Path] = []  # the directory the variants are written to, made by the first caller
_PACKAGES: dict[str, tuple[Path, tuple[str, ...]]] = {}
_GRADED: dict[tuple, dict] = {}
NAMES = ["solutions", "stubs", *MISTAKES]


def package(name: str, tmp_path_factory) -> tuple[Path, tuple[str, ...]]:
    """The package called `name` and the checks it is graded at."""
    if name not in _PACKAGES:
        every: tuple[str, ...] = ()  # no ids: every check
        if name in ("solutions", "stubs"):
            _PACKAGES[name] = (SOLUTIONS if name == "solutions" else stubs(), every)
        else:
            if not _ROOT:
                _ROOT.append(tmp_path_factory.mktemp("variants"))
            directory = _ROOT[0] / str(NAMES.index(name))
            directory.mkdir()
            check_id, edits, _, _ = MISTAKES[name]
            _PACKAGES[name] = (write_variant(directory, edits), (check_id,))
    return _PACKAGES[name]


def verdict(check) -> dict:
    """What a learner is told about a check, without what varies from run to run or is printed
    (what the learner's code prints is captured only in a fork; a note may give a duration)."""
    kept = {key: value for key, value in check.to_dict().items() if key not in ("seconds", "printed")}
    return {**kept, "notes": [re.sub(r"in \d+(\.\d+)? s\b", "in (time) s", note) for note in kept["notes"]]}


def verdicts(grade, tmp_path_factory, name: str, **limits) -> dict:
    """check id -> verdict of the package `name` graded under `limits`, once per session."""
    key = (name, tuple(sorted(limits.items())))
    if key not in _GRADED:
        path, check_ids = package(name, tmp_path_factory)
        report = grade(path, *check_ids, **limits)
        _GRADED[key] = {check.id: verdict(check) for check in report.checks}
    return _GRADED[key]


def expected_statuses(name: str, graded: dict) -> bool:
    """Today's verdicts in outline: the solutions pass, the stubs are todo, a variant fails at its check."""
    if name in ("solutions", "stubs"):
        return {v["status"] for v in graded.values()} == {"pass" if name == "solutions" else "todo"}
    return graded[MISTAKES[name][0]]["status"] == "fail"
