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


class WorkerGone(Exception):
    pass


class Worker:
    def __init__(self, package: Path, reference: ReferenceData, log, memory_limit_gb: float):
        reply_read, reply_write = os.pipe()
        memory = str(int(memory_limit_gb * 2**30))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "grader.learner", str(package), str(reference.weights_path), str(reference.inputs_path), str(reply_write), memory],
            stdin=subprocess.PIPE, stdout=log, stderr=log, pass_fds=(reply_write,), cwd=Path(__file__).resolve().parent.parent, text=True,
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


def request_for(check: Check, reference: ReferenceData, out: Path, limits: Limits) -> dict:
    target = check.target
    return {
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


def run_checks(package: Path, checks: list[Check], reference: ReferenceData, limits: Limits = Limits()) -> dict[str, Outcome]:
    """Every check's outcome, in order; a worker that dies or hangs is replaced for the next check."""
    from safetensors.numpy import load_file

    outcomes: dict[str, Outcome] = {}
    timeout = limits.timeout
    with tempfile.TemporaryDirectory(prefix="gpt2-grader-") as scratch, open(Path(scratch) / "learner.log", "w") as log:
        worker = None
        for check in checks:
            worker = worker or Worker(package, reference, log, limits.memory_gb)
            out = Path(scratch) / f"{check.id}.safetensors"
            started = time.monotonic()
            try:
                reply = worker.ask(request_for(check, reference, out, limits), timeout + GRACE)
                outputs = load_file(str(out)) if out.exists() else {}
                outcomes[check.id] = Outcome(reply["status"], reply, outputs, time.monotonic() - started)
            except TimeoutError:
                worker.close()
                worker = None
                outcomes[check.id] = Outcome("timeout", {"error": f"no answer within {timeout:g} s (an infinite loop?)"}, seconds=timeout)
            except WorkerGone:
                reason = worker.exit_reason()
                worker.close()
                worker = None
                outcomes[check.id] = Outcome("crashed", {"error": reason}, seconds=time.monotonic() - started)
        if worker:
            worker.close()
    return outcomes
