"""Classroom 50's autograder outputs: `result.json`, `release-body.md` and the step's `status` and `summary`.

Classroom 50's runner runs the course's `autograder.py` with the learner's checkout as its working directory and
its submission in environment variables (RUNNER_VARIABLES); it reads back `./result.json` (schema:
grader/host/platforms/classroom50/result.schema.json), shows `./release-body.md` as the submission's release notes, and
posts `status` and `summary` from $GITHUB_OUTPUT as the commit's status. `result`, `release_body` and `outputs`
are pure functions of a Report and that environment; `emitter` is how `grade --classroom50 DIR` calls them.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from grader.host.render import Emit, Say, Unusable
from grader.host.render.actions import (
    append_to,
    learner_file,
    pages_url,
    resume_commands,
    stop_commands,
    under_actions,
)
from grader.host.render.markdown import ICONS, check_cell, heading, paragraphs, shorten, table
from grader.host.results import FAILING, RECORD_VERSION, CheckResult, NeedsAssignment, ReadBack, Report
from grader.shared.paths import write_replacing

SCHEMA = "classroom50/result/v1"
SCORES_SCHEMA = "classroom50/scores/v1"  # what `gh teacher scores` collects: each entry's result.json, newest first
# What the runner sets that the result must repeat: its own validator refuses a result whose identity differs.
RUNNER_VARIABLES = ("CLASSROOM", "ASSIGNMENT", "SUBMISSION_TAG", "COMMIT_URL", "RELEASE_URL")
RELEASE_BODY_BYTES = 100_000  # GitHub refuses release notes over 125,000 characters
FIX_FIRST = 5  # failing checks whose whole diagnosis opens the release notes; the table has them all


def missing_variables(environ: Mapping[str, str]) -> list[str]:
    """The runner's variables this environment lacks (OWNER or USERNAME, one of them, names the learner)."""
    missing = [name for name in RUNNER_VARIABLES if not environ.get(name)]
    return missing + ([] if environ.get("OWNER") or environ.get("USERNAME") else ["OWNER"])


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def test(check: CheckResult, report: Report, workspace: Path) -> dict:
    """One check as a Classroom 50 test: the four fields its runner requires, then the check's record (the one mapping
    of the record to this format: its file named from the repository's root, as the runner's links are)."""
    record = asdict(check.record(report.assignment))
    return {
        "test-name": record["id"],
        "passed": record["status"] == "pass",
        "score": record["points"],
        "max-score": record["max_points"],
        **record,
        "file": learner_file(report, check, workspace),
        "record_version": RECORD_VERSION,
    }


def result(report: Report, environ: Mapping[str, str], workspace: Path) -> dict:
    """result.json. `datetime` is the grading's time here: the runner stamps the commit's date over it, and
    `owner` and `assignment_type` with its own, as it checks them against the repository graded."""
    graded_at = now()
    return {
        "schema": SCHEMA,
        "classroom": environ["CLASSROOM"],
        "assignment": environ["ASSIGNMENT"],
        "assignment_type": environ.get("ASSIGNMENT_TYPE") or environ.get("MODE") or "individual",
        "owner": environ.get("OWNER") or environ["USERNAME"],
        "submission": environ["SUBMISSION_TAG"],
        "commit": environ["COMMIT_URL"],
        "release": environ["RELEASE_URL"],
        "review": environ.get("REVIEW_URL") or environ["COMMIT_URL"],
        "datetime": graded_at,
        "graded_at": graded_at,
        "score": report.score,
        "max-score": report.max_score,
        "tests": [test(check, report, workspace) for check in report.checks],
    }


def commit_pages(environ: Mapping[str, str]) -> str:
    """Where the graded commit's files are (`.../blob/SHA/`), from the runner's COMMIT_URL (`.../commit/SHA`)."""
    base, marker, sha = environ.get("COMMIT_URL", "").rpartition("/commit/")
    return f"{base}/blob/{sha}/" if marker and base and sha else pages_url(environ)


def fix_first(report: Report, pages: str, limit: int) -> list[str]:
    """The failing checks in course order, the first few with all the grader said of them; where none fails, the
    first check still to do, which is where to start."""
    failing = [check for check in report.checks if check.status in FAILING]
    todo = [check for check in report.checks if check.status == "todo"]
    shown, title = (failing, "Fix first") if failing else (todo[:1], "Start here")
    if not shown:
        return []
    share = max(200, limit // FIX_FIRST)
    lines = [f"### {title}", ""]
    for check in shown[:FIX_FIRST]:
        said = shorten("<br>".join(paragraphs(check)), share)
        points = f"{check.score}/{check.max_score} points"
        lines.append(f"- {check_cell(check, pages)} {ICONS[check.status]} {check.status}, {points}: {said}")
    more = len(shown) - FIX_FIRST
    return [*lines, *([f"- and {more} more failing in the table below"] if more > 0 else []), ""]


def release_body(report: Report, pages: str = "", limit: int = RELEASE_BODY_BYTES) -> str:
    """The release notes: the score, what to fix first (or where to start), then every check; under GitHub's
    limit."""
    return "\n".join([*heading(report), *fix_first(report, pages, limit // 4), *table(report, limit // 2, pages)])


def status_line(report: Report) -> str:
    """The one line the commit's status shows."""
    passed = sum(check.status == "pass" for check in report.checks)
    graded = f"assignment {report.assignment}: " if report.assignment else ""
    return f"{graded}{report.score}/{report.max_score} points, {passed} of {len(report.checks)} checks pass"


def outputs(report: Report) -> str:
    """The step's outputs: `status`, which the runner posts as the commit's status, and its one-line `summary`.
    A grading that ran says success or failure; `error` is the runner's, for an autograder that did not run."""
    return f"status={'success' if report.passed else 'failure'}\nsummary={status_line(report)}"


def publish(report: Report, environ: Mapping[str, str], directory: Path, body: str = "") -> list[str]:
    """Write result.json and release-body.md (`body`, else the report's) into `directory` and the outputs; returns
    what failed."""
    workspace = Path(environ.get("GITHUB_WORKSPACE") or Path.cwd()).resolve()
    written = (
        ("result.json", json.dumps(result(report, environ, workspace), indent=2, allow_nan=False) + "\n"),
        ("release-body.md", (body or release_body(report, commit_pages(environ))) + "\n"),
    )
    problems = []
    for name, text in written:
        try:
            write_replacing(directory / name, text)
        except OSError as error:
            problems.append(f"could not write {directory / name}: {error.strerror or error}")
    problem = append_to(environ, "GITHUB_OUTPUT", outputs(report)) if environ.get("GITHUB_OUTPUT") else None
    return problems + ([problem] if problem else [])


def nothing_to_grade(reason: str, checkout: Path, assignment: str = "") -> int:
    """autograder.py's result for a submission with no package to grade, which `grade` refuses: every check graded (the
    course's, or `assignment`'s with its points) an error that says `reason`, so the gradebook has 0 of the usual
    points, `status=failure`, and release notes that say why in one line. Returns 0 once all three are written, else 1
    (each problem said on stderr)."""
    from grader.host.assignments import chosen

    checks = [
        CheckResult(check.id, check.part, check.summary, "error", check.points, reason, file="__init__.py")
        for check in chosen([], assignment or None)
    ]
    report = Report("", str(checkout / "exercises"), checks, assignment=assignment or None)
    problems = publish(report, os.environ, checkout, "\n".join([*heading(report), reason]))
    for problem in problems:
        print(f"grade: {problem}", file=sys.stderr)
    return 1 if problems else 0


def emitter(chosen: dict, say: Say) -> Emit:
    """--classroom50 DIR, before the learner's code runs: the runner's variables are read now, and under Actions
    workflow commands stop until the outputs are written. Raises Unusable outside the runner."""
    directory: Path = chosen["classroom50"]
    missing = missing_variables(os.environ)
    if missing:
        raise Unusable(
            f"--classroom50 needs Classroom 50's runner environment: {', '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not set"
        )
    if not directory.is_dir():
        raise Unusable(f"--classroom50: {directory} is not a directory")
    environ = dict(os.environ)  # as it was before the learner's code ran
    stream = sys.stdout
    token = stop_commands(stream) if under_actions(environ) else None

    def emit(report: Report) -> None:
        if token:
            resume_commands(stream, token, [])
        for problem in publish(report, environ, directory):
            say(problem)

    return emit


def scores_entries(data: dict, assignment: str | None) -> list[tuple[str, object]]:
    """A scores.json's entries of the assignment asked for (or of its only one), each labelled."""
    assignments = data.get("assignments")
    if not isinstance(assignments, dict):
        raise ValueError("a Classroom 50 scores.json is malformed (assignments: not an object)")
    slug = chosen_assignment(list(assignments), assignment)
    entries = assignments[slug].get("entries") if isinstance(assignments[slug], dict) else None
    if not isinstance(entries, list):
        raise ValueError(f"a Classroom 50 scores.json is malformed ({slug}.entries: not a list)")
    return [(f"entry {number} of {slug}", entry) for number, entry in enumerate(entries, 1)]


def chosen_assignment(slugs: list[str], asked: str | None) -> str:
    held = ", ".join(slugs)
    if asked is not None and asked not in slugs:
        raise ValueError(f"no assignment {asked} (it holds: {held or 'none'})")
    if asked is None and len(slugs) != 1:
        if not slugs:
            raise ValueError("it holds no assignment")
        raise NeedsAssignment(f"several assignments, pick one with --assignment: {held}")
    return asked or slugs[0]


# The class view reads each test's record back, from a result.json or from the newest submission of each of a
# scores.json's entries (a learner with none is not graded).
READ_BACK = ReadBack(
    "a Classroom 50 result.json",
    claims=lambda data: data.get("schema") == SCHEMA,
    fields={"name": ("owner",), "score": ("score",), "max_score": ("max-score",), "records": ("tests",)},
)
SCORES_READ_BACK = ReadBack(
    "a Classroom 50 scores.json",
    claims=lambda data: data.get("schema") == SCORES_SCHEMA,
    fields={
        "name": ("owner",),
        **{field: ("submissions", 0, *where) for field, where in READ_BACK.fields.items() if field != "name"},
    },
    entries=scores_entries,
    no_records="no submission",
)
