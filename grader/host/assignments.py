"""The course's assignments: `assignments.toml` at the repository's root, the one file an instructor edits to choose
what a submission is graded on and for how many points (docs/instructors.md#assignments).

Each `[[assignment]]` table has a `name` (letters, digits, `.`, `_`, `-`: what `grade --assignment` names), an
optional `title` and `due` (a TOML date or date-time), its `checks` as `grade CHECK...` names them (an id, an id
prefix: `attention` is `attention` and `attention.*`; a part; a glob: `sampling.*`; a file), and optional `points`:
a check's points by its exact id, where the check module's own `points` are not the assignment's. Anything else in
the file is refused in one line that names the file and the assignment.
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from grader.checks import Check, UnknownCheck, select
from grader.shared.paths import REPO_ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

FILE = REPO_ROOT / "assignments.toml"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # safe unquoted in a shell, a YAML value and a file name
KEYS = ("name", "title", "due", "checks", "points")


class AssignmentError(ValueError):
    """The file, or the assignment asked for, is not usable: one line that names the file and the assignment."""


@dataclass(frozen=True)
class Assignment:
    name: str
    title: str
    due: str  # ISO 8601 as written in the file; "" when none
    checks: tuple[Check, ...]  # in course order, each with this assignment's points

    @property
    def max_score(self) -> int:
        return sum(check.points for check in self.checks)


def load(path: Path | None = None) -> list[Assignment]:
    """Every assignment of the file (default: FILE), in its order. Raises AssignmentError."""
    path = path or FILE
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise AssignmentError(f"{path}: cannot be read: {error.strerror or error}") from None
    except tomllib.TOMLDecodeError as error:
        raise AssignmentError(f"{path}: not TOML: {error}") from None
    unknown = sorted(set(data) - {"assignment"})
    if unknown:
        raise AssignmentError(f"{path}: unknown key {unknown[0]!r} (the file holds [[assignment]] tables only)")
    tables = data.get("assignment")
    if not isinstance(tables, list) or not tables:
        raise AssignmentError(f"{path}: no [[assignment]] table")
    assignments: list[Assignment] = []
    for number, table in enumerate(tables, 1):
        assignment = parsed(table, path, number)
        if any(other.name == assignment.name for other in assignments):
            raise AssignmentError(f"{path}, assignment {assignment.name!r}: a second assignment of that name")
        assignments.append(assignment)
    return assignments


def parsed(table: object, path: Path, number: int) -> Assignment:
    """The file's `number`th [[assignment]] table, named by its number until its name is known."""
    name = table.get("name") if isinstance(table, dict) else None
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise AssignmentError(
            f"{path}, assignment {number}: `name` must be letters, digits, '.', '_' or '-' (got {name!r})"
        )
    where = f"{path}, assignment {name!r}"
    unknown = [key for key in table if key not in KEYS]
    if unknown:
        raise AssignmentError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(KEYS)})")
    title, due = table.get("title", ""), table.get("due", "")
    if not isinstance(title, str):
        raise AssignmentError(f"{where}: `title` must be a string")
    if due != "" and not isinstance(due, datetime.date):  # a date-time is a date too
        raise AssignmentError(f"{where}: `due` must be a TOML date or date-time, e.g. due = 2027-01-18")
    checks = checks_of(table.get("checks"), where)
    points = points_of(table.get("points", {}), [check.id for check in checks], where)
    checks = [replace(check, points=points[check.id]) if check.id in points else check for check in checks]
    return Assignment(name, title, due.isoformat() if due else "", tuple(checks))


def checks_of(patterns: object, where: str) -> list[Check]:
    if not isinstance(patterns, list) or not patterns or not all(isinstance(p, str) for p in patterns):
        raise AssignmentError(f'{where}: `checks` must be a list of check names, e.g. checks = ["model"]')
    try:
        return select(patterns)
    except UnknownCheck as error:
        raise AssignmentError(f"{where}: {error}") from None


def points_of(points: object, ids: list[str], where: str) -> dict[str, int]:
    if not isinstance(points, dict):
        raise AssignmentError(f"{where}: `points` must be a table of a check's points by its id")
    for check_id, value in points.items():
        if check_id not in ids:
            raise AssignmentError(f"{where}: points for {check_id!r}, which is not one of its checks (an exact id)")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise AssignmentError(f"{where}: the points of {check_id!r} must be a whole number, 0 or more")
    return points


def find(name: str, path: Path | None = None) -> Assignment:
    """The assignment of that name in the file (default: FILE). Raises AssignmentError."""
    assignments = load(path)
    found = next((assignment for assignment in assignments if assignment.name == name), None)
    if found is None:
        names = ", ".join(assignment.name for assignment in assignments)
        raise AssignmentError(f"{path or FILE}: no assignment {name!r} (it holds: {names})")
    return found


def chosen(patterns: list[str], name: str | None) -> list[Check]:
    """The checks `grade [CHECK...] [--assignment NAME]` grades: those CHECK names, or the assignment's with its points,
    or, given both, those CHECK names among the assignment's. Raises UnknownCheck or AssignmentError."""
    if not name:
        return select(patterns)
    try:
        return select(patterns, find(name).checks)
    except UnknownCheck as error:
        raise UnknownCheck(f"assignment {name!r}: {error}") from None


def add_option(parser: argparse.ArgumentParser, graded: str) -> None:
    """--assignment NAME, as grade and the instructor's tools take it; `graded`: what it chooses there."""
    parser.add_argument("--assignment", metavar="NAME", help=f"{graded} assignment NAME's checks (assignments.toml)")


def listing(assignments: list[Assignment]) -> list[str]:
    """`grade --assignments`: one line each, its name first, then its points, title and due date, then its checks."""
    width = max(len(assignment.name) for assignment in assignments)
    lines = []
    for assignment in assignments:
        said = [f"{assignment.max_score} pt", assignment.title, assignment.due and f"due {assignment.due}"]
        checks = ", ".join(f"{check.id} ({check.points})" for check in assignment.checks)
        lines.append(f"{assignment.name:{width}}  {'; '.join(s for s in said if s)}: {checks}")
    return lines
