"""The grader's side of the learner's process: requests out, validated replies and tensors back.

One worker process (`grader.learner`) serves the checks in turn; on Linux each runs in a confined
fork of its own, unless `GPT2_GRADER_FORK=0` asks for the path of macOS and Windows, where checks
run in the worker itself, the worker is replaced for each package, and a check's timeout is
the grader's to enforce (`forks_here` decides, here only; each request carries the decision).
Everything a check's process leaves in its scratch directory is read as hostile: the reply
through `wire.read_reply`, the tensors one by one, so a malformed or forged answer is that
check's `error`, never a crash of the grading. Should the worker itself hang or die, that
check gets `timeout` or `error` and a fresh worker serves the rest.
"""

from __future__ import annotations

import contextlib
import functools
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from grader.checks import Check
from grader.host.refcache import ReferenceData
from grader.shared import sandbox, wire

FORK_SWITCH = "GPT2_GRADER_FORK"  # 0: run checks without forks on Linux too, as on macOS and Windows
DEFAULT_TIMEOUT = 60.0  # seconds per check; the whole model's check takes a few on a laptop
DEFAULT_MEMORY_LIMIT_GB = 6.0  # memory a check's processes may add; the whole model needs about 1.5
GRACE = 30.0  # a fork server answers for a hung check itself; this is for a hung fork server
STARTUP_LIMIT = 300.0  # seconds for a worker to import torch: a cold start on a slow laptop or Colab
DEVICES = ("cpu", "cuda", "mps", "auto")
SCRATCH_BYTES = 2**30  # a check's scratch where it is a tmpfs: four times what the grader reads of its outputs
MS_NOSUID, MS_NODEV, MNT_DETACH = 2, 4, 2
MAX_OUTPUTS_BYTES = 256 * 2**20  # what the grader reads of one check's outputs: ten times the most a solution writes


@dataclass
class Outcome:
    """What came back from the learner's process for one check, validated."""

    status: str  # a wire.Status, or timeout | crashed (the process's end decided it)
    reply: wire.Reply = field(default_factory=lambda: wire.Reply("error"))
    outputs: dict = field(default_factory=dict)  # tensor name -> numpy array
    seconds: float = 0.0
    traced: bool = False  # --trace: the reply records every tensor the learner's code named
    error: str = ""  # why, for timeout, crashed and an unreadable answer
    printed: list[str] = field(default_factory=list)  # what the check's process printed, cleaned lines

    @property
    def message(self) -> str:
        return self.error or self.reply.error


class WorkerGone(Exception):
    pass


def forks_here() -> bool:
    """Whether checks run in forks of the worker: on Linux, where fork after importing torch is
    well-trodden (DataLoader), unless GPT2_GRADER_FORK=0. The only place that reads the switch."""
    return sys.platform == "linux" and os.environ.get(FORK_SWITCH) != "0"


# What learner code must not read from its environment: the CI job's files (outputs, summaries)
# and anything that looks like a credential.
SECRET = re.compile(r"^(GITHUB_|ACTIONS_|RUNNER_)|TOKEN|SECRET|PASSWORD|CREDENTIAL|_KEY$", re.IGNORECASE)


def learner_environment() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if not SECRET.search(key)}


class Worker:
    """The learner's process. It answers on its stdout (it sends what else is printed there to the
    log); a thread reads the answers, so waiting for one with a limit works on every platform
    (select takes no pipes on Windows)."""

    def __init__(self, log):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "grader.learner"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            cwd=Path(__file__).resolve().parents[2],
            text=True,
            env=learner_environment(),
        )
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

    def wait_ready(self, timeout: float) -> None:
        """Wait until the worker has imported torch, so that a check's time is the check's own."""
        if self.next_line(timeout).strip() != wire.READY:
            raise WorkerGone()

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
            return wire.WorkerAnswer("crashed", "the learner's process answered something unreadable")

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
        for stream in (self.process.stdin, self.process.stdout):
            with contextlib.suppress(OSError):  # BrokenPipeError among them
                if stream:
                    stream.close()


@dataclass(frozen=True)
class Limits:
    timeout: float = DEFAULT_TIMEOUT  # seconds per check
    memory_gb: float = DEFAULT_MEMORY_LIMIT_GB  # 0: no limit
    fast_init: bool = True  # skip the random initialisation the reference weights overwrite
    trace: bool = False  # record every tensor the learner's code names, for `grade --trace`
    sandbox: bool = True  # confine each check where the machine allows it (`sandbox.status`)
    fork: bool | None = None  # each check in a fork of the worker; None: as `forks_here` decides
    device: str = "cpu"  # one of DEVICES; auto: what the learner's torch finds (cuda, mps, else cpu)

    def settled(self) -> Limits:
        """These limits with the fork decision made, once, in the grader's process."""
        return self if self.fork is not None else replace(self, fork=forks_here())


def request_for(package: Path, check: Check, reference: ReferenceData, scratch: Path, limits: Limits) -> wire.Request:
    target = check.target
    return wire.Request(
        package=str(package),
        check=check.id,
        target=wire.TargetSpec(target.file, target.name, target.method, target.driver, limits.fast_init),
        cases=reference.cases(check.id),
        weights=str(reference.weights_path),
        inputs=str(reference.inputs_path(check.id)),
        scratch=str(scratch),
        timeout=check_timeout(check, limits),
        memory_bytes=int(limits.memory_gb * 2**30),
        watch_inputs=check.watch_inputs,
        capture=capture_request(check, limits.trace),
        sandbox=limits.sandbox and bool(limits.fork) and sandbox.status().on,
        fork=bool(limits.fork),
        device=limits.device,
    )


def check_timeout(check: Check, limits: Limits) -> float:
    return max(limits.timeout, check.min_timeout or 0.0)


def capture_request(check: Check, trace: bool) -> wire.Capture | None:
    """What the learner's process records: the check's own needs for diagnosis, plus every named
    tensor under --trace. Values travel back only when a diagnosis compares them."""
    modes = set(check.capture) | ({"locals"} if trace else set())
    return wire.Capture(sorted(modes), list(check.capture)) if modes else None


def printed_lines(answer: wire.WorkerAnswer) -> list[str]:
    """What the check's processes printed, as the fork server kept it, each line cleaned; then how much
    more there was."""
    lines = [wire.clean_text(line) for line in answer.printed.splitlines()]
    return lines + ([f"... {answer.printed_beyond} more bytes"] if answer.printed_beyond else [])


@contextlib.contextmanager
def scratch_filesystem(scratch: Path):
    """As root on Linux, a tmpfs of SCRATCH_BYTES mounted on the check's scratch directory while the check
    runs and its answer is read: what the check writes there takes no disk, and its pages are charged to
    the check's memory group. Elsewhere (an ordinary user, macOS, Windows) the directory as it is: only
    each file is capped (`learner.server.CHECK_FILE_BYTES`)."""
    mounted = _mount_tmpfs(scratch)
    try:
        yield
    finally:
        if mounted:
            _libc().umount2(bytes(scratch), MNT_DETACH)  # the rmtree after it then removes the empty directory


def _mount_tmpfs(scratch: Path) -> bool:
    if sys.platform != "linux" or os.geteuid() != 0:
        return False
    options = f"size={SCRATCH_BYTES},mode=0700".encode()
    return _libc().mount(b"tmpfs", bytes(scratch), b"tmpfs", MS_NOSUID | MS_NODEV, options) == 0


@functools.cache
def _libc():
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def read_outputs(scratch: Path, reply: wire.Reply, limit: int = MAX_OUTPUTS_BYTES) -> dict | str:
    """The tensors of a reply, or why they cannot be used. The file is what the learner's code left:
    never a link followed or a FIFO blocked on, its header checked (`wire.outputs_index`) before any
    tensor is read, and at most `limit` bytes of it read. A case's output must be there, in a dtype
    NumPy has, within the limit; a recorded tensor that is not is left out (it only feeds the diagnosis)."""
    import numpy as np

    if not reply.outputs:
        return {}
    try:
        handle = wire.open_left(scratch / wire.OUTPUTS_FILE)
    except OSError:
        return "the check's process left no readable outputs file"
    with handle:
        index = wire.outputs_index(handle)
        if isinstance(index, wire.BadReply):
            return index.reason
        tensors = index.tensors
        required = {wire.OUTPUT.format(case=case): case for case in reply.outputs}
        for key, case in required.items():
            if key not in tensors:
                return f"the check's process gave no output for {case}"
            if tensors[key].numpy_dtype is None:
                return f"the check's output for {case} is {tensors[key].dtype}, a dtype NumPy cannot read"
        needed = sum(tensors[key].nbytes for key in required)
        if needed > limit:
            return f"the check's outputs hold {needed / 2**20:.4g} MB, more than the {limit / 2**20:.4g} MB allowed"
        outputs, budget = {}, limit
        for key in [*required, *(key for key in tensors if key not in required)]:  # the cases' outputs first
            entry = tensors[key]
            if entry.numpy_dtype is None or entry.nbytes > budget:
                continue
            value = np.empty(entry.shape, entry.numpy_dtype)
            handle.seek(index.data_start + entry.data_offsets[0])
            if handle.readinto(value.reshape(-1).view(np.uint8)) != entry.nbytes:
                return "the check's outputs file ended early"
            outputs[key], budget = value, budget - entry.nbytes
    return outputs


@dataclass(frozen=True)
class TimedAnswer(wire.WorkerAnswer):
    seconds: float = 0.0


class Lane:
    """One worker process and the checks it runs, one at a time; the worker is replaced when it dies or
    hangs. Where checks run in forks (Linux), one worker serves any number of packages, so grading
    many pays for importing torch once."""

    def __init__(self, name: str, limits: Limits, scratch: Path, log):
        self.name, self.limits, self.scratch, self.log = name, limits, scratch, log
        self.worker: Worker | None = None
        self.ready = False  # the worker has said wire.READY
        self.cancelled = False  # no more checks: the grading was interrupted
        self.requests = 0

    def start(self) -> None:
        """Start the worker now (it imports torch), so that it is ready by the first check."""
        if self.worker is None:
            self.worker, self.ready = Worker(self.log), False

    def run(self, package: Path, checks: list[Check], reference: ReferenceData) -> dict[str, Outcome]:
        """Every check's outcome, in order."""
        outcomes = {}
        for check in checks:
            if self.cancelled:  # Ctrl-C in the grader's main thread: this lane's thread ends too
                raise WorkerGone()
            outcomes[check.id] = self._run_one(package, check, reference)
        if not self.limits.fork:  # without forks the learner's modules stay imported in the worker: a fresh
            self.close()  # one for the next package, importing torch while this one's verdicts are judged
            self.start()
        return outcomes

    def _ready_worker(self) -> Worker:
        """The worker, started and done importing torch, whose time is no check's."""
        if self.cancelled:
            raise WorkerGone()
        self.start()
        assert self.worker is not None
        if not self.ready:
            self.worker.wait_ready(STARTUP_LIMIT)
            self.ready = True
        return self.worker

    def _answer_limit(self, request: wire.Request) -> float:
        """How long the grader waits: a fork server times its checks itself, and gets GRACE more;
        a check that runs in the worker has only its own timeout, then the worker is killed."""
        return request.timeout + GRACE if request.fork else request.timeout

    def _run_one(self, package: Path, check: Check, reference: ReferenceData) -> Outcome:
        self.requests += 1
        scratch = self.scratch / f"check-{self.name}-{self.requests}"
        scratch.mkdir(mode=0o700)
        request = request_for(package, check, reference, scratch, self.limits)
        try:
            with scratch_filesystem(scratch):
                answer = self._ask(request)
                return self._outcome(answer, scratch, request, answer.seconds)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _ask(self, request: wire.Request) -> TimedAnswer:
        try:
            worker = self._ready_worker()
        except (TimeoutError, WorkerGone):
            reason = self.worker.exit_reason() if self.worker and self.worker.process.poll() is not None else "it hung"
            self.close()
            return TimedAnswer("crashed", f"the learner's process did not start: {reason}")
        started = time.monotonic()
        try:
            answer = worker.ask(request, self._answer_limit(request))
        except TimeoutError:
            self.close()
            answer = wire.WorkerAnswer("timeout", f"no answer within {request.timeout:g} s (an infinite loop?)")
        except WorkerGone:
            answer = wire.WorkerAnswer("crashed", worker.exit_reason())
            self.close()
        return TimedAnswer(**asdict(answer), seconds=time.monotonic() - started)

    def _outcome(self, answer: wire.WorkerAnswer, scratch: Path, request: wire.Request, seconds: float) -> Outcome:
        outcome = self._answered(answer, scratch, request, seconds)
        outcome.printed = printed_lines(answer)  # shown with the check whatever its ending: a crash's last words too
        return outcome

    def _answered(self, answer: wire.WorkerAnswer, scratch: Path, request: wire.Request, seconds: float) -> Outcome:
        if answer.ending == "timeout":
            return Outcome("timeout", seconds=request.timeout, error=answer.reason)
        if answer.ending in ("crashed", "memory"):
            return Outcome("crashed", seconds=seconds, error=answer.reason)
        reply = wire.read_reply(scratch, request.cases)
        if isinstance(reply, wire.BadReply):
            return Outcome("crashed", seconds=seconds, error=reply.reason)
        outputs = read_outputs(scratch, reply)
        if isinstance(outputs, str):
            return Outcome("crashed", reply, seconds=seconds, error=outputs)
        return Outcome(reply.status, reply, outputs, seconds, self.limits.trace)

    def close(self) -> None:
        if self.worker:
            self.worker.close()
            self.worker = None


GPT2_LANE, STAND_IN_LANE = "gpt2", "stand-ins"


def lanes_for(checks: list[Check], limits: Limits) -> dict[str, list[Check]]:
    """The checks of each lane, in order. Checks that read none of GPT-2's weights or activations
    (`Check.reads_gpt2`) run in a lane of their own, at the same time as the others, where checks
    run in forks and two cores are free: what such a check holds can tell no other check its
    expected outputs, and no other check's inputs can tell it its own. Else one lane."""
    stand_ins = [check for check in checks if not check.reads_gpt2]
    if not (limits.fork and stand_ins and len(stand_ins) < len(checks) and usable_cores() >= 2):
        return {GPT2_LANE: checks}
    return {GPT2_LANE: [check for check in checks if check.reads_gpt2], STAND_IN_LANE: stand_ins}


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class LearnerProcesses:
    """The learner's side of grading: a lane (a worker and its checks) for the checks that read GPT-2's
    data and, where they can run beside it, one for those that do not."""

    def __init__(self, limits: Limits = Limits()):
        self.limits = limits.settled()
        # A check's process may leave files the grader's user cannot remove (it ran as nobody, or was killed
        # mid-write): they are left to the system's temporary directory rather than fail the report.
        self.scratch = tempfile.TemporaryDirectory(prefix="gpt2-grader-", ignore_cleanup_errors=True)
        self.log = open(Path(self.scratch.name) / "learner.log", "w")  # what the workers print
        self.lanes: dict[str, Lane] = {}

    def __enter__(self) -> LearnerProcesses:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.stop()
        self.log.close()
        self.scratch.cleanup()

    def lane(self, name: str) -> Lane:
        if name not in self.lanes:
            self.lanes[name] = Lane(name, self.limits, Path(self.scratch.name), self.log)
        return self.lanes[name]

    def start(self) -> None:
        """Start the first lane's worker now: it imports torch while the grader reads the reference."""
        self.lane(GPT2_LANE).start()

    def stop(self) -> None:
        """End every worker now (the next check starts one): while the reference is built, say, which
        would otherwise hold its memory beside theirs."""
        for lane in self.lanes.values():
            lane.close()

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
        except BaseException:  # Ctrl-C: the workers go now, and every lane's thread ends before the scratch does
            for lane in self.lanes.values():
                lane.cancelled = True
            self.stop()
            for thread in threads:
                thread.join(timeout=GRACE)
            self.stop()  # a worker a lane's thread started meanwhile
            raise
        if failures:
            raise failures[0]
        return {check.id: outcomes[check.id] for check in checks}
