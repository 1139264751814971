"""The LMS-ready CSV (class_report --lms): one row per learner, one column per assignment of assignments.toml, each
the learner's points on it as a number (tally.on_assignment: its checks only, scored with its points), ready for a
learning management system's gradebook import. A learner graded on none of an assignment's checks has an empty cell
there: no grade, which is not a grade of 0."""

from __future__ import annotations

import csv
from collections.abc import Iterable
from typing import TextIO

from grader.host.assignments import Assignment
from grader.host.tools.batch import spreadsheet_safe
from grader.host.tools.classview.reader import Learner
from grader.host.tools.classview.tally import on_assignment

FIRST_COLUMN = "learner"


def header(assignments: Iterable[Assignment]) -> list[str]:
    return [FIRST_COLUMN, *(assignment.name for assignment in assignments)]


def points(learner: Learner, assignment: Assignment) -> str:
    """The learner's points on the assignment as a number (7, 7.5); empty where it graded none of its checks."""
    scored = on_assignment(learner, assignment)
    return f"{scored.score:g}" if scored.graded else ""


def write_lms(learners: Iterable[Learner], assignments: list[Assignment], handle: TextIO) -> None:
    writer = csv.writer(handle)
    writer.writerow(header(assignments))
    for learner in sorted(learners, key=lambda ln: ln.name):
        writer.writerow([spreadsheet_safe(learner.name), *(points(learner, assignment) for assignment in assignments)])
