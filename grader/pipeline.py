"""The grading pipeline in one call: learner's process -> verdicts -> one `Report`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .checks import Check
from .refcache import ReferenceData
from .results import Report
from .runner import LearnerProcesses, Limits, run_checks
from .verdict import judge


def grade_package(package: Path, checks: Sequence[Check], reference: ReferenceData, limits: Limits = Limits(), processes: LearnerProcesses | None = None) -> Report:
    """Grade one package; pass `processes` to share the learner's worker across many packages."""
    outcomes = processes.run(package, list(checks)) if processes else run_checks(package, list(checks), reference, limits)
    results = [judge(check, outcomes[check.id], reference) for check in checks]
    return Report(reference.kind, str(package), results, reference.fallback_reason, reference.meta.get("seed", 0))
