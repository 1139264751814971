"""The class view as a CSV (every check's counts, then every named mistake's) and as a short Markdown summary (for
a GitHub step summary or an email). Every text of a result is made spreadsheet-safe in the CSV, literal in Markdown."""

from __future__ import annotations

import csv
from typing import TextIO

from grader.host.render.markdown import literal
from grader.host.results import STATUSES
from grader.host.tools.batch import spreadsheet_safe
from grader.host.tools.classview.tally import ClassView

# A check's row fills the status counts and `graded` (of how many learners); a mistake's fills `mistake` and
# `learners` (how many it caught). `kind` says which a row is.
CSV_HEADER = ["kind", "check", *STATUSES, "graded", "mistake", "learners"]
SUMMARY_ROWS = 5  # checks, and mistakes, the Markdown summary lists


def number(value: float) -> str:
    """A score as people write it: 7, 7.5."""
    return f"{value:g}"


def write_csv(view: ClassView, handle: TextIO) -> None:
    writer = csv.writer(handle)
    writer.writerow(CSV_HEADER)
    for check in view.checks:
        counts = [view.statuses[check][status] for status in STATUSES]
        writer.writerow([spreadsheet_safe(cell) for cell in ["check", check, *counts, view.graded_on(check), "", ""]])
    blank = [""] * (len(STATUSES) + 1)
    for mistake in view.mistakes:
        row = ["mistake", mistake.check, *blank, mistake.words, mistake.learners]
        writer.writerow([spreadsheet_safe(cell) for cell in row])


def table(head: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table; every cell already literal."""
    return [f"| {' | '.join(head)} |", f"|{' --- |' * len(head)}", *(f"| {' | '.join(row)} |" for row in rows)]


def headline(view: ClassView) -> str:
    """How many learners, how many could not be graded, the median score: the first line of every summary."""
    said = f"assignment {view.assignment}: " if view.assignment else ""
    said += f"{len(view.learners)} learners graded"
    said += f", {len(view.ungraded)} could not be graded" if view.ungraded else ""
    if view.median_score is not None:
        said += f"; median score {number(view.median_score)} of {number(view.max_score)}"
    return said


def markdown(view: ClassView) -> str:
    lines = ["## Class report", "", headline(view) + ".", ""]
    lowest = view.lowest_pass_rates(SUMMARY_ROWS)
    if lowest:
        rows = [
            [
                literal(check),
                f"{view.statuses[check]['pass']} of {view.graded_on(check)}",
                f"{view.pass_rate(check):.0%}",
            ]
            for check in lowest
        ]
        lines += ["### The lowest pass rates", "", *table(["check", "pass", "rate"], rows), ""]
    top = view.mistakes[:SUMMARY_ROWS]
    if top:
        rows = [[literal(m.check), literal(m.words), str(m.learners)] for m in top]
        lines += ["### The named mistakes most learners make", "", *table(["check", "mistake", "learners"], rows), ""]
    return "\n".join(lines)
