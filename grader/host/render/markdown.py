"""Learner-controlled text inside Markdown (GitHub's step summary, Gradescope's output): shown, never interpreted."""

from __future__ import annotations

import re

from grader.host.results import CheckResult

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
