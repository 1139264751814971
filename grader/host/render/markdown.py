"""The report in Markdown (GitHub's step summary, Classroom 50's release notes, Gradescope's output): its heading and
table, learner-controlled text shown, never interpreted."""

from __future__ import annotations

import re

from grader.host.render.text import fallback_banner
from grader.host.results import CheckResult, Report

COLUMNS = ("id", "status", "points", "message")  # a report's table's, named as the check's record names them
ICONS = {"pass": "✅", "fail": "❌", "todo": "📝", "error": "💥", "timeout": "⏱️"}

# CommonMark lets a backslash escape any ASCII punctuation mark, and an escaped mark is always literal.
_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")


def literal(line: str) -> str:
    """One line of text as Markdown that renders as exactly that text: no emphasis, links, HTML or table cells."""
    return _PUNCTUATION.sub(r"\\\1", line)


def with_code_spans(line: str) -> str:
    """One line of the grader's own text as Markdown: its `code spans` shown as code, everything else literal (a span
    is never learner-written here, and its text is literal in Markdown already)."""
    pieces = line.split("`")
    if len(pieces) % 2 == 0:  # an unpaired backtick: no span is meant
        return literal(line)
    return "".join(f"`{piece}`" if index % 2 else literal(piece) for index, piece in enumerate(pieces))


def paragraphs(check: CheckResult) -> list[str]:
    """Each line of the check's diagnosis and notes, made literal: a divergence names the learner's own tensors."""
    return [literal(line) for text in (*check.diagnosis(), *check.notes) for line in text.splitlines() if line.strip()]


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


def shorten(text: str, limit: int) -> str:
    encoded = text.encode()
    return text if len(encoded) <= limit else encoded[: limit - 3].decode(errors="ignore") + "..."
