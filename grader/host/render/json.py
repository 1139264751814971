"""The report as JSON (the schema is in the README)."""

from __future__ import annotations

import json

from grader.host.results import ReadBack, Report


def render(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2, allow_nan=False)


# A bare report holds one learner's records, named by its file.
READ_BACK = ReadBack(
    "a grade --json report",
    claims=lambda data: "checks" in data and "submission" not in data,
    fields={"score": ("score",), "max_score": ("max_score",), "records": ("checks",)},
    name_from=lambda path: path.stem,
)
