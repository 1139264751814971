"""The terminal table keeps every header whole on an ordinary terminal: a narrow one folds the long cells (check ids,
shapes) instead of cutting a header to "sta…" or dropping the status and points columns."""

from __future__ import annotations

import pytest
from rich.console import Console

from grader.checks import registry
from grader.host.render.text import table
from grader.host.results import CheckResult, Report

pytestmark = pytest.mark.unit

HEADERS = ["check", "status", "points", "shape", "max abs diff"]


def every_status_report() -> Report:
    """Every check, in turn passing, failing with mismatched shapes, todo, an error and a timeout: the widest cells."""
    statuses = ["pass", "fail", "todo", "error", "timeout"]
    results = []
    for i, check in enumerate(registry()):
        status = statuses[i % len(statuses)]
        failing = status == "fail"
        results.append(
            CheckResult(
                check.id,
                check.part,
                check.summary,
                status,
                check.points,
                max_abs_diff=1.5e-3 if failing else None,
                expected_shape=[1, 12, 768] if status in ("pass", "fail") else None,
                actual_shape=[1, 12, 64] if failing else [1, 12, 768] if status == "pass" else None,
            )
        )
    return Report("random", "/home/learner/courses/gpt2-from-scratch/exercises", results)


def rendered(width: int) -> list[str]:
    console = Console(width=width, record=True, color_system=None)
    console.print(table(every_status_report()))
    return console.export_text().splitlines()


@pytest.mark.parametrize("width", [80, 60])
def test_headers_are_whole_and_the_table_fits(width):
    lines = rendered(width)
    header = next(line for line in lines if line.startswith("┃"))
    assert [cell.strip() for cell in header.strip("┃").split("┃")] == HEADERS
    assert max(len(line) for line in lines) <= width
    # Nothing is cut: every status shows, and each check id is whole once its folded lines are joined.
    body = [line for line in lines if line.startswith("│")]
    cells = [[cell.strip() for cell in line.strip("│").split("│")] for line in body]
    shown_statuses = {row[1] for row in cells if row[1]}
    assert shown_statuses == {"PASS", "FAIL", "TODO", "ERROR", "TIMEOUT"}
    ids, current = [], ""
    for row in cells:
        if row[1] and current:  # a row with a status starts the next check
            ids.append(current)
            current = ""
        current += row[0]
    ids.append(current)
    assert ids == [check.id for check in registry()]
    assert not any("…" in line for line in lines)
