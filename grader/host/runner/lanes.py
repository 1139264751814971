"""A lane: one worker process and the checks it runs, one at a time; and which checks go to which lane."""

from __future__ import annotations

import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from grader.checks import Check
from grader.host.launch import LEARNER_COMMAND, Twin, usable_cores
from grader.host.refcache import ReferenceData
from grader.host.runner import preflight
from grader.host.runner.device_truth import on_the_cpu_if_misled
from grader.host.runner.replies import Outcome, outcome_of
from grader.host.runner.request import Limits, request_for
from grader.host.runner.rounds import SECOND_ROUND, summed, undecided
from grader.host.runner.scratch import remove_scratch, scratch_filesystem
from grader.host.runner.worker import OutOfStep, Worker, WorkerGone
from grader.shared import wire

GRACE = 30.0  # a fork server answers for a hung check itself; this is for a hung fork server
EXIT_WAIT = 2.0  # seconds for a worker whose stdout closed to exit, before it is said to have hung
GPT2_LANE, STAND_IN_LANE = "gpt2", "stand-ins"
OnOutcome = Callable[[Check, Outcome], None]
StandIns = Mapping[str, Sequence[str]]  # check id -> the parts the grader's own replace in that check


class Lane:
    """One worker process and the checks it runs, one at a time; the worker is replaced when it dies or
    hangs. Where checks run in forks (Linux), the worker never imports the learner's package and serves
    every grading of its `LearnerProcesses` (`grade --watch`'s regrades), paying for torch's import once."""

    def __init__(
        self, name: str, limits: Limits, scratch: Path, log, worker_command: tuple[str, ...] = LEARNER_COMMAND
    ):
        self.name, self.limits, self.scratch, self.log = name, limits, scratch, log
        self.worker_command = worker_command
        self.worker: Worker | None = None
        self.ready = False  # the worker has said wire.READY
        self.cancelled = False  # no more checks: the grading was interrupted
        self.requests: Counter[str] = Counter()  # of each kind: check, preflight

    def start(self, process: subprocess.Popen | Twin | None = None) -> None:
        """Start the worker now (it imports torch), so that it is ready by the first check; or adopt `process`, the
        worker's command started earlier (`launch.Started`), or the twin another worker forks (`launch.Twin`)."""
        if self.worker is None:
            self.worker, self.ready = Worker(self.log, self.worker_command, process), False

    def run(
        self,
        package: Path,
        schedule: Schedule,
        reference: ReferenceData,
        on_outcome: OnOutcome,
        unfinished: list[wire.StoodIn] | None = None,
        stand_ins: StandIns | None = None,
    ) -> None:
        """Run every check this lane takes from the `Schedule` it shares with the other lanes, handing each check and
        its outcome to `on_outcome` as soon as it is known; `unfinished`, the files the preflight found to hang;
        `stand_ins`: check id -> the parts the grader's own replace in that check."""
        while (check := schedule.take(self.name)) is not None:
            try:
                if self.cancelled:  # the caller left early (Ctrl-C, say): this lane's thread ends too
                    raise WorkerGone()
                stood_in = (stand_ins or {}).get(check.id, ())
                outcome = self._outcome(package, check, reference, unfinished or [], stood_in)
            finally:
                schedule.done(check)
            on_outcome(check, outcome)
        if not self.limits.fork:  # without forks the learner's modules stay imported in the worker: a fresh
            self.close()  # one for the next package, importing torch while this one's verdicts are judged
            self.start()

    def _ready_worker(self) -> Worker:
        """The worker, started and done importing torch, whose time is no check's."""
        if self.cancelled:
            raise WorkerGone()
        self.start()
        assert self.worker is not None
        if not self.ready:
            self.worker.wait_ready()
            self.ready = True
        return self.worker

    def _outcome(
        self,
        package: Path,
        check: Check,
        reference: ReferenceData,
        unfinished: list[wire.StoodIn],
        stand_ins: Sequence[str],
    ) -> Outcome:
        """The check run; not where its file does not finish importing, which the preflight paid for."""
        stood = preflight.needs(check.target.file, unfinished)
        if stood:
            return preflight.unfinished_outcome(stood)
        return self._run_one(package, check, reference, unfinished, stand_ins)

    def imports(self, package: Path, checks: list[Check]) -> list[wire.StoodIn]:
        """The package's files whose import does not finish, of those the checks grade and those they import
        (`preflight`); none looked for where checks do not fork."""
        if not self.limits.fork or not checks:
            return []
        files = sorted({check.target.file for check in checks})
        return preflight.unfinished_imports(package, files, self.limits, self._stopped)

    def _stopped(self, request: wire.Request) -> wire.StoodIn | None:
        """Where one preflight was stopped, read from its scratch; None where it finished."""
        scratch = self._scratch("preflight")
        try:
            with scratch_filesystem(scratch):
                answer, _ = self._ask(replace(request, scratch=str(scratch)))
                return preflight.stopped_at(scratch, Path(request.package)) if answer.ending == "timeout" else None
        finally:
            remove_scratch(scratch)

    def _run_one(
        self,
        package: Path,
        check: Check,
        reference: ReferenceData,
        unfinished: list[wire.StoodIn],
        stand_ins: Sequence[str] = (),
    ) -> Outcome:
        request = request_for(package, check, reference, self._scratch(), self.limits, stand_ins)
        request = replace(request, unfinished=unfinished)
        outcome = self._asked(request)
        request, outcome = on_the_cpu_if_misled(check, request, outcome, reference, self._asked_anew)
        again = undecided(check, outcome, request.cases, reference)
        if not again:
            return outcome
        second = summed(outcome, self._asked_anew(replace(request, round=SECOND_ROUND, cases=again)), again)
        return replace(second, device_fault=outcome.device_fault)

    def _asked_anew(self, request: wire.Request) -> Outcome:
        return self._asked(replace(request, scratch=str(self._scratch())))

    def _scratch(self, kind: str = "check") -> Path:
        """A new directory for one request: the only one its check (or preflight) may write."""
        self.requests[kind] += 1
        scratch = self.scratch / f"{kind}-{self.name}-{self.requests[kind]}"
        scratch.mkdir(mode=0o700)
        return scratch

    def _asked(self, request: wire.Request) -> Outcome:
        scratch = Path(request.scratch)
        try:
            with scratch_filesystem(scratch):
                answer, seconds = self._ask(request)
                self.keep_from_scratch(request, answer)
                return outcome_of(answer, scratch, request.cases, seconds, self.limits.trace)
        finally:
            remove_scratch(scratch)

    def keep_from_scratch(self, request: wire.Request, answer: wire.WorkerAnswer) -> None:
        """What a lane keeps of the request's scratch before it is removed, beyond its outcome: nothing here (the
        playground's lane keeps where a request stopped at its time)."""

    def _ask(self, request: wire.Request) -> tuple[wire.WorkerAnswer, float]:
        """The fork server's answer, or the grader's own where the worker did not start, hung or died; and the
        check's seconds (a check that timed out took all of its time)."""
        try:
            worker = self._ready_worker()
        except (TimeoutError, WorkerGone, OutOfStep) as error:
            # Its stdout closed (WorkerGone): it is ending, if not quite ended yet. Else it hung or said something else.
            within = EXIT_WAIT if isinstance(error, WorkerGone) and not self.cancelled else 0.0
            reason = self.worker.exit_reason() if self.worker and self.worker.ended(within) else "it hung"
            self.close()
            return wire.WorkerAnswer("crashed", f"the learner's process did not start: {reason}"), 0.0
        started = time.monotonic()
        try:
            answer = worker.ask(request, answer_limit(request))
        except TimeoutError:
            self.close()
            answer = wire.WorkerAnswer("timeout", f"no answer within {request.timeout:g} s (an infinite loop?)")
        except WorkerGone:
            answer = wire.WorkerAnswer("crashed", worker.exit_reason())
            self.close()
        except OutOfStep:  # the next line could be this check's answer, read as the next check's: a fresh worker
            self.close()
            answer = wire.WorkerAnswer("crashed", "the learner's process answered something unreadable")
        return answer, request.timeout if answer.ending == "timeout" else time.monotonic() - started

    def close(self) -> None:
        if self.worker:
            self.worker.close()
            self.worker = None


def answer_limit(request: wire.Request) -> float:
    """How long the grader waits: a fork server times its checks itself, and gets GRACE more;
    a check that runs in the worker has only its own timeout, then the worker is killed."""
    return request.timeout + GRACE if request.fork else request.timeout


class Schedule:
    """The checks of one grading, handed to the lanes that share it as each lane comes free, in order, under two
    rules. Two exclusive checks (all but those the reference says may run beside any other, `ReferenceData.beside`:
    most of GPT-2's are exclusive) never run at the same time: that makes two lanes safe. A check with warm imports
    runs in the lane that imported them first (`Run.warm_imports`): they are paid once. A lane takes the first
    exclusive check it may, else the first other one (they run beside the chain of exclusive ones, which is the
    grading's longest); it waits while only checks it may not take are left."""

    def __init__(self, checks: list[Check], beside: frozenset[str]):
        self.pending = list(checks)
        self.exclusive = {check.id for check in checks if check.id not in beside}
        self.exclusive_running = 0
        self.started = False  # the first lane has taken its first check
        self.imported_by: dict[str, str] = {}  # a warm import -> the lane whose worker imported it
        self.changed = threading.Condition()

    def take(self, lane: str = GPT2_LANE) -> Check | None:
        """The next check for the calling lane; None when every check has been taken. The first goes to the first
        lane (GPT2_LANE), whose worker the session started first."""
        with self.changed:
            while self.pending:
                allowed = [c for c in self.pending if self._may_take(lane, c)]
                check = next((c for c in allowed if c.id in self.exclusive), allowed[0] if allowed else None)
                if check is not None and (self.started or lane == GPT2_LANE):
                    self.pending.remove(check)
                    self.exclusive_running += check.id in self.exclusive
                    self.imported_by |= {name: lane for name in check.run.warm_imports if name not in self.imported_by}
                    if not self.started:  # a lane that asked before the first may take a check now
                        self.started = True
                        self.changed.notify_all()
                    return check
                self.changed.wait()
            return None

    def _may_take(self, lane: str, check: Check) -> bool:
        waits = check.id in self.exclusive and self.exclusive_running
        return not waits and all(self.imported_by.get(name, lane) == lane for name in check.run.warm_imports)

    def done(self, check: Check) -> None:
        with self.changed:
            self.exclusive_running -= check.id in self.exclusive
            self.changed.notify_all()

    def cancel(self) -> None:
        """No more checks for any lane: a lane that waits for one ends."""
        with self.changed:
            self.pending.clear()
            self.changed.notify_all()


def parallel(checks: list[Check], limits: Limits, beside: frozenset[str] | None = None) -> bool:
    """Whether the checks run in two lanes sharing one `Schedule`: where checks run in forks, two cores are free
    and two of the checks may run at the same time (at most one of them exclusive: `Schedule`). With `beside` None
    (the reference not yet read), whether they might."""
    might = limits.fork and len(checks) >= 2 and usable_cores() >= 2
    return bool(might and (beside is None or any(check.id in beside for check in checks)))
