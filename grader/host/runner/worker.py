"""The learner's process (`python -m grader.learner`) from the grader's side: started, sent one request a line,
read one answer a line, stopped."""

from __future__ import annotations

import queue
import signal
import subprocess
import threading

from grader.host.launch import LEARNER_COMMAND, Twin, end_learner, start_learner
from grader.shared import wire

STARTUP_LIMIT = 300.0  # seconds for a worker to import torch: a cold start on a slow laptop or Colab


class WorkerGone(Exception):
    pass


class OutOfStep(Exception):
    """The worker answered a line that is no `wire.WorkerAnswer`: its next line may be this check's answer,
    so it can no longer be trusted to answer the next check's request."""


class Worker:
    """The learner's process. It answers on its stdout (it sends what else is printed there to the
    log); a thread reads the answers, so waiting for one with a limit works on every platform
    (select takes no pipes on Windows)."""

    def __init__(self, log, command: tuple[str, ...] = LEARNER_COMMAND, process: subprocess.Popen | Twin | None = None):
        """A learner's process started now, or `process`, started early (`launch.Started`) by the same command, or
        the twin such a process forked (`launch.Twin`)."""
        self.process = process or start_learner(command, log)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read_answers, daemon=True).start()

    def _read_answers(self) -> None:
        assert self.process.stdout is not None
        line = "-"
        while line:
            try:
                line = self.process.stdout.readline(wire.MAX_REPLY_BYTES)
            except (OSError, ValueError):  # closed by `close`
                line = ""
            self.lines.put(line)  # "" at the end: the worker is gone

    def next_line(self, timeout: float) -> str:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError() from None
        if not line:
            raise WorkerGone()
        return line

    def wait_ready(self, timeout: float = STARTUP_LIMIT) -> None:
        """Wait until the worker has imported torch, so that a check's time is the check's own."""
        try:
            pid = wire.ready_pid(self.next_line(timeout))
        except ValueError:
            raise OutOfStep() from None
        if isinstance(self.process, Twin):
            self.process.announced(pid)

    def ask(self, request: wire.Request, timeout: float) -> wire.WorkerAnswer:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(request.to_json() + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):  # Windows says EINVAL for a pipe whose reader is gone
            raise WorkerGone() from None
        line = self.next_line(timeout)
        try:
            return wire.WORKER_ANSWER.validate_json(line)
        except ValueError:
            raise OutOfStep() from None

    def ended(self, within: float = 0.0) -> bool:
        """Whether the process has exited, waiting at most `within` seconds: its stdout closes a moment before."""
        try:
            self.process.wait(timeout=within)
        except subprocess.TimeoutExpired:
            return False
        return True

    def exit_reason(self) -> str:
        code = self.process.wait(timeout=5)
        if code is None:  # a twin, no child of the grader's
            return "the learner's process ended"
        if code < 0:
            return f"the learner's process was killed by {signal.Signals(-code).name}"
        return f"the learner's process exited with code {code}"

    def close(self) -> None:
        end_learner(self.process)
