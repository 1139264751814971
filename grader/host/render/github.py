"""GitHub Actions: the step summary and annotations at the learner's lines.

`summary` and `annotations` are pure functions of a Report (and of the workspace that file paths are
given relative to). `stop_commands`, `resume_commands` and `publish` are the only code that touches
the step: its log, and the file GitHub names in $GITHUB_STEP_SUMMARY; `emitter` is how
`grade --github` calls them (grader.host.render's interface).
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

from grader.host.render import Emit, Say
from grader.host.render.markdown import paragraphs, with_code_spans
from grader.host.render.text import fallback_banner
from grader.host.results import CheckResult, Report

FAILING = ("fail", "error", "timeout")
SUMMARY_BYTES = 1_000_000  # GitHub refuses a step summary over 1 MiB
COLUMNS = ("id", "status", "points", "message")  # the summary table's, named as the check's record names them
ICONS = {"pass": "✅", "fail": "❌", "todo": "📝", "error": "💥", "timeout": "⏱️"}


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
            "\n".join([*check.diagnosis(), *check.notes]),  # escaped onto one line; GitHub shows the lines again
            file=learner_file(report, check, workspace),
            line=check.line,
            title=f"{check.id}: {check.status}, {check.score}/{check.max_score} points",
        )
        for check in report.checks
        if check.status in FAILING
    ]
    passed = sum(check.status == "pass" for check in report.checks)
    score = f"{report.score}/{report.max_score} points, {passed} of {len(report.checks)} checks pass"
    return [*errors, command("notice", score, title=report.title())]


def pages_url(environ: Mapping[str, str]) -> str:
    """Where the repository's files are on GitHub at the commit graded (`.../blob/SHA/`), so that a course page
    links to its text there; "" outside Actions, and a link is then the page's path in the repository."""
    server, repository, sha = (environ.get(name) for name in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_SHA"))
    return f"{server}/{repository}/blob/{sha}/" if server and repository and sha else ""


def check_cell(check: CheckResult, pages: str) -> str:
    """A check's id; a failing check's links to its course page."""
    page = check.page_to_read
    return f"[`{check.id}`]({pages}{page})" if page else f"`{check.id}`"


def heading(report: Report) -> list[str]:
    """The Markdown report's first lines: the score, then the random reference's notice where it applies."""
    banner = fallback_banner(report)
    return [
        f"## {report.title()}: {report.score}/{report.max_score} points",
        "",
        *([f"> {with_code_spans(banner)}", ""] if banner else []),
    ]


def table(report: Report, limit: int, pages: str) -> list[str]:
    """One Markdown table row per check, its columns the record's fields of `COLUMNS`, each row's message (all the
    grader said) shortened to keep the whole under `limit` bytes; a failing check's id links to its page of the
    course, below `pages` (`pages_url`)."""
    share = max(200, limit // max(1, len(report.checks)) - 200)
    rows = [
        f"| {check_cell(check, pages)} | {ICONS[record.status]} {record.status} | {record.points}/{record.max_points} "
        f"| {shorten('<br>'.join(paragraphs(check)), share)} |"
        for check, record in zip(report.checks, report.records(), strict=True)
    ]
    linked = any(c.page_to_read for c in report.checks)
    read = ["", "A failing check's name links to its page of the course: what it computes, its shapes, its traps."]
    header = [f"| {' | '.join(COLUMNS)} |", "| --- " * len(COLUMNS) + "|"]
    return [*header, *rows, *(read if linked else [])]


def summary(report: Report, limit: int = SUMMARY_BYTES, pages: str = "") -> str:
    """Markdown for the run's page: the heading, then the table, the whole under GitHub's 1 MiB."""
    return "\n".join([*heading(report), *table(report, limit, pages)])


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


def resume_commands(stream: TextIO, token: str, lines: list[str]) -> None:
    """Commands count again from here (`token` is `stop_commands`'s); then the grader's own `lines`."""
    for line in [f"::{token}::", *lines]:
        print(line, file=stream)
    stream.flush()


def append_to(environ: Mapping[str, str], variable: str, text: str) -> str | None:
    """`text` and a newline appended to the file GitHub names in $variable; what went wrong, in a line."""
    path = environ.get(variable)
    if not path:
        return f"${variable} is not set, so nothing was written there"
    try:
        with open(path, "a", encoding="utf-8") as file:
            file.write(text + "\n")
    except OSError as error:
        return f"could not write ${variable} ({path}): {error.strerror or error}"
    return None


def publish(report: Report, environ: Mapping[str, str], stream: TextIO, token: str) -> list[str]:
    """Resume commands, print the annotations, write the summary; returns what failed."""
    workspace = Path(environ.get("GITHUB_WORKSPACE") or Path.cwd()).resolve()
    resume_commands(stream, token, annotations(report, workspace))
    problem = append_to(environ, "GITHUB_STEP_SUMMARY", summary(report, pages=pages_url(environ)))
    return [problem] if problem else []


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
