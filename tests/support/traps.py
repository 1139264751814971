"""Where a trap a solution's docstring or a course page states is placed, for the trap audits
(tests/course/test_trap_audit.py, tests/course/test_course_trap_audit.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Named:
    """One of the check's named mistakes, or of its cases' hints, holds `fragment`."""

    check: str
    fragment: str


@dataclass(frozen=True)
class Said:
    """The check's message says it, in words written in `source` (a module of the grader)."""

    source: str
    fragment: str


@dataclass(frozen=True)
class Right:
    """Not a mistake of values: code that ignores it is right, and passes."""

    why: str


def hints_of(reference, check_id: str) -> list[str]:
    return [hint for case in reference.cases(check_id) for hint in [*case.mistakes, case.hint] if hint]
