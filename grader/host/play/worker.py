"""The learner's side of the playground: its package run in the grading's own learner processes, confined as a check
is, through a lane that also reads where a request stopped at its time was looping (`drivers.play`'s stacks)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from grader.checks import Check
from grader.host.refcache import ReferenceData
from grader.host.runner import GPT2_LANE, LearnerProcesses, Outcome, Schedule
from grader.host.runner.lanes import Lane
from grader.shared import wire
from grader.shared.formats import PLAY_STACKS

FRAME = re.compile(r'  File "(?P<path>[^"\n]+)", line (?P<line>\d{1,7}) in (?P<function>\S+)')  # faulthandler's


def stopped_in(scratch: Path, package: Path) -> wire.Place | None:
    """The innermost place in the learner's files of the stacks written before the request was stopped."""
    try:
        text = (scratch / PLAY_STACKS).read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():  # faulthandler lists the most recent call first
        frame = FRAME.fullmatch(line)
        if frame and Path(frame["path"]).resolve().is_relative_to(package.resolve()):
            return wire.Place(Path(frame["path"]).name, int(frame["line"]), function=frame["function"])
    return None


class PlayLane(Lane):
    """The grading's first lane, which also keeps where its last request stopped at its time (`stopped`)."""

    stopped: wire.Place | None = None

    def keep_from_scratch(self, request: wire.Request, answer: wire.WorkerAnswer) -> None:
        timed_out = answer.ending == "timeout"
        self.stopped = stopped_in(Path(request.scratch), Path(request.package)) if timed_out else None


def with_play_lane(processes: LearnerProcesses) -> PlayLane:
    """The processes' first lane made a `PlayLane`, before its worker starts."""
    lane = PlayLane(GPT2_LANE, processes.limits, processes.scratch, processes.log, processes.worker_command)
    processes.lanes[GPT2_LANE] = lane
    return lane


def run_one(
    lane: PlayLane, package: Path, check: Check, data: ReferenceData, stand_ins: Sequence[str]
) -> tuple[Outcome, wire.Place | None]:
    """One playground request's outcome, and where the learner's code was stopped at its time (None: it was not)."""
    found: list[Outcome] = []
    lane.run(
        package,
        Schedule([check], frozenset()),
        data,
        lambda _check, outcome: found.append(outcome),
        [],
        {check.id: stand_ins},
    )
    return found[0], lane.stopped
