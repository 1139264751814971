"""The learner's side of a grading session: its lanes, their scratch directories and log, and the workers'
life: started on entering, paused while the reference is built, ended on leaving or on Ctrl-C."""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterator
from pathlib import Path

from grader.checks import Check
from grader.host.launch import LEARNER_COMMAND, Started, Twin, end_learner, start_learners, twins_here
from grader.host.refcache import ReferenceData
from grader.host.runner.lanes import GPT2_LANE, GRACE, STAND_IN_LANE, Lane, Schedule, StandIns, parallel
from grader.host.runner.replies import Outcome
from grader.host.runner.request import Limits
from grader.shared import wire


class LearnerProcesses:
    """A lane (a worker and its checks) and, where two checks may run at once (`lanes.parallel`), a second one
    sharing the grading's `Schedule`. Entered, it starts the first lane's worker at once (`start_for` the second's,
    once the checks are known): torch is imported while the grader reads the reference. The second lane's worker
    is the first's twin where it has one (`grader.shared.twin`), else a process of its own. Each worker runs
    `worker_command`: the learner's process, or a stand-in that speaks the wire format (the unit tier's
    tests/support/fake_worker.py)."""

    def __init__(
        self,
        limits: Limits | None = None,
        worker_command: tuple[str, ...] = LEARNER_COMMAND,
        started: Started | None = None,
    ):
        """`started`: the scratch, log and first worker that `grade` started before importing the grader
        (`grader.host.main`); else the scratch and log are made here, and the first worker starts on entering."""
        self.limits = (limits or Limits()).settled()
        self.started = started or Started(worker_command, worker=False)
        self.worker_command = self.started.command
        self.scratch, self.log = Path(self.started.scratch.name), self.started.log
        self.lanes: dict[str, Lane] = {}
        self.unfinished: list[wire.StoodIn] = []  # the last grading's files whose import did not finish
        self.spare: Twin | None = None  # the first lane's worker's twin, until the second lane takes it

    def __enter__(self) -> LearnerProcesses:
        self.start_for([])
        return self

    def start_for(self, checks: list[Check]) -> None:
        """Start now the workers of the lanes `checks` may run in, before the reference says which of them may run
        beside others (the first lane's whatever the checks; its worker the one `grade` started early, where it
        did)."""
        self._start(lane_names(checks, self.limits))

    def _start(self, names: list[str]) -> None:
        """The workers of these lanes started where they are not running: the first lane's with a twin, which
        the second lane takes."""
        if GPT2_LANE in names and self.lane(GPT2_LANE).worker is None:
            self._end_spare()
            process, self.spare = self.started.take_process(), self.started.take_twin()
            if process is None:
                process, self.spare = start_learners(self.worker_command, self.log, twins_here())
            self.lane(GPT2_LANE).start(process)
        for name in names:
            lane = self.lane(name)
            if name != GPT2_LANE and lane.worker is None:
                spare, self.spare = self.spare, None
                lane.start(spare)

    def _end_spare(self) -> None:
        if self.spare is not None:
            end_learner(self.spare)
            self.spare = None

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.stop()
        self.started.close()

    def lane(self, name: str) -> Lane:
        if name not in self.lanes:
            self.lanes[name] = Lane(name, self.limits, self.scratch, self.log, self.worker_command)
        return self.lanes[name]

    def stop(self) -> None:
        """End every worker now; the next check starts one."""
        for lane in self.lanes.values():
            lane.close()
        self._end_spare()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No worker runs inside: the reference's builder does, whose memory would otherwise add to theirs.
        The workers that ran before start again after, importing torch while the new entry is read."""
        running = [name for name, lane in self.lanes.items() if lane.worker is not None]
        self.stop()
        yield
        self._start(running)

    def run(self, package: Path, checks: list[Check], reference: ReferenceData) -> dict[str, Outcome]:
        """Every check's outcome, in the checks' order (`outcomes`)."""
        arrived = dict((check.id, outcome) for check, outcome in self.outcomes(package, checks, reference))
        return {check.id: arrived[check.id] for check in checks}

    def outcomes(
        self, package: Path, checks: list[Check], reference: ReferenceData, stand_ins: StandIns | None = None
    ) -> Iterator[tuple[Check, Outcome]]:
        """Each check and its outcome as soon as it is known, while the lanes run on, each in a thread of its own;
        `stand_ins`: check id -> the parts of the learner's package the grader's own replace in that check.
        Where two lanes may run (`lanes.parallel`), each takes the next check it may from one `Schedule` (never two
        checks of GPT-2's data at once). Left before the last (Ctrl-C in the caller's thread, an error, an early
        `close`), it ends the workers and waits for the lanes' threads: this `LearnerProcesses` then runs no more."""
        names = lane_names(checks, self.limits, reference.beside)
        schedule = Schedule(checks, reference.beside)
        arrived: queue.SimpleQueue = queue.SimpleQueue()  # (check, outcome); a lane's name once it ends; its error

        def run_lane(name: str) -> None:
            try:
                self.lane(name).run(
                    package, schedule, reference, lambda *known: arrived.put(known), unfinished, stand_ins
                )
                arrived.put(name)
            except BaseException as error:  # raised again in the caller's thread
                schedule.cancel()
                arrived.put(error)

        # Where a worker is not warm, it imports torch now (a twin forks), while the first lane runs the preflight.
        self._start(names)
        if not stand_ins:  # once a grading, before any check: a hang at import costs one timeout
            self.unfinished = self.lane(GPT2_LANE).imports(package, checks)
        unfinished = self.unfinished  # a second pass (stand_ins) is of the same grading: its first pass's preflight
        threads = [threading.Thread(target=run_lane, args=(name,), daemon=True) for name in names]
        running = len(threads)
        try:
            for thread in threads:
                thread.start()
            while running:
                item = arrived.get()
                if isinstance(item, BaseException):
                    raise item
                if isinstance(item, str):
                    running -= 1
                else:
                    yield item
        finally:
            if running:  # left early: no lane takes another check, and the workers go now
                schedule.cancel()
                self._cancel(threads)

    def _cancel(self, threads: list[threading.Thread]) -> None:
        """The workers go now, and every lane's thread ends before the scratch does."""
        for lane in self.lanes.values():
            lane.cancelled = True
        self.stop()
        for thread in threads:
            thread.join(timeout=GRACE)
        self.stop()  # a worker a lane's thread started meanwhile


def lane_names(checks: list[Check], limits: Limits, beside: frozenset[str] | None = None) -> list[str]:
    """The lanes `checks` run in: the second only where they run two at a time (`lanes.parallel`)."""
    return [GPT2_LANE, STAND_IN_LANE] if parallel(checks, limits, beside) else [GPT2_LANE]
