"""The learner's process started, with what it needs from the grader: its command, an environment without the
CI job's secrets, and the session's scratch directory and log it writes to (`Started`).

Standard library only (and a leaf of grader.shared): `grade`'s entry point (`grader.host.main`) imports this and
starts the first worker before it imports the rest of the grader.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from grader.shared.paths import REPO_ROOT

# What learner code must not read from its environment: the CI job's files (outputs, summaries)
# and anything that looks like a credential.
SECRET = re.compile(r"^(GITHUB_|ACTIONS_|RUNNER_)|TOKEN|SECRET|PASSWORD|CREDENTIAL|_KEY$", re.IGNORECASE)
# The learner's process. Another command that speaks the wire format may stand in for it (the unit tier's
# fake worker, tests/fake_worker.py): `LearnerProcesses(worker_command=...)`.
LEARNER_COMMAND = (sys.executable, "-m", "grader.learner")


def learner_environment() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if not SECRET.search(key)}


def start_learner(command: tuple[str, ...], log) -> subprocess.Popen:
    """The learner's process: requests on its stdin, answers on its stdout, the rest of what it prints to `log`."""
    return subprocess.Popen(
        list(command),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        cwd=REPO_ROOT,
        text=True,
        env=learner_environment(),
    )


def end_learner(process: subprocess.Popen) -> None:
    """The learner's process killed if it still runs, waited for, and its pipes closed."""
    if process.poll() is None:
        process.kill()
    process.wait()
    for stream in (process.stdin, process.stdout):
        with contextlib.suppress(OSError):  # BrokenPipeError among them
            if stream:
                stream.close()


class Started:
    """What a grading session starts with: its scratch directory, its log and (`worker`) its first learner's
    process, started at once. `LearnerProcesses` uses them, taking the process for its first lane; `close` ends
    what nobody took and removes the rest, once, whoever calls it first."""

    def __init__(self, command: tuple[str, ...] = LEARNER_COMMAND, worker: bool = True):
        # A check's process may leave files the grader's user cannot remove (it ran as nobody, or was killed
        # mid-write): they are left to the system's temporary directory rather than fail the report.
        self.scratch = tempfile.TemporaryDirectory(prefix="gpt2-grader-", ignore_cleanup_errors=True)
        self.log = open(Path(self.scratch.name) / "learner.log", "w")  # what the workers print
        self.command = command
        self.process: subprocess.Popen | None = start_learner(command, self.log) if worker else None

    def take_process(self) -> subprocess.Popen | None:
        """The first worker's process, once; None if there was none."""
        process, self.process = self.process, None
        return process

    def close(self) -> None:
        if self.process is not None:  # never taken: the arguments asked for no grading after all, or were wrong
            end_learner(self.process)
            self.process = None
        self.log.close()
        self.scratch.cleanup()
