"""The import preflight: before any check, each of the learner's files the checks grade is imported once (and so each
file it imports), in a confined fork as a check is, under the check timeout. A file that does not finish importing (a
`while True` at its top) costs that one timeout, not one per check: it is then stood in for in every check
(`grader.learner.stand_ins`), and each check of its own says "mlp.py does not finish importing (line N when stopped)"
without running.

The file and line come from the stacks faulthandler writes into the preflight's scratch shortly before its time is
up (`learner.server.STACKS_AT`): what the learner's process wrote, read as hostile (a regular file, bounded, each
frame matched whole, the file one of the package's)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from grader.host.runner.replies import Outcome
from grader.host.runner.request import Limits
from grader.shared import sandbox, wire

MAX_STACK_BYTES = 64 * 1024
FRAME = re.compile(r'  File "(?P<path>[^"\n]+)", line (?P<line>\d{1,7}) in <module>')  # faulthandler's own format
INIT = "__init__.py"  # where it hangs, no check can run


def unfinished_imports(
    package: Path, files: list[str], limits: Limits, stopped: Callable[[wire.Request], wire.StoodIn | None]
) -> list[wire.StoodIn]:
    """The files of the package whose import does not finish, among `files` (the checks' own) and those they import,
    one preflight each (`stopped`: where it was stopped, None where it finished), until one finishes or names no new
    file."""
    unfinished: list[wire.StoodIn] = []
    while (found := stopped(preflight_request(package, files, limits, unfinished))) and found.file not in names(
        unfinished
    ):
        unfinished.append(found)
        if found.file == INIT:
            break
    return unfinished


def names(unfinished: list[wire.StoodIn]) -> set[str]:
    return {stood.file for stood in unfinished}


def preflight_request(package: Path, files: list[str], limits: Limits, unfinished: list[wire.StoodIn]) -> wire.Request:
    """The request of one preflight: no check, no case, no weights; its scratch is the lane's to fill in."""
    return wire.Request(
        package=str(package),
        check="",
        target=wire.TargetSpec("", "", None, None),
        cases=[],
        weights="",
        inputs="",
        scratch="",
        timeout=limits.timeout,
        memory_bytes=int(limits.memory_gb * 2**30),
        sandbox=limits.sandbox and bool(limits.fork) and sandbox.status().on,
        unfinished=list(unfinished),  # as found so far: the list grows after
        preflight=files,
    )


def stopped_at(scratch: Path, package: Path) -> wire.StoodIn | None:
    """The file of the package whose import was running when the stacks were written, and its line: the innermost
    module-level frame in one of the package's files (faulthandler writes the innermost call first)."""
    try:
        with wire.open_left(scratch / wire.IMPORT_STACK_FILE) as handle:
            text = handle.read(MAX_STACK_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        frame = FRAME.fullmatch(line)
        if frame and is_learner_file(Path(frame["path"]), package.resolve()):
            return wire.StoodIn(Path(frame["path"]).name, [], "does not finish importing", int(frame["line"]))
    return None


def is_learner_file(path: Path, package: Path) -> bool:
    return path.parent == package and path.suffix == ".py" and (package / path.name).is_file()


def needs(check_file: str, unfinished: list[wire.StoodIn]) -> wire.StoodIn | None:
    """The unfinished import a check of `check_file` cannot run without: its own file's, or the package's."""
    return next((stood for stood in unfinished if stood.file in (f"{check_file}.py", INIT)), None)


def unfinished_outcome(stood: wire.StoodIn) -> Outcome:
    """The outcome of a check whose file does not finish importing: a timeout, paid once by the preflight."""
    return Outcome("timeout", wire.Reply("error", where=wire.Place(stood.file, stood.line)), error=stood.said())
