"""The report as JSON (the schema is in the README)."""

from __future__ import annotations

import json

from grader.host.results import Report


def render(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2, allow_nan=False)
