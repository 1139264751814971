"""The learner's process started, with what it needs from the grader: its command, an environment without the
CI job's secrets, and the session's scratch directory and log it writes to (`Started`).

Standard library only (and a leaf of grader.shared): `grade`'s entry point (`grader.host.main`) imports this and
starts the first worker before it imports the rest of the grader.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from grader.shared import twin
from grader.shared.paths import REPO_ROOT

# What learner code must not read from its environment: the CI job's files (outputs, summaries)
# and anything that looks like a credential.
SECRET = re.compile(r"^(GITHUB_|ACTIONS_|RUNNER_)|TOKEN|SECRET|PASSWORD|CREDENTIAL|_KEY$", re.IGNORECASE)
# The learner's process. Another command that speaks the wire format may stand in for it (the unit tier's
# fake worker, tests/support/fake_worker.py): `LearnerProcesses(worker_command=...)`.
LEARNER_COMMAND = (sys.executable, "-m", "grader.learner")
FORK_SWITCH = "GPT2_GRADER_FORK"  # 0: run checks without forks on Linux too, as on macOS and Windows


def forks_here() -> bool:
    """Whether checks run in forks of the worker: on Linux, where fork after importing torch is
    well-trodden (DataLoader), unless GPT2_GRADER_FORK=0. The only place that reads the switch."""
    return sys.platform == "linux" and os.environ.get(FORK_SWITCH) != "0"


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def twins_here() -> bool:
    """Whether a first worker forks a twin for a second lane (`grader.shared.twin`): where checks run in forks
    and two lanes may run (`grader.host.runner.lanes.parallel`)."""
    return forks_here() and usable_cores() >= 2


def learner_environment() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if not SECRET.search(key)}


def start_learner(command: tuple[str, ...], log) -> subprocess.Popen:
    """The learner's process: requests on its stdin, answers on its stdout, the rest of what it prints to `log`."""
    return start_learners(command, log, with_twin=False)[0]


def start_learners(command: tuple[str, ...], log, with_twin: bool) -> tuple[subprocess.Popen, Twin | None]:
    """The learner's process, and where asked, the grader's side of the twin it forks once torch is imported."""
    if not with_twin:
        return _popen(command, log, learner_environment(), ()), None
    requests_read, requests_write = os.pipe()
    answers_read, answers_write = os.pipe()
    inherited = (requests_read, answers_write)
    try:
        environment = learner_environment() | {twin.VARIABLE: ",".join(map(str, inherited))}
        process = _popen(command, log, environment, inherited)
    except BaseException:
        for fd in (requests_write, answers_read):
            os.close(fd)
        raise
    finally:
        for fd in inherited:
            os.close(fd)
    return process, Twin(requests_write, answers_read)


def _popen(command: tuple[str, ...], log, environment: dict[str, str], inherited: tuple[int, ...]) -> subprocess.Popen:
    return subprocess.Popen(
        list(command),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        cwd=REPO_ROOT,
        text=True,
        env=environment,
        pass_fds=inherited,
    )


class Twin:
    """The grader's side of a twin (`grader.shared.twin`): its pipes, and the process itself once its first line
    has named it (`announced`). Stands in for a `subprocess.Popen` wherever a worker's process is used; as no child
    of the grader, its exit status cannot be known (`returncode` stays None)."""

    returncode = None

    def __init__(self, requests_fd: int, answers_fd: int):
        self.stdin = os.fdopen(requests_fd, "w")
        self.stdout = os.fdopen(answers_fd, "r")
        self.pidfd: int | None = None

    def announced(self, pid: int) -> None:
        """The twin said its pid before any learner code ran: held from now on by a pidfd, which a later process
        of the same pid cannot take over."""
        with contextlib.suppress(OSError):  # already gone: nothing to wait for or to kill
            self.pidfd = os.pidfd_open(pid)

    def poll(self) -> int | None:
        return None if self.pidfd is not None and not select.select([self.pidfd], [], [], 0)[0] else 0

    def wait(self, timeout: float | None = None) -> None:
        if self.pidfd is not None and not select.select([self.pidfd], [], [], timeout)[0]:
            raise subprocess.TimeoutExpired("twin", timeout or 0)

    def kill(self) -> None:
        if self.pidfd is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)

    def close(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


def end_learner(process: subprocess.Popen | Twin) -> None:
    """The learner's process killed if it still runs, waited for, and its pipes closed."""
    if process.poll() is None:
        process.kill()
    process.wait()
    for stream in (process.stdin, process.stdout):
        with contextlib.suppress(OSError):  # BrokenPipeError among them
            if stream:
                stream.close()
    if isinstance(process, Twin):
        process.close()


class Started:
    """What a grading session starts with: its scratch directory, its log and (`worker`) its first learner's
    process, started at once, with its twin where two lanes may run (`twins_here`). `LearnerProcesses` uses them,
    taking the process for its first lane and the twin for its second; `close` ends what nobody took and removes the
    rest, once, whoever calls it first."""

    def __init__(self, command: tuple[str, ...] = LEARNER_COMMAND, worker: bool = True):
        # A check's process may leave files the grader's user cannot remove (it ran as nobody, or was killed
        # mid-write): they are left to the system's temporary directory rather than fail the report.
        self.scratch = tempfile.TemporaryDirectory(prefix="gpt2-grader-", ignore_cleanup_errors=True)
        self.log = open(Path(self.scratch.name) / "learner.log", "w")  # what the workers print
        self.command = command
        self.process, self.twin = start_learners(command, self.log, twins_here()) if worker else (None, None)

    def take_process(self) -> subprocess.Popen | None:
        """The first worker's process, once; None if there was none."""
        process, self.process = self.process, None
        return process

    def take_twin(self) -> Twin | None:
        """The first worker's twin, once; None if there was none."""
        twin, self.twin = self.twin, None
        return twin

    def close(self) -> None:
        # Never taken: the arguments asked for no grading after all, or were wrong; a twin, one lane was enough.
        for process in (self.take_process(), self.take_twin()):
            if process is not None:
                end_learner(process)
        self.log.close()
        self.scratch.cleanup()
