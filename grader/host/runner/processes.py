"""The learner's side of a grading session: its lanes, their scratch directories and log, and the workers'
life: started on entering, paused while the reference is built, ended on leaving or on Ctrl-C."""

from __future__ import annotations

import contextlib
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from grader.checks import Check
from grader.host.refcache import ReferenceData
from grader.host.runner.lanes import GPT2_LANE, GRACE, Lane, lanes_for
from grader.host.runner.replies import Outcome
from grader.host.runner.request import Limits
from grader.host.runner.worker import LEARNER_COMMAND


class LearnerProcesses:
    """A lane (a worker and its checks) for the checks that read GPT-2's data and, where they can run beside
    it, one for those that do not. Entered, it starts the first lane's worker at once: torch is imported
    while the grader reads the reference. Each worker runs `worker_command`: the learner's process, or a
    stand-in that speaks the wire format (the unit tier's tests/fake_worker.py)."""

    def __init__(self, limits: Limits | None = None, worker_command: tuple[str, ...] = LEARNER_COMMAND):
        self.limits = (limits or Limits()).settled()
        self.worker_command = worker_command
        # A check's process may leave files the grader's user cannot remove (it ran as nobody, or was killed
        # mid-write): they are left to the system's temporary directory rather than fail the report.
        self.scratch = tempfile.TemporaryDirectory(prefix="gpt2-grader-", ignore_cleanup_errors=True)
        self.log = open(Path(self.scratch.name) / "learner.log", "w")  # what the workers print
        self.lanes: dict[str, Lane] = {}

    def __enter__(self) -> LearnerProcesses:
        self.lane(GPT2_LANE).start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.stop()
        self.log.close()
        self.scratch.cleanup()

    def lane(self, name: str) -> Lane:
        if name not in self.lanes:
            self.lanes[name] = Lane(name, self.limits, Path(self.scratch.name), self.log, self.worker_command)
        return self.lanes[name]

    def stop(self) -> None:
        """End every worker now; the next check starts one."""
        for lane in self.lanes.values():
            lane.close()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No worker runs inside: the reference's builder does, whose memory would otherwise add to theirs.
        The workers that ran before start again after, importing torch while the new entry is read."""
        running = [lane for lane in self.lanes.values() if lane.worker is not None]
        self.stop()
        yield
        for lane in running:
            lane.start()

    def run(self, package: Path, checks: list[Check], reference: ReferenceData) -> dict[str, Outcome]:
        """Every check's outcome, in order; a second lane runs in a thread beside the first."""
        lanes = lanes_for(checks, self.limits)
        (first, first_checks), *others = lanes.items()
        outcomes: dict[str, Outcome] = {}
        failures: list[BaseException] = []

        def run_lane(name: str, group: list[Check]) -> None:
            try:
                outcomes.update(self.lane(name).run(package, group, reference))
            except BaseException as error:  # raised again in the grader's main thread
                failures.append(error)

        threads = [threading.Thread(target=run_lane, args=lane, daemon=True) for lane in others]
        try:
            for thread in threads:
                thread.start()
            outcomes.update(self.lane(first).run(package, first_checks, reference))
            for thread in threads:
                thread.join()
        except BaseException:
            self._cancel(threads)
            raise
        if failures:
            raise failures[0]
        return {check.id: outcomes[check.id] for check in checks}

    def _cancel(self, threads: list[threading.Thread]) -> None:
        """Ctrl-C: the workers go now, and every lane's thread ends before the scratch does."""
        for lane in self.lanes.values():
            lane.cancelled = True
        self.stop()
        for thread in threads:
            thread.join(timeout=GRACE)
        self.stop()  # a worker a lane's thread started meanwhile
