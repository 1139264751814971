"""The report as Gradescope's results.json (schema: grader/host/platforms/gradescope/results.schema.json)."""

from __future__ import annotations

import json
from dataclasses import asdict

from grader.host.render.markdown import paragraphs
from grader.host.render.text import fallback_banner
from grader.host.results import RECORD_VERSION, CheckResult, ReadBack, Report


def output(check: CheckResult) -> str:
    """Markdown: the verdict, then what the grader said, every learner-written character shown literally."""
    verdict = f"**{check.status.upper()}**, {check.score}/{check.max_score} points"
    return "\n\n".join([verdict, *paragraphs(check)])


def test(check: CheckResult, assignment: str | None) -> dict:
    return {
        "name": f"{check.id}: {check.summary}",
        "score": check.score,
        "max_score": check.max_score,
        "status": "passed" if check.status == "pass" else "failed",
        "output": output(check),
        "output_format": "md",
        "tags": [check.part],
        "visibility": "visible",
        # The check's record, which the class view (grader.host.tools.class_report) reads: Gradescope keeps it unshown.
        "extra_data": asdict(check.record(assignment)),
    }


def results(report: Report) -> dict:
    said = [line for line in (report.assignment and report.title(), fallback_banner(report)) if line]
    return {
        "score": report.score,
        "execution_time": round(sum(c.seconds for c in report.checks)),
        **({"output": "\n\n".join(said)} if said else {}),
        "extra_data": {
            "record_version": RECORD_VERSION,
            **({"assignment": report.assignment} if report.assignment else {}),
        },
        "tests": [test(check, report.assignment) for check in report.checks],
    }


def render(report: Report) -> str:
    return json.dumps(results(report), indent=2)


# Gradescope's export: a folder per learner holding its results.json; each test's record is its extra_data.
READ_BACK = ReadBack(
    "a Gradescope results.json",
    claims=lambda data: "tests" in data and "schema" not in data,
    fields={"score": ("score",), "records": ("tests",)},
    record_at=("extra_data",),
    name_from=lambda path: path.resolve().parent.name,
)
