"""The class view: which checks most learners fail, and on which named mistakes, from what this grader wrote.

    python -m grader.host.tools.class_report RESULTS... [--csv FILE] [--html FILE] [--markdown FILE|-]
                                       [--pages URL] [--anonymise] [--assignment NAME]

Each of RESULTS is a file, or a directory whose *.json and *.csv files are read, and the results.json and
result.json of its subfolders (Gradescope's export, a folder of Classroom 50 results). Each file is recognised by
its content: batch's and the notebooks' per-learner result (grades-results/NAME.json; the learner is its
`submission`), a `grade --json` report (the file's stem), Gradescope's results.json (its folder's name), Classroom
50's result.json and collected scores.json (each entry's newest submission; --assignment picks one of several), and
the CSV gradebook of batch and the notebooks (statuses only, no mistakes). A learner seen twice: the later file
wins, in the order given (a directory's files by name). Every file is the learner's to forge: a file, or an entry
or row of one, that is not what it should be is skipped with a line on stderr, and the rest is read
(grader.host.tools.classview.inputs).

With --assignment NAME, one of the course's assignments (assignments.toml: `grade --assignments`), the view is of
that assignment: each learner's statuses on its checks only, scored with its points, whatever they were graded on
(one graded on none of them could not be graded on it), and every output's headline names it.

A learner with no status at all (batch's result with no report, a gradebook row with only its error, a Classroom
entry without a submission) could not be graded: counted apart, listed with the reason, and left out of every
count, the median and the score distribution. A check's `timeout` is counted in a column of its own, beside
`error`. A check that composes parts (the whole model, say) is graded with the grader's own of a part that fails
its own check (grader.host.dependencies.to_stand_in), so its status is its own: each failure is counted once, at its
cause, not again at every check that composes it. Checks follow the course's order; a check this registry does not
know (an older report's) comes after, in the order first seen. --anonymise replaces every learner's name, in every
output and message, with `learner-` and six hex digits of its SHA-256: stable from run to run, but not secret from
anyone with the class list; a message about a file still names the file, whose path may hold a name.

Outputs, any of them:
- --csv: a row per check (`kind` check: how many learners pass, fail, todo, error, timeout, of `graded`), then a
  row per named mistake (`kind` mistake: the check, the mistake in the grader's words, the `learners` it caught),
  the most frequent first;
- --html: one self-contained page (grader.host.tools.classview.page), the course pages linked under --pages;
- --markdown (`-`: stdout): the learners, the median score, the five lowest pass rates, the top named mistakes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grader.host.assignments import Assignment, AssignmentError, load
from grader.host.tools.classview import page, tables
from grader.host.tools.classview.inputs import NeedsAssignment, read_results
from grader.host.tools.classview.tally import ClassView, anonymised, pseudonym, tally
from grader.shared.commands import tool_parser
from grader.shared.wire import clean_text

STDOUT = "-"


def parser() -> argparse.ArgumentParser:
    p = tool_parser("grader.host.tools.class_report", __doc__)
    p.add_argument(
        "results",
        nargs="+",
        type=Path,
        metavar="RESULTS",
        help="result files, or directories of them (e.g. batch's grades-results/)",
    )
    p.add_argument("--csv", type=Path, metavar="FILE", help="each check's counts, then each named mistake's")
    p.add_argument("--html", type=Path, metavar="FILE", help="the page: pass rates, heatmap, scores, mistakes, stops")
    p.add_argument("--markdown", metavar="FILE", help="a short summary (- for stdout), e.g. for a GitHub step summary")
    p.add_argument(
        "--pages", metavar="URL", help="where the course pages are read, e.g. https://github.com/o/r/blob/main/"
    )
    p.add_argument("--anonymise", action="store_true", help="a stable pseudonym in place of each learner's name")
    p.add_argument(
        "--assignment",
        metavar="NAME",
        help="the assignment of a Classroom 50 scores.json holding several; where NAME is one of the course's "
        "(assignments.toml), the view counts its checks only, scored with its points",
    )
    return p


def say(message: str) -> None:
    """One line on stderr; a file's name may hold anything."""
    print(clean_text(f"class-report: {message}").replace("\n", " "), file=sys.stderr)


def outputs_problem(args: argparse.Namespace) -> str | None:
    if not (args.csv or args.html or args.markdown):
        return "nothing to write: give --csv, --html or --markdown"
    for path in (args.csv, args.html, None if args.markdown in (None, STDOUT) else Path(args.markdown)):
        if path is not None and not path.parent.is_dir():
            return f"cannot write {path}: {path.parent} is not a directory"
    return None


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    problem = outputs_problem(args)
    if problem:
        say(problem)
        return 2
    shown = pseudonym if args.anonymise else str
    try:
        learners = read_results(args.results, args.assignment, say, shown)
    except NeedsAssignment as error:
        say(str(error))
        return 2
    if not learners:
        say(f"no results could be read from {', '.join(str(path) for path in args.results)}")
        return 2
    try:
        assignment = course_assignment(args.assignment)
    except AssignmentError as error:
        say(str(error))
        return 2
    view = tally(anonymised(learners) if args.anonymise else learners, assignment)
    try:
        write_outputs(view, args)
    except OSError as error:
        say(f"cannot write: {error}")
        return 1
    say(tables.headline(view))
    return 0


def course_assignment(name: str | None) -> Assignment | None:
    """The course's assignment of that name; None where there is none (a name of Classroom 50's only)."""
    return next((assignment for assignment in load() if assignment.name == name), None) if name else None


def write_outputs(view: ClassView, args: argparse.Namespace) -> None:
    if args.csv:
        with open(args.csv, "w", newline="", encoding="utf-8") as handle:
            tables.write_csv(view, handle)
    if args.html:
        args.html.write_text(page.render(view, args.pages), encoding="utf-8")
    if args.markdown == STDOUT:
        sys.stdout.write(tables.markdown(view))
    elif args.markdown:
        Path(args.markdown).write_text(tables.markdown(view), encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
