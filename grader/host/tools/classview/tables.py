"""The class view as a CSV (every check's counts, every named mistake's with its learners, then every check that
errored or timed out with its reason, every learner who could not be graded, every grade in doubt) and as a short
Markdown summary of the same (for a GitHub step summary or an email): it hides nothing, only the pass rates are cut to
the lowest. Every text of a result is made spreadsheet-safe in the CSV, literal in Markdown."""

from __future__ import annotations

import csv
from typing import TextIO

from grader.host.render.markdown import literal
from grader.host.results import STATUSES
from grader.host.tools.batch import spreadsheet_safe
from grader.host.tools.classview.tally import ClassView

# `kind` says what a row is. A check's row fills the status counts and `graded` (of how many learners); a mistake's
# fills `mistake`, `learners` (how many it caught) and `names` (theirs, "; " between); an `error` or `timeout` row is
# one learner's checks (`check`, " " between) that stopped for one `reason`; an `ungraded` row a learner who could not
# be graded and why; a `flag` row a learner whose recorded grade is in doubt and why.
CSV_HEADER = ["kind", "check", *STATUSES, "graded", "mistake", "learners", "names", "reason"]
NAMES = "; "
SUMMARY_ROWS = 5  # of the lowest pass rates, the Markdown summary lists


def number(value: float) -> str:
    """A score as people write it: 7, 7.5."""
    return f"{value:g}"


def csv_rows(view: ClassView) -> list[list[object]]:
    blank = [""] * (len(STATUSES) + 1)
    rows = [
        ["check", check, *(view.statuses[check][status] for status in STATUSES), view.graded_on(check), "", "", "", ""]
        for check in view.checks
    ]
    rows += [["mistake", m.check, *blank, m.words, m.learners, NAMES.join(m.names), ""] for m in view.mistakes]
    rows += [[stop.status, " ".join(stop.checks), *blank, "", 1, stop.learner, stop.reason] for stop in view.stopped]
    rows += [["ungraded", "", *blank, "", 1, learner.name, learner.ungraded] for learner in view.ungraded]
    rows += [["flag", "", *blank, "", 1, learner.name, learner.flag] for learner in view.flagged]
    return rows


def write_csv(view: ClassView, handle: TextIO) -> None:
    writer = csv.writer(handle)
    writer.writerow(CSV_HEADER)
    for row in csv_rows(view):
        writer.writerow([spreadsheet_safe(cell) for cell in row])


def table(head: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table; every cell already literal."""
    return [f"| {' | '.join(head)} |", f"|{' --- |' * len(head)}", *(f"| {' | '.join(row)} |" for row in rows)]


def headline(view: ClassView) -> str:
    """How many learners, how many could not be graded, the median score: the first line of every summary."""
    said = f"assignment {view.assignment}: " if view.assignment else ""
    said += f"{len(view.learners)} learners graded"
    stopped = len({stop.learner for stop in view.stopped})
    said += f" ({stopped} with checks that errored or timed out)" if stopped else ""
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
    return "\n".join(lines + mistakes(view) + troubles(view))


def names(learners: tuple[str, ...] | list[str]) -> str:
    return literal(NAMES.join(learners))


def mistakes(view: ClassView) -> list[str]:
    """Every named mistake, the most learners first, with their names."""
    if not view.mistakes:
        return []
    rows = [[literal(m.check), literal(m.words), str(m.learners), names(m.names)] for m in view.mistakes]
    head = ["check", "mistake", "learners", "who"]
    return ["### The named mistakes, the most learners first", "", *table(head, rows), ""]


def troubles(view: ClassView) -> list[str]:
    """Every check that errored or timed out with its reason, who could not be graded, whose grade is in doubt."""
    lines = []
    if view.stopped:
        rows = [[literal(s.learner), s.status, literal(" ".join(s.checks)), literal(s.reason)] for s in view.stopped]
        lines += ["### Errors and time-outs", "", *table(["learner", "status", "checks", "reason"], rows), ""]
    if view.ungraded:
        rows = [[literal(learner.name), literal(learner.ungraded)] for learner in view.ungraded]
        lines += ["### Could not be graded", "", *table(["learner", "why"], rows), ""]
    if view.flagged:
        rows = [[literal(learner.name), literal(learner.flag)] for learner in view.flagged]
        lines += ["### Grades in doubt", "", *table(["learner", "why"], rows), ""]
    return lines
