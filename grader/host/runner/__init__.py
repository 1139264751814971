"""The grader's side of the learner's process: requests out, validated replies and tensors back.

One worker process (`grader.learner`) serves the checks in turn; on Linux each runs in a confined
fork of its own, unless `GPT2_GRADER_FORK=0` asks for the path of macOS and Windows, where checks
run in the worker itself, the worker is replaced for each package, and a check's timeout is
the grader's to enforce (`forks_here` decides, here only; each request carries the decision).
Everything a check's process leaves in its scratch directory is read as hostile, so a malformed
or forged answer is that check's error, never a crash of the grading. Should the worker itself
hang or die, that check gets `timeout` or `crashed` and a fresh worker serves the rest.

One module per job: `request` (the limits a check runs under, the request it is sent), `worker`
(the learner's process started, asked, stopped), `scratch` (the directory a check may write),
`replies` (what a check left, read into an `Outcome`), `lanes` (a worker and the checks it takes; the
`Schedule` two lanes share), `processes` (the lanes of a session, and the workers' life: `LearnerProcesses`).
"""

from grader.host.launch import FORK_SWITCH, forks_here
from grader.host.runner.lanes import GPT2_LANE, STAND_IN_LANE, Schedule, parallel
from grader.host.runner.processes import LearnerProcesses
from grader.host.runner.replies import MAX_OUTPUTS_BYTES, Outcome, printed_lines, read_outputs
from grader.host.runner.request import Limits

__all__ = [
    "FORK_SWITCH",
    "GPT2_LANE",
    "MAX_OUTPUTS_BYTES",
    "STAND_IN_LANE",
    "Schedule",
    "LearnerProcesses",
    "Limits",
    "Outcome",
    "forks_here",
    "parallel",
    "printed_lines",
    "read_outputs",
]
