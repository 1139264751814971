"""The grading pipeline: learner's process -> verdicts -> failing parts named -> each result as it is final, then
one `Grading`: its `Report`, and each check's evidence where what reads more than a report asks for it."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from grader.checks import Check, registry
from grader.host.dependencies import replaced, stand_in_part, stood_in_note, to_stand_in, used_by, with_failing_parts
from grader.host.figures import all_figures
from grader.host.refcache import ReferenceData
from grader.host.results import CheckResult, Report
from grader.host.runner import FORK_SWITCH, LearnerProcesses, Limits
from grader.host.seal import Seal
from grader.host.verdict import Evidence, judge
from grader.shared import cgroup, sandbox, wire


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


Stood = dict[str, list[str]]  # check id -> the parts (check ids) the grader's own replace in it


@dataclass
class Passes:
    """Where one grading's passes stand: the first ended, and then the checks whose second pass is still to come."""

    first_ended: bool = False
    pending: set[str] = field(default_factory=set)


# (the entry that did not verify, why) -> one built again; ReferenceTampered again is the caller's
Rebuild = Callable[[ReferenceData, ReferenceTampered], ReferenceData]


class GradingRun:
    """One grading of a package as it runs: iterated, it yields each check's result once final, then holds the
    `Grading`. Pass `processes` to grade on their workers, kept warm between gradings (`grade --watch`).

    The reference entry is sealed before any learner code runs. Each check is judged as soon as its outcome is in,
    while the lanes run on, and yielded once final: once every part it uses that this grading runs is judged too
    (`dependencies`), so `with_failing_parts` would name the same ones after the last check. A check that fails
    while parts it uses fail their own checks, parts the grader has its own of, is graded again once the first pass
    ends, with the grader's in their place (`_passes`): that result is its own, with a note. Nothing is judged
    once the entry no longer verifies; the run then raises `ReferenceTampered`, or, given `rebuild`, grades every check
    again on the entry it builds (`reference`: the entry the results were judged against), yielding each again.
    Each check's evidence is kept with `keep_evidence` only: it holds every output the learner's process sent back.
    """

    def __init__(
        self,
        package: Path,
        checks: Sequence[Check],
        reference: ReferenceData,
        limits: Limits | None = None,
        processes: LearnerProcesses | None = None,
        keep_evidence: bool = False,
        rebuild: Rebuild | None = None,
    ):
        self.package, self.checks, self.reference = package, list(checks), reference
        self.limits, self.processes, self.keep_evidence, self.rebuild = limits, processes, keep_evidence, rebuild
        self.registered = registry()  # read once: each result names its failing parts as soon as it is final
        self.graph, graded = {check.id: check for check in self.registered}, {check.id for check in self.checks}
        # What a message may name, and what a result waits for
        self.parts = {check.id: used_by(check.id, self.graph) & graded for check in self.checks}
        self.grading: Grading | None = None  # once iterated to the end

    def finished(self) -> Grading:
        """The grading, every check run and judged: now, unless the run was iterated to its end already."""
        if self.grading is None:
            for _ in self:
                pass
        assert self.grading is not None
        return self.grading

    def __iter__(self) -> Iterator[CheckResult]:
        try:
            yield from self._attempt()
        except ReferenceTampered as error:
            if self.rebuild is None:
                raise
            self.reference = self.rebuild(self.reference, error)  # the workers paused meanwhile: the caller's
            yield from self._attempt()

    def _attempt(self) -> Iterator[CheckResult]:
        seal = Seal(self.reference, [check.id for check in self.checks])
        judged: dict[str, CheckResult] = {}
        evidence: dict[str, Evidence] = {}  # each check's, where it is kept
        yielded: set[str] = set()
        passes = Passes()
        with contextlib.ExitStack() as stack:
            processes = self.processes or stack.enter_context(LearnerProcesses(self.limits or Limits()))
            for checks, stood in self._passes(judged, passes):
                labels = {check_id: self._labels(parts) for check_id, parts in stood.items()}
                outcomes = processes.outcomes(self.package, checks, self.reference, labels) if checks else iter(())
                for check, outcome in stack.enter_context(contextlib.closing(outcomes)):
                    if seal.broken():
                        continue  # judged from nothing: the run raises ReferenceTampered once the lanes end
                    seen = Evidence(check, outcome, self.reference)
                    judged[check.id] = self._stood_in(judge(seen), stood.get(check.id, []), outcome.reply.stood_in)
                    passes.pending.discard(check.id)
                    if self.keep_evidence:
                        evidence[check.id] = seen
                    yield from self._newly_final(judged, yielded, passes)
                yield from self._newly_final(judged, yielded, passes)  # a wave's checks that needed no stand-in
        problem = seal.broken()
        if problem:
            raise ReferenceTampered(problem)
        results = with_failing_parts([judged[check.id] for check in self.checks], self.registered)
        seed, line = self.reference.meta.get("seed", 0), sandbox_line(processes.limits)
        report = Report(self.reference.kind, str(self.package), results, self.reference.fallback_reason, seed, line)
        self.grading = Grading(report, evidence)

    def _passes(self, judged: dict[str, CheckResult], passes: Passes) -> Iterator[tuple[list[Check], Stood]]:
        """The checks to grade, and for each the parts the grader's own replace: every check, none replaced; then,
        once that pass has ended, the checks to grade again with the grader's own parts (`to_stand_in`), in waves.
        A check waits for the waves of the parts it uses, whose results there (a pass, where only their own parts
        failed) decide which parts the grader stands in for."""
        yield self.checks, {}
        if not judged.keys() >= {check.id for check in self.checks}:
            return  # the entry did not verify: nothing more is judged
        waiting = [check for check in self.checks if to_stand_in(judged[check.id], judged, self.graph)]
        passes.first_ended, passes.pending = True, {check.id for check in waiting}
        while waiting:
            wave = [check for check in waiting if not self.parts[check.id] & {other.id for other in waiting}]
            waiting = [check for check in waiting if check not in wave]
            stood = {check.id: parts for check in wave if (parts := to_stand_in(judged[check.id], judged, self.graph))}
            passes.pending -= {check.id for check in wave if check.id not in stood}  # final as they are
            yield [check for check in wave if check.id in stood], stood

    def _labels(self, parts: list[str]) -> list[str]:
        """The parts the learner's process replaces, by their names there (wire.StandInPart)."""
        return [stand_in_part(self.graph[part]) for part in replaced(parts, self.graph)]

    def _waits(self, check_id: str, judged: dict[str, CheckResult], passes: Passes) -> bool:
        """Whether the check's result waits for a second pass: while the first pass runs, where it fails while parts
        the grader has its own of fail too (`to_stand_in`, its parts judged); after, where that pass is to come."""
        if passes.first_ended:
            return check_id in passes.pending
        return bool(to_stand_in(judged[check_id], judged, self.graph))

    def _stood_in(self, result: CheckResult, parts: list[str], files: list[wire.StoodIn]) -> CheckResult:
        """A second pass's result: a note first, and the parts stood in for, which its message does not name again;
        nor does it name the parts of a file that did not import, whose stand-in its notes name already."""
        imported = {stood.file for stood in files}  # mostly none: then no part is looked up
        uses = used_by(result.id, self.graph) if imported else set()
        whole = [part for part in self.graph if part in uses and f"{self.graph[part].target.file}.py" in imported]
        if not parts:
            return replace(result, stood_in=whole) if whole else result
        note = stood_in_note(replaced(parts, self.graph), self.graph)
        return replace(result, stood_in=[*parts, *whole], notes=[note, *result.notes])

    def _newly_final(self, judged: dict[str, CheckResult], yielded: set[str], passes: Passes) -> list[CheckResult]:
        """The results final now and not yet yielded (`yielded` then holds them): it and each part it uses judged, and
        none of them waiting for a second pass (a part's decides what a passing check's note says of it)."""
        ready = [
            check.id
            for check in self.checks
            if check.id in judged
            and check.id not in yielded
            and self.parts[check.id] <= judged.keys()
            and not any(self._waits(one, judged, passes) for one in (check.id, *self.parts[check.id]))
        ]
        yielded.update(ready)
        return with_failing_parts([judged[check_id] for check_id in ready], self.registered, among=judged)
