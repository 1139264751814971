"""What a format shown inside a GitHub Actions step shares (GitHub's own step, Classroom 50's runner): the learner's
files named from the workspace, the graded commit's pages, workflow commands stopped while learner code runs, and the
files the runner names in its variables."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

from grader.host.results import CheckResult, Report


def learner_file(report: Report, check: CheckResult, workspace: Path) -> str:
    """The check's file as GitHub names it: relative to the repository when it lies inside it."""
    path = Path(report.package, check.file or "")
    return path.relative_to(workspace).as_posix() if path.is_relative_to(workspace) else str(path)


def pages_url(environ: Mapping[str, str]) -> str:
    """Where the repository's files are on GitHub at the commit graded (`.../blob/SHA/`), so that a course page
    links to its text there; "" outside Actions, and a link is then the page's path in the repository."""
    server, repository, sha = (environ.get(name) for name in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_SHA"))
    return f"{server}/{repository}/blob/{sha}/" if server and repository and sha else ""


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
