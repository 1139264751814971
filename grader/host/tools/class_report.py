"""The class view: which checks most learners fail, and on which named mistakes, from what this grader wrote.

    python -m grader.host.tools.class_report RESULTS... [--csv FILE] [--html FILE] [--markdown FILE|-] [--lms FILE]
                                       [--pages URL] [--anonymise] [--assignment NAME]

Each of RESULTS is a file, or a directory whose *.json and *.csv files are read, and the result.json (else the
results.json) of its subfolders: Gradescope's export, a folder of Classroom 50 results, a folder that Classroom 50's
`gh teacher download` wrote (its scores.csv of totals is passed over, as is each clone's results.json history beside
its result.json). Each file is recognised by its content: batch's and the notebooks' per-learner result
(grades-results/NAME.json; the learner is its `submission`), a `grade --json` report (the file's stem), Gradescope's
results.json (its folder's name), Classroom 50's result.json and collected scores.json (each entry's newest submission;
--assignment picks one of several), and the CSV gradebook of batch and the notebooks (statuses only, no mistakes).
The class view's own CSVs (--csv, --lms) are never read back. A learner seen twice: a JSON result and a gradebook row
are merged (the statuses of both, the mistakes and errors of the JSON; a line on stderr where their statuses differ);
of two results of a kind, the newer file (its modification time; the later given among equals) is kept, and a line
says so. Every file is the learner's to forge: a file, or an entry or row of one, that is not what it should be is
skipped with a line on stderr, and the rest is read (grader.host.tools.classview.reader).

With --assignment NAME, one of the course's assignments (assignments.toml: `grade --assignments`), the view is of
that assignment: each learner's statuses on its checks only, scored with its points, whatever they were graded on
(one graded on none of them could not be graded on it), and every output's headline names it.

A learner with no status at all (batch's result with no report, a gradebook row with only its error, a Classroom
entry without a submission) could not be graded: counted apart, listed with the reason, and left out of every
count, the median and the score distribution. A check that errored or timed out is listed with its learner and its
reason (the exception and its file:line, "mlp.py does not finish importing (line N when stopped)"), one line for the
checks that stopped for one reason. A check that composes parts (the whole model, say) is graded with the grader's own
of a part that fails its own check (grader.host.dependencies.to_stand_in), so its status is its own: each failure is
counted once, at its cause, not again at every check that composes it. Checks follow the course's order; a check this
registry does not know (an older report's) comes after, in the order first seen. --anonymise replaces every learner's
name, in every output and message and in every text of a result, with `learner-` and six hex digits of its SHA-256
(stable from run to run, but not secret from anyone with the class list), and names each input file in a message by
its place among the files read ("input 3"), not its path.

Outputs, any of them:
- --csv: a row per check (`kind` check: how many learners pass, fail, todo, error, timeout, of `graded`), then a
  row per named mistake (`kind` mistake: the check, the mistake in the grader's words, how many `learners` it caught
  and their `names`), the most frequent first; then a row per learner's checks that stopped for one reason (`kind`
  error or timeout: the `check`s, the learner in `names`, the `reason`), per learner who could not be graded (`kind`
  ungraded) and per grade in doubt (`kind` flag);
- --html: one self-contained page (grader.host.tools.classview.page), the course pages linked under --pages;
- --markdown (`-`: stdout): the learners, the median score, the five lowest pass rates, every named mistake with its
  learners, every error and time-out with its reason, who could not be graded and whose grade is in doubt;
- --lms: one row per learner, one column per assignment of assignments.toml, the points on it as a number
  (grader.host.tools.classview.lms).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grader.host.assignments import AssignmentError, load
from grader.host.results import NeedsAssignment
from grader.host.tools.classview import lms, page, tables
from grader.host.tools.classview.gather import read_results
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
    p.add_argument(
        "--lms",
        type=Path,
        metavar="FILE",
        help="an LMS-ready CSV: a row per learner, a column per assignment of assignments.toml, its points",
    )
    p.add_argument(
        "--anonymise", action="store_true", help="a stable pseudonym in place of each learner's name, no input's path"
    )
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
    if not (args.csv or args.html or args.markdown or args.lms):
        return "nothing to write: give --csv, --html, --markdown or --lms"
    for path in (args.csv, args.html, args.lms, None if args.markdown in (None, STDOUT) else Path(args.markdown)):
        if path is not None and not path.parent.is_dir():
            return f"cannot write {path}: {path.parent} is not a directory"
    return None


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    problem = outputs_problem(args)
    if problem:
        say(problem)
        return 2
    try:
        assignments = load()
        learners = read_results(
            args.results,
            args.assignment,
            say,
            pseudonym if args.anonymise else str,
            [",".join(tables.CSV_HEADER), ",".join(lms.header(assignments))],  # its own outputs
            hide_paths=args.anonymise,
        )
    except (NeedsAssignment, AssignmentError) as error:
        say(str(error))
        return 2
    if not learners:
        given = f"the {len(args.results)} paths given" if args.anonymise else ", ".join(map(str, args.results))
        say(f"no results could be read from {given}")
        return 2
    learners = anonymised(learners) if args.anonymise else learners
    view = tally(learners, next((one for one in assignments if one.name == args.assignment), None))
    try:
        write_outputs(view, args)
        if args.lms:  # every assignment of the course, whichever --assignment the view is of
            with open(args.lms, "w", newline="", encoding="utf-8") as handle:
                lms.write_lms(learners, assignments, handle)
    except OSError as error:
        say(f"cannot write: {error}")
        return 1
    say(tables.headline(view))
    return 0


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
