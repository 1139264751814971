"""The grading pipeline in one call: learner's process -> verdicts -> failing parts named -> one `Report`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from grader.checks import Check
from grader.host.dependencies import with_failing_parts
from grader.host.refcache import ReferenceData, Seal
from grader.host.results import Report
from grader.host.runner import FORK_SWITCH, LearnerProcesses, Limits
from grader.host.verdict import judge
from grader.shared import cgroup, sandbox


class ReferenceTampered(RuntimeError):
    """The reference cache entry did not verify after the learner's code ran: no verdict from it."""


def sandbox_line(limits: Limits) -> str:
    """The report's last line; `limits` settled (`Limits.settled`): only a fork is ever confined."""
    status = sandbox.status()
    if status.on and not limits.sandbox:
        return "sandbox: off (--no-sandbox)"
    if status.on and not limits.fork:
        return f"sandbox: off ({FORK_SWITCH}=0: checks run without forks, in one unconfined process)"
    if status.on:  # how a fork's memory is counted: by the kernel in a cgroup of its own, or polled
        return f"sandbox: on ({status.reason}; {cgroup.accounting()})"
    return status.describe()


def grade_package(
    package: Path,
    checks: Sequence[Check],
    reference: ReferenceData,
    limits: Limits | None = None,
    processes: LearnerProcesses | None = None,
) -> Report:
    """Grade one package; pass `processes` to grade on their workers, kept warm between gradings (`grade --watch`).

    The reference entry is sealed before any learner code runs and verified before judging.
    """
    seal = Seal(reference, [check.id for check in checks])
    if processes is None:
        with LearnerProcesses(limits or Limits()) as own:
            limits, outcomes = own.limits, own.run(package, list(checks), reference)
    else:
        limits, outcomes = processes.limits, processes.run(package, list(checks), reference)
    problem = seal.broken()
    if problem:
        raise ReferenceTampered(problem)
    results = with_failing_parts([judge(check, outcomes[check.id], reference) for check in checks])
    seed = reference.meta.get("seed", 0)
    return Report(reference.kind, str(package), results, reference.fallback_reason, seed, sandbox_line(limits))
