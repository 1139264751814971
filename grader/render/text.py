"""The terminal report: a table of checks, readable with or without colour."""

from __future__ import annotations

import os
from pathlib import Path

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from ..results import CheckResult, Report
from . import Emit, Say

STYLES = {"pass": "green", "fail": "red", "todo": "yellow", "error": "magenta", "timeout": "magenta"}
PRINTED_LINES = 10  # of what the learner's code printed, per check; --quiet shows none
TODO_NAMED = 2  # a file with more todo checks than this is summed up by their number
DOWNLOAD = "grade --download"  # the one command that fetches GPT-2 when online


def fallback_banner(report: Report) -> str | None:
    if not report.fallback_reason:
        return None
    return (
        "WARNING: graded against a seeded RANDOM model of GPT-2 small's shape, not GPT-2 "
        f"({report.fallback_reason}). Verdicts hold; the numbers differ from GPT-2's. "
        f"Online, `{DOWNLOAD}` fetches GPT-2 into the Hugging Face cache once."
    )


def shapes(check: CheckResult) -> str:
    if check.actual_shape is None:
        return ""
    actual = tuple(check.actual_shape)
    return (
        f"{actual}"
        if check.actual_shape == check.expected_shape
        else f"{actual} vs {tuple(check.expected_shape or ())}"
    )


def table(report: Report) -> Table:
    grid = Table(title=f"GPT-2 grader: {report.package} against {report.reference}", title_justify="left", expand=False)
    for column in ("check", "status", "points", "shape", "max abs diff"):
        grid.add_column(column, no_wrap=True)
    for check in report.checks:
        diff = "" if check.max_abs_diff is None else f"{check.max_abs_diff:.2e}"
        grid.add_row(
            check.id,
            Text(check.status.upper(), style=STYLES[check.status]),
            f"{check.score}/{check.max_score}",
            shapes(check),
            diff,
        )
    return grid


def messages(report: Report) -> list[Text]:
    """One paragraph per check that has something to say, below the table."""
    lines = []
    for check in report.checks:
        said = [] if check.status == "todo" else [*check.diagnosis(), *check.notes]  # todo: one line for all, below
        for i, line in enumerate(said):
            label = f"{check.id} ({check.status}): " if i == 0 else " " * (len(check.id) + 2)
            lines.append(Text.assemble((label, STYLES[check.status] if i == 0 else ""), line))
    return lines


def printed(check: CheckResult, limit: int = PRINTED_LINES) -> list[Text]:
    """What the learner's code printed during the check, labelled with it. Each line is indented and
    never wrapped, so none can start a line of the grader's output (a forged workflow command)."""
    if not check.printed:
        return []
    shown = [Text(f"{check.id} printed:", style="dim")]
    shown += [Text(f"  | {line}", no_wrap=True, overflow="ellipsis") for line in check.printed[:limit]]
    if len(check.printed) > limit:
        shown.append(Text(f"  ... {len(check.printed) - limit} more lines", style="dim"))
    return shown


def todo_files(report: Report) -> str:
    """Every todo check on one line, by file in course order: "embedding.py (embed, pos_embed), ..."."""
    by_file: dict[str, list[str]] = {}
    for check in report.checks:
        if check.status == "todo":
            by_file.setdefault(check.file or "?", []).append(check.id)
    named = (", ".join(ids) if len(ids) <= TODO_NAMED else f"{len(ids)} checks" for ids in by_file.values())
    return ", ".join(f"{file} ({ids})" for file, ids in zip(by_file, named, strict=False))


def start_here(report: Report) -> str | None:
    """Where the first todo check in course order lives, and the command that grades it alone."""
    first = next((check for check in report.checks if check.status == "todo"), None)
    if first is None:
        return None
    target = first.target or first.id
    lead = "start here" if not any(check.status == "pass" for check in report.checks) else "next to write"
    return f"{lead}: {shown_path(report.package, first.file or '')}, {target}; then `grade {first.id}`"


def shown_path(package: str, file: str) -> str:
    """The learner's file as they would type it: relative to where they are when it is below."""
    path = Path(package) / file
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return os.fspath(path)


def todo_lines(report: Report) -> list[Text]:
    if not any(check.status == "todo" for check in report.checks):
        return []
    return [Text.assemble(("todo: ", STYLES["todo"]), todo_files(report)), Text(start_here(report) or "", style="bold")]


def trace(check: CheckResult) -> list[Text]:
    """The check's tensors in the order the learner's code made them, as `grade --trace` shows."""
    if not check.trace:
        return []
    width = max(len(f"[{line['tag']}]") + len(line["name"]) for line in check.trace) + 2
    lines = [Text(f"trace of {check.id}:", style="bold")]
    for line in check.trace:
        shape = str(tuple(line["shape"]))
        head = f"[{line['tag']}]".ljust(width - len(line["name"])) + f"{line['name']}: {shape:<18}"
        expected = line["expected_shape"]
        if expected is None:
            lines.append(Text(head))
        else:
            differs = expected != line["shape"]
            lines.append(
                Text.assemble(
                    head,
                    (f" expected {tuple(expected)}", "red" if differs else "dim"),
                    (" <- differs" if differs else "", "red"),
                )
            )
    return lines


def render(report: Report, show_printed: bool = True) -> Group:
    parts = []
    banner = fallback_banner(report)
    if banner:
        parts.append(Text(banner, style="bold yellow"))
    parts.append(table(report))
    parts.extend(messages(report))
    if show_printed:
        parts.extend(line for check in report.checks for line in printed(check))
    parts.extend(todo_lines(report))
    counts = {status: sum(c.status == status for c in report.checks) for status in STYLES}
    summary = ", ".join(f"{n} {status}" for status, n in counts.items() if n)
    parts.append(
        Text(
            f"score {report.score}/{report.max_score} ({summary}); random inputs from seed {report.seed} (--seed)",
            style="bold",
        )
    )
    if report.sandbox:
        parts.append(Text(report.sandbox, style="dim"))
    return Group(*parts)


def print_report(report: Report, console: Console | None = None, show_printed: bool = True) -> None:
    console = console or Console()
    for check in report.checks:  # traces first, so the verdict stays at the bottom of the screen
        for line in trace(check):
            console.print(line, soft_wrap=True)
    console.print(render(report, show_printed))


def emitter(chosen: dict, say: Say) -> Emit:
    """`grade`'s terminal report, --quiet leaving out what the learner's code printed."""
    console = Console()
    return lambda report: print_report(report, console, show_printed=not chosen["quiet"])
