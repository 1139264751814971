"""GitHub Actions: the step summary, annotations at the learner's lines, and GitHub Classroom's result.

`summary`, `annotations` and `classroom_result` are pure functions of a Report (and of the
workspace that file paths are given relative to). `stop_commands` and `publish` are the only code
that touches the step: its log, and the files GitHub names in $GITHUB_STEP_SUMMARY and $GITHUB_OUTPUT;
`emitter` is how `grade --github` calls them (grader.host.render's interface).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

from grader.host.render import Emit, Say
from grader.host.render.markdown import literal, paragraphs
from grader.host.render.text import fallback_banner
from grader.host.results import CheckResult, Report

FAILING = ("fail", "error", "timeout")
SUMMARY_BYTES = 1_000_000  # GitHub refuses a step summary over 1 MiB
ICONS = {"pass": "✅", "fail": "❌", "todo": "📝", "error": "💥", "timeout": "⏱️"}
# autograding-grading-reporter knows pass, fail and error; a missing body scores like a wrong one.
CLASSROOM_STATUS = {"pass": "pass", "fail": "fail", "todo": "fail", "error": "error", "timeout": "error"}


def escape_data(text: str) -> str:
    """A command's message kept on one line, as the runner unescapes it."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(name: str, message: str, **properties: object) -> str:
    """`::name key=value,...::message`, every part escaped as GitHub's runner expects."""
    given = ",".join(f"{key}={escape_property(str(value))}" for key, value in properties.items() if value is not None)
    return f"::{name}{' ' + given if given else ''}::{escape_data(message)}"


def learner_file(report: Report, check: CheckResult, workspace: Path) -> str:
    """The check's file as GitHub names it: relative to the repository when it lies inside it."""
    path = Path(report.package, check.file or "")
    return path.relative_to(workspace).as_posix() if path.is_relative_to(workspace) else str(path)


def annotations(report: Report, workspace: Path) -> list[str]:
    """An error at the learner's line for each failing check, then the score as a notice."""
    errors = [
        command(
            "error",
            "\n".join(check.diagnosis()),  # escaped onto one line; GitHub shows the lines again
            file=learner_file(report, check, workspace),
            line=check.line,
            title=f"{check.id}: {check.status}, {check.score}/{check.max_score} points",
        )
        for check in report.checks
        if check.status in FAILING
    ]
    passed = sum(check.status == "pass" for check in report.checks)
    score = f"{report.score}/{report.max_score} points, {passed} of {len(report.checks)} checks pass"
    return [*errors, command("notice", score, title="GPT-2 grader")]


def pages_url(environ: Mapping[str, str]) -> str:
    """Where the repository's files are on GitHub at the commit graded (`.../blob/SHA/`), so that a course page
    links to its text there; "" outside Actions, and a link is then the page's path in the repository."""
    server, repository, sha = (environ.get(name) for name in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_SHA"))
    return f"{server}/{repository}/blob/{sha}/" if server and repository and sha else ""


def check_cell(check: CheckResult, pages: str) -> str:
    """A check's id; a failing check's links to its course page."""
    page = check.page_to_read
    return f"[`{check.id}`]({pages}{page})" if page else f"`{check.id}`"


def summary(report: Report, limit: int = SUMMARY_BYTES, pages: str = "") -> str:
    """Markdown for the run's page: a heading with the score, then one table row per check; each
    row's feedback shortened as needed to keep the whole under GitHub's 1 MiB. A failing check's id
    links to its page of the course, below `pages` (`pages_url`)."""
    banner = fallback_banner(report)
    share = max(200, limit // max(1, len(report.checks)) - 200)
    rows = [
        f"| {check_cell(c, pages)} | {ICONS[c.status]} {c.status} | {c.score}/{c.max_score} "
        f"| {shorten('<br>'.join(paragraphs(c)), share)} |"
        for c in report.checks
    ]
    linked = any(c.page_to_read for c in report.checks)
    read = ["", "A failing check's name links to its page of the course: what it computes, its shapes, its traps."]
    return "\n".join(
        [
            f"## GPT-2 grader: {report.score}/{report.max_score} points",
            "",
            *([f"> {literal(banner)}", ""] if banner else []),
            "| check | status | points | feedback |",
            "| --- | --- | --- | --- |",
            *rows,
            *(read if linked else []),
        ]
    )


def classroom_result(report: Report, workspace: Path) -> dict:
    """The runner result autograding-grading-reporter reads (schema: grader/schemas/classroom-result.schema.json)."""
    tests = [
        {
            "name": check.id,
            "status": CLASSROOM_STATUS[check.status],
            "score": check.score,
            "message": "\n".join(check.diagnosis()),
            "line_no": check.line,
            "filename": learner_file(report, check, workspace),
            "duration": check.seconds,
        }
        for check in report.checks
    ]
    statuses = {test["status"] for test in tests}
    status = "fail" if "fail" in statuses else "error" if "error" in statuses else "pass"
    return {"version": 1, "status": status, "max_score": report.max_score, "tests": tests}


def output(report: Report, workspace: Path) -> str:
    """The step output `result`, base64 JSON (the reporter's format), in a block with a random
    delimiter that no text before it can have opened or closed; it starts on a line of its own."""
    encoded = base64.b64encode(json.dumps(classroom_result(report, workspace), allow_nan=False).encode()).decode()
    delimiter = f"ghadelimiter_{secrets.token_hex(16)}"
    return f"\nresult<<{delimiter}\n{encoded}\n{delimiter}"


def shorten(text: str, limit: int) -> str:
    encoded = text.encode()
    return text if len(encoded) <= limit else encoded[: limit - 3].decode(errors="ignore") + "..."


def under_actions(environ: Mapping[str, str]) -> bool:
    return environ.get("GITHUB_ACTIONS") == "true"


def stop_commands(stream: TextIO) -> str:
    """From here on nothing printed, by the grader or by learner code, is read as a workflow command.

    The runner ignores every command until the returned token comes back (`publish` sends it): a
    random token cannot be guessed by the text it fences, and hex is a token the runner accepts.
    """
    token = secrets.token_hex(16)
    print(f"::stop-commands::{token}", file=stream, flush=True)
    return token


def publish(report: Report, environ: Mapping[str, str], stream: TextIO, token: str) -> list[str]:
    """Resume commands, print the annotations, write the summary and the result; returns what failed."""
    workspace = Path(environ.get("GITHUB_WORKSPACE") or Path.cwd()).resolve()
    for line in [f"::{token}::", *annotations(report, workspace)]:
        print(line, file=stream)
    stream.flush()
    problems = []
    written = (
        ("GITHUB_STEP_SUMMARY", summary(report, pages=pages_url(environ))),
        ("GITHUB_OUTPUT", output(report, workspace)),
    )
    for variable, text in written:
        if not environ.get(variable):
            problems.append(f"${variable} is not set, so nothing was written there")
            continue
        try:
            with open(environ[variable], "a", encoding="utf-8") as file:
                file.write(text + "\n")
        except OSError as error:
            problems.append(f"could not write ${variable} ({environ[variable]}): {error.strerror or error}")
    return problems


def emitter(chosen: dict, say: Say) -> Emit:
    """--github, before the learner's code runs: under Actions, workflow commands stop until the
    report is published; elsewhere it says it does nothing."""
    if not under_actions(os.environ):
        say("--github does nothing outside GitHub Actions (GITHUB_ACTIONS is not 'true')")
        return lambda report: None
    stream = sys.stdout
    token = stop_commands(stream)  # learner code runs from here on: what it prints is never a command

    def emit(report: Report) -> None:
        for problem in publish(report, os.environ, stream, token):
            say(problem)

    return emit
