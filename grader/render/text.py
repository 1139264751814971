"""The terminal report: a table of checks, readable with or without colour."""

from __future__ import annotations

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from ..results import CheckResult, Report

STYLES = {"pass": "green", "fail": "red", "todo": "yellow", "error": "magenta", "timeout": "magenta"}


def fallback_banner(report: Report) -> str | None:
    if not report.fallback_reason:
        return None
    return (
        "WARNING: graded against a seeded RANDOM model of GPT-2 small's shape, not GPT-2 "
        f"({report.fallback_reason}). Verdicts hold; the numbers differ from GPT-2's."
    )


def shapes(check: CheckResult) -> str:
    if check.actual_shape is None:
        return ""
    actual = tuple(check.actual_shape)
    return f"{actual}" if check.actual_shape == check.expected_shape else f"{actual} vs {tuple(check.expected_shape or ())}"


def table(report: Report) -> Table:
    grid = Table(title=f"GPT-2 grader: {report.package} against {report.reference}", title_justify="left", expand=False)
    for column in ("check", "status", "points", "shape", "max abs diff"):
        grid.add_column(column, no_wrap=True)
    for check in report.checks:
        diff = "" if check.max_abs_diff is None else f"{check.max_abs_diff:.2e}"
        grid.add_row(check.id, Text(check.status.upper(), style=STYLES[check.status]), f"{check.score}/{check.max_score}", shapes(check), diff)
    return grid


def messages(report: Report) -> list[Text]:
    """One paragraph per check that has something to say, below the table."""
    lines = []
    for check in report.checks:
        for i, line in enumerate([*check.diagnosis(), *check.notes]):
            label = f"{check.id} ({check.status}): " if i == 0 else " " * (len(check.id) + 2)
            lines.append(Text.assemble((label, STYLES[check.status] if i == 0 else ""), line))
    return lines


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
            lines.append(Text.assemble(head, (f" expected {tuple(expected)}", "red" if differs else "dim"), (" <- differs" if differs else "", "red")))
    return lines


def render(report: Report) -> Group:
    parts = []
    banner = fallback_banner(report)
    if banner:
        parts.append(Text(banner, style="bold yellow"))
    parts.append(table(report))
    parts.extend(messages(report))
    counts = {status: sum(c.status == status for c in report.checks) for status in STYLES}
    summary = ", ".join(f"{n} {status}" for status, n in counts.items() if n)
    parts.append(Text(f"score {report.score}/{report.max_score} ({summary}); random inputs from seed {report.seed} (--seed)", style="bold"))
    if report.sandbox:
        parts.append(Text(report.sandbox, style="dim"))
    return Group(*parts)


def print_report(report: Report, console: Console | None = None) -> None:
    console = console or Console()
    for check in report.checks:  # traces first, so the verdict stays at the bottom of the screen
        for line in trace(check):
            console.print(line, soft_wrap=True)
    console.print(render(report))
