"""The parent side of the learner's process: requests out, replies and tensors back, with timeouts.

One worker process serves the checks in turn (on Linux each in a fork of its own, see
`learner`). The worker enforces each check's timeout; should the worker itself hang or die, that
check gets `timeout` or `error` and a fresh worker serves the rest, so one check never costs the
others.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .checks import Check
from .learner import FORKS
from .refcache import ReferenceData

DEFAULT_TIMEOUT = 60.0  # seconds per check; the whole model's check takes a few on a laptop
DEFAULT_MEMORY_LIMIT_GB = 6.0  # address space a check may add; the whole model needs about 1.5
GRACE = 30.0  # the worker answers for a hung check itself; this is for a hung worker


@dataclass
class Outcome:
    """What came back from the learner's process for one check."""

    status: str  # ran | todo | error | weights | forbidden | timeout | crashed
    reply: dict = field(default_factory=dict)
    outputs: dict = field(default_factory=dict)
    seconds: float = 0.0
    traced: bool = False  # --trace: the reply records every tensor the learner's code named


class WorkerGone(Exception):
    pass


# Files through which a CI job takes outputs, environment and summaries from its steps: the
# learner's code must not write its own grade into them.
CI_FILES = ("GITHUB_OUTPUT", "GITHUB_ENV", "GITHUB_PATH", "GITHUB_STATE", "GITHUB_STEP_SUMMARY")


def learner_environment() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key not in CI_FILES}


class Worker:
    def __init__(self, reference: ReferenceData, log, memory_limit_gb: float):
        reply_read, reply_write = os.pipe()
        memory = str(int(memory_limit_gb * 2**30))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "grader.learner", str(reference.weights_path), str(reference.inputs_path), str(reply_write), memory],
            stdin=subprocess.PIPE, stdout=log, stderr=log, pass_fds=(reply_write,), cwd=Path(__file__).resolve().parent.parent, text=True, env=learner_environment(),
        )
        os.close(reply_write)
        self.replies = os.fdopen(reply_read, "r")

    def ask(self, request: dict, timeout: float) -> dict:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            raise WorkerGone() from None
        ready, _, _ = select.select([self.replies], [], [], timeout)
        if not ready:
            raise TimeoutError()
        line = self.replies.readline()
        if not line:
            raise WorkerGone()
        return json.loads(line)

    def exit_reason(self) -> str:
        code = self.process.wait(timeout=5)
        if code < 0:
            import signal

            return f"the learner's process was killed by {signal.Signals(-code).name}"
        return f"the learner's process exited with code {code}"

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.replies.close()
        if self.process.stdin:
            try:
                self.process.stdin.close()
            except BrokenPipeError:
                pass


@dataclass(frozen=True)
class Limits:
    timeout: float = DEFAULT_TIMEOUT  # seconds per check
    memory_gb: float = DEFAULT_MEMORY_LIMIT_GB  # 0: no limit
    fast_init: bool = True  # skip the random initialisation the reference weights overwrite
    trace: bool = False  # record every tensor the learner's code names, for `grade --trace`


def request_for(package: Path, check: Check, reference: ReferenceData, out: Path, limits: Limits) -> dict:
    target = check.target
    return {
        "package": str(package),
        "check": check.id,
        "target": {"file": target.file, "name": target.name, "method": target.method, "driver": target.driver, "fast_init": limits.fast_init},
        "cases": reference.cases(check.id),
        "watch_inputs": check.watch_inputs,
        "out": str(out),
        "timeout": limits.timeout,
        "capture": capture_request(check, limits.trace),
    }


def capture_request(check: Check, trace: bool) -> dict | None:
    """What the learner's process records: the check's own needs for diagnosis, plus every named
    tensor under --trace. Values travel back only when a diagnosis compares them."""
    modes = set(check.capture) | ({"locals"} if trace else set())
    return {"modes": sorted(modes), "keep": list(check.capture)} if modes else None


class LearnerProcesses:
    """The learner's side of grading for one reference: a worker process that runs checks, replaced
    when it dies or hangs. Where checks run in forks (Linux), one worker serves any number of
    packages, so grading many pays for importing torch once."""

    def __init__(self, reference: ReferenceData, limits: Limits = Limits()):
        self.reference, self.limits = reference, limits
        self.scratch = tempfile.TemporaryDirectory(prefix="gpt2-grader-")
        self.log = open(Path(self.scratch.name) / "learner.log", "w")  # what the learner's code prints
        self.worker: Worker | None = None
        self.requests = 0

    def __enter__(self) -> LearnerProcesses:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._drop_worker()
        self.log.close()
        self.scratch.cleanup()

    def run(self, package: Path, checks: list[Check]) -> dict[str, Outcome]:
        """Every check's outcome, in order."""
        outcomes = {check.id: self._run_one(package, check) for check in checks}
        if not FORKS:
            self._drop_worker()  # without forks the learner's modules stay imported in the worker
        return outcomes

    def _run_one(self, package: Path, check: Check) -> Outcome:
        from safetensors.numpy import load_file

        self.worker = self.worker or Worker(self.reference, self.log, self.limits.memory_gb)
        self.requests += 1
        out = Path(self.scratch.name) / f"{self.requests}.safetensors"
        started = time.monotonic()
        try:
            reply = self.worker.ask(request_for(package, check, self.reference, out, self.limits), self.limits.timeout + GRACE)
        except TimeoutError:
            self._drop_worker()
            return Outcome("timeout", {"error": f"no answer within {self.limits.timeout:g} s (an infinite loop?)"}, seconds=self.limits.timeout)
        except WorkerGone:
            reason = self.worker.exit_reason()
            self._drop_worker()
            return Outcome("crashed", {"error": reason}, seconds=time.monotonic() - started)
        outputs = load_file(str(out)) if out.exists() else {}
        out.unlink(missing_ok=True)
        return Outcome(reply["status"], reply, outputs, time.monotonic() - started, self.limits.trace)

    def _drop_worker(self) -> None:
        if self.worker:
            self.worker.close()
            self.worker = None


def run_checks(package: Path, checks: list[Check], reference: ReferenceData, limits: Limits = Limits()) -> dict[str, Outcome]:
    with LearnerProcesses(reference, limits) as processes:
        return processes.run(package, checks)
