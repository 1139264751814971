"""The grading pipeline in one call: learner's process -> verdicts -> failing parts named -> one `Grading`: its
`Report`, and each check's evidence where what reads more than a report holds asks for it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from grader.checks import Check, registry
from grader.host.dependencies import used_by, with_failing_parts
from grader.host.figures import all_figures
from grader.host.refcache import ReferenceData
from grader.host.results import CheckResult, Report
from grader.host.runner import FORK_SWITCH, LearnerProcesses, Limits, Outcome
from grader.host.seal import Seal
from grader.host.verdict import Evidence, judge
from grader.shared import cgroup, sandbox

OnResult = Callable[[CheckResult], None]


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


@dataclass
class Grading:
    """What one grading gives: its report, and each check's evidence (what its process sent back, beside the
    reference it was judged against) where it was kept: --hint, --show and the HTML report's figures read it."""

    report: Report
    evidence: dict[str, Evidence] = field(default_factory=dict)

    def with_figures(self) -> Report:
        """The report with the HTML page's figures of each check whose evidence was kept, drawn now."""
        drawn = [
            replace(result, figures=result.figures | all_figures(self.evidence[result.id]))
            if result.id in self.evidence
            else result
            for result in self.report.checks
        ]
        return replace(self.report, checks=drawn)

    def then(self, later: Grading) -> Grading:
        """This grading and a later one of other checks as one (--hint's stages)."""
        report = replace(self.report, checks=self.report.checks + later.report.checks)
        return Grading(report, {**self.evidence, **later.evidence})


def grade_package(
    package: Path,
    checks: Sequence[Check],
    reference: ReferenceData,
    limits: Limits | None = None,
    processes: LearnerProcesses | None = None,
    on_result: OnResult | None = None,
) -> Report:
    """The report of one grading (`grading`), for what reads nothing else of it."""
    return grading(package, checks, reference, limits, processes, on_result).report


def grading(
    package: Path,
    checks: Sequence[Check],
    reference: ReferenceData,
    limits: Limits | None = None,
    processes: LearnerProcesses | None = None,
    on_result: OnResult | None = None,
    keep_evidence: bool = False,
) -> Grading:
    """Grade one package; pass `processes` to grade on their workers, kept warm between gradings (`grade --watch`).

    The reference entry is sealed before any learner code runs and verified before judging. Each check is judged
    as soon as its outcome is in, beside the checks still running (`Judging`); `on_result` gets each result once
    final: once every part it uses that this grading runs is judged too (`dependencies`). Nothing is judged once
    the entry no longer verifies; the grading then raises as ever. Each check's evidence is kept with
    `keep_evidence` only: it holds every output the learner's process sent back.
    """
    seal = Seal(reference, [check.id for check in checks])
    with contextlib.ExitStack() as stack:
        if processes is None:
            processes = stack.enter_context(LearnerProcesses(limits or Limits()))
        judging = stack.enter_context(Judging(checks, reference, seal, on_result, keep_evidence))
        processes.run(package, list(checks), reference, on_outcome=judging)
        judged = judging.finished()
    problem = seal.broken()
    if problem:
        raise ReferenceTampered(problem)
    results = with_failing_parts([judged[check.id] for check in checks])
    seed, line = reference.meta.get("seed", 0), sandbox_line(processes.limits)
    report = Report(reference.kind, str(package), results, reference.fallback_reason, seed, line)
    return Grading(report, judging.evidence)


class Judging:
    """Each outcome judged as it comes in (`LearnerProcesses.run` hands them over one at a time, from the lanes'
    threads), in a thread of its own, so that no lane waits for a verdict before its next check; and each result
    handed to `on_result` once final: its failing parts among this grading's checks are known, so
    `with_failing_parts` would name the same ones after the last check."""

    def __init__(
        self, checks: Sequence[Check], reference: ReferenceData, seal: Seal, on_result: OnResult | None, keep: bool
    ):
        self.checks, self.reference, self.seal, self.on_result = list(checks), reference, seal, on_result
        self.keep, self.evidence = keep, {}  # each check's evidence, where it is kept
        graph, graded = {check.id: check for check in registry()}, {check.id for check in checks}
        self.parts = {check.id: used_by(check.id, graph) & graded for check in checks}  # what its message may name
        self.judged: dict[str, CheckResult] = {}
        self.handed: set[str] = set()
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="judge")
        self.verdicts: list[Future] = []

    def __enter__(self) -> Judging:
        return self

    def __exit__(self, *exc) -> None:
        self.executor.shutdown(wait=exc[0] is None, cancel_futures=True)

    def __call__(self, check: Check, outcome: Outcome) -> None:
        self.verdicts.append(self.executor.submit(self._judged, check, outcome))

    def finished(self) -> dict[str, CheckResult]:
        """Every check's result, once the last is judged; an error a verdict raised, raised here."""
        for verdict in self.verdicts:
            verdict.result()
        return self.judged

    def _judged(self, check: Check, outcome: Outcome) -> None:
        if self.seal.broken():
            return  # judged from nothing: the grading raises ReferenceTampered at its end
        evidence = Evidence(check, outcome, self.reference)
        self.judged[check.id] = judge(evidence)
        if self.keep:
            self.evidence[check.id] = evidence
        if self.on_result is not None:
            self._hand_on()

    def _hand_on(self) -> None:
        ready = [
            c.id
            for c in self.checks
            if c.id in self.judged and c.id not in self.handed and self.parts[c.id] <= self.judged.keys()
        ]
        if not ready:
            return
        final = {result.id: result for result in with_failing_parts(list(self.judged.values()))}
        for check_id in ready:
            self.handed.add(check_id)
            self.on_result(final[check_id])
