"""The terminal report: a table of checks, readable with or without colour."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from grader.checks import registry
from grader.host.render import Emit, Say
from grader.host.results import CheckResult, Report

STYLES = {"pass": "green", "fail": "red", "todo": "yellow", "error": "magenta", "timeout": "magenta"}
PRINTED_LINES = 10  # of what the learner's code printed, per check; --quiet shows none
TODO_NAMED = 2  # a file with more todo checks than this is summed up by their number
DOWNLOAD = "grade --download"  # the one command that fetches GPT-2 when online
NAMED_IN_A_ROW = 2  # prefixes one row of checks sharing an error names before "..."
COLUMNS = ("check", "status", "points", "shape", "max abs diff")
UNFOLDED = {"status", "points", "max abs diff"}  # short cells, read at a glance: kept on one line


def fallback_banner(report: Report) -> str | None:
    """The random reference's notice, on one line: said once per report, where a person reads first."""
    if not report.fallback_reason:
        return None
    fetch = "" if DOWNLOAD in report.fallback_reason else f"; `{DOWNLOAD}` fetches GPT-2"
    said = "a seeded RANDOM model of GPT-2's shape, not GPT-2: verdicts hold, numbers differ"
    return f"{said} ({report.fallback_reason}{fetch})"


def shapes(check: CheckResult) -> str:
    if check.actual_shape is None:
        return ""
    actual = tuple(check.actual_shape)
    return (
        f"{actual}"
        if check.actual_shape == check.expected_shape
        else f"{actual} vs {tuple(check.expected_shape or ())}"
    )


def error_key(check: CheckResult) -> tuple | str:
    """One key for the checks stopped by one identical error (a syntax error stops every check of its
    file); any other check's is its own id."""
    place = check.error_place
    return (*place, check.message) if place else check.id


def shared_errors(checks: Sequence[CheckResult]) -> list[list[CheckResult]]:
    """The checks in order, in groups: those that share one identical error in one, where the first is."""
    groups: dict[tuple | str, list[CheckResult]] = {}
    for check in checks:
        groups.setdefault(error_key(check), []).append(check)
    return list(groups.values())


def group_label(ids: Sequence[str]) -> str:
    """A check's id, or a group's ids by prefix: "attention.* (2 checks)", "transformer, kv_cache (2 checks)"."""
    if len(ids) == 1:
        return ids[0]
    by_prefix: dict[str, list[str]] = {}
    for check_id in ids:
        by_prefix.setdefault(check_id.split(".")[0], []).append(check_id)
    names = [members[0] if len(members) == 1 else f"{prefix}.*" for prefix, members in by_prefix.items()]
    shown = ", ".join(names[:NAMED_IN_A_ROW]) + (", ..." if len(names) > NAMED_IN_A_ROW else "")
    return f"{shown} ({len(ids)} checks)"


def points(group: Sequence[CheckResult]) -> str:
    return f"{sum(check.score for check in group)}/{sum(check.max_score for check in group)}"


def table(report: Report) -> Table:
    """One row per check, but one for the checks that share one error (their own results stay in every
    other format), and one per part not begun, in a report of every check (a learner's first runs)."""
    title = report.title(f"{report.package} against {report.reference}")
    grid = Table(title=title, title_justify="left", expand=False)
    for column in COLUMNS:
        # Each header keeps its width; a narrow terminal folds the long cells (ids, shapes), never a header or a status.
        grid.add_column(column, min_width=len(column), no_wrap=column in UNFOLDED, overflow="fold")
    for label, group in rows(report):
        first = group[0]
        grid.add_row(
            label,
            Text(first.status.upper(), style=STYLES[first.status]),
            points(group),
            shapes(first),
            first.shown_diff,
        )
    return grid


def parts_not_begun(report: Report) -> set[str]:
    """In a report of every check, the parts with more than one check, all todo: each is one row."""
    if not {check.id for check in report.checks} >= {check.id for check in registry()}:
        return set()  # a selection: every check it names has its row
    by_part: dict[str, list[str]] = {}
    for check in report.checks:
        by_part.setdefault(check.part, []).append(check.status)
    return {part for part, statuses in by_part.items() if len(statuses) > 1 and set(statuses) == {"todo"}}


def rows(report: Report) -> list[tuple[str, list[CheckResult]]]:
    """The table's rows, each a label and the checks it stands for."""
    folded = parts_not_begun(report)
    shown: list[tuple[str, list[CheckResult]]] = []
    for part in dict.fromkeys(check.part for check in report.checks):
        in_part = [check for check in report.checks if check.part == part]
        if part in folded:
            shown.append((f"{part} ({len(in_part)} checks)", in_part))
            continue
        shown += [(group_label([check.id for check in group]), group) for group in shared_errors(in_part)]
    return shown


def messages(report: Report) -> list[Text]:
    """One paragraph per check that has something to say, below the table; one for a group that shares an error."""
    lines = []
    for group in shared_errors(report.checks):
        first, name = group[0], group_label([check.id for check in group])
        notes = dict.fromkeys(note for check in group for note in check.notes)
        pages = dict.fromkeys(check.page_to_read for check in group if check.page_to_read)
        read = [f"read: {', '.join(pages)}"] if pages else []  # the course's page of each failing check
        said = [] if first.status == "todo" else [*first.diagnosis(), *read, *notes]  # todo: one line for all, below
        for i, line in enumerate(said):
            label = f"{name} ({first.status}): " if i == 0 else " " * (len(name) + 2)
            lines.append(Text.assemble((label, STYLES[first.status] if i == 0 else ""), line))
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
    folded = parts_not_begun(report)  # their rows say todo already
    for check in report.checks:
        if check.status == "todo" and check.part not in folded:
            by_file.setdefault(check.file or "?", []).append(check.id)
    named = (", ".join(ids) if len(ids) <= TODO_NAMED else f"{len(ids)} checks" for ids in by_file.values())
    return ", ".join(f"{file} ({ids})" for file, ids in zip(by_file, named, strict=False))


def start_here(report: Report) -> str | None:
    """Where the first todo check in course order lives, the command that grades it alone, and its course page
    (read before writing it): "start here: exercises/embedding.py, Embed.forward; then `grade embed`; read:
    docs/course/02-embed.md"."""
    first = next((check for check in report.checks if check.status == "todo"), None)
    if first is None:
        return None
    target = first.target or first.id
    lead = "start here" if not any(check.status == "pass" for check in report.checks) else "next to write"
    read = f"; read: {first.page}" if first.page else ""  # last, so a narrow terminal folds the line after the command
    return f"{lead}: {shown_path(report.package, first.file or '')}, {target}; then `grade {first.id}`{read}"


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
    files = todo_files(report)
    listed = [Text.assemble(("todo: ", STYLES["todo"]), files)] if files else []
    return [*listed, Text(start_here(report) or "", style="bold")]


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
            lines.append(Text.assemble(head, *step_said(line)))
        else:
            differs = expected != line["shape"]
            lines.append(
                Text.assemble(
                    head,
                    (f" expected {tuple(expected)}", "red" if differs else "dim"),
                    (" <- differs" if differs else "", "red"),
                    *([] if differs else step_said(line)),
                )
            )
    return lines


def step_said(line: dict) -> list[tuple[str, str]]:
    """What --trace says of a tensor's values, as --show does: the reference's step it equals, or the step its name
    names and it does not equal; nothing where the check kept no values."""
    if line.get("equals"):
        return [(f"  = the reference's {line['equals']}", "green")]
    if line.get("named"):
        return [(f"  <- not the reference's {line['named']}", "red")]
    return []


def render(report: Report, show_printed: bool = True) -> Group:
    """The report below its header (print_report prints the random reference's notice above it)."""
    parts: list = [table(report)]
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


def print_report(
    report: Report, console: Console | None = None, show_printed: bool = True, banner: bool = True
) -> None:
    """The report, the random reference's notice first (`banner=False`: left out, as a notebook shows it once)."""
    console = console or Console()
    for check in report.checks:  # traces first, so the verdict stays at the bottom of the screen
        for line in trace(check):
            console.print(line, soft_wrap=True)
    notice = fallback_banner(report) if banner else None
    if notice:
        console.print(Text(notice, style="bold yellow"), soft_wrap=True)  # one line, however the terminal folds it
    console.print(render(report, show_printed))


def emitter(chosen: dict, say: Say) -> Emit:
    """`grade`'s terminal report, --quiet leaving out what the learner's code printed."""
    console = Console()
    return lambda report: print_report(report, console, show_printed=not chosen["quiet"])
