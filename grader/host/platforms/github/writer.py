"""GitHub Actions: the step summary and annotations at the learner's lines.

`summary` and `annotations` are pure functions of a Report (and of the workspace that file paths are
given relative to). `stop_commands`, `resume_commands` and `publish` are the only code that touches
the step: its log, and the file GitHub names in $GITHUB_STEP_SUMMARY; `emitter` is how
`grade --github` calls them (grader.host.render's interface).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

from grader.host.render import Emit, Say
from grader.host.render.actions import (
    append_to,
    learner_file,
    pages_url,
    resume_commands,
    stop_commands,
    under_actions,
)
from grader.host.render.markdown import heading, table
from grader.host.results import FAILING, Report

SUMMARY_BYTES = 1_000_000  # GitHub refuses a step summary over 1 MiB


def escape_data(text: str) -> str:
    """A command's message kept on one line, as the runner unescapes it."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(name: str, message: str, **properties: object) -> str:
    """`::name key=value,...::message`, every part escaped as GitHub's runner expects."""
    given = ",".join(f"{key}={escape_property(str(value))}" for key, value in properties.items() if value is not None)
    return f"::{name}{' ' + given if given else ''}::{escape_data(message)}"


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


def summary(report: Report, limit: int = SUMMARY_BYTES, pages: str = "") -> str:
    """Markdown for the run's page: the heading, then the table, the whole under GitHub's 1 MiB."""
    return "\n".join([*heading(report), *table(report, limit, pages)])


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
