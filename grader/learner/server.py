"""The fork server: one confined fork per check, supervised for time and memory; or checks in turn, unforked.

A forked check runs in a cgroup of its own where the fork server can make one (`grader.shared.cgroup`): the
kernel counts and caps its memory and tasks. Elsewhere its address space is capped and its resident
memory polled. Either way what it prints goes through a pipe to the fork server, which keeps the
first MAX_PRINTED_BYTES and counts the rest, and each file it writes is capped at CHECK_FILE_BYTES.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TextIO

from grader.learner.cases import failure_reply, run_request
from grader.learner.guards import install_guards
from grader.learner.package import LearnerPackage
from grader.learner.polled_memory import anonymous_memory, check_processes_apart_from, tree_memory
from grader.learner.weights import WeightsFile
from grader.shared import sandbox, twin, wire
from grader.shared.cgroup import CheckGroup
from grader.shared.imports import collection_paused
from grader.shared.paths import REPO_ROOT
from grader.shared.wire import Request

POLL_SECONDS = 0.1  # how often the fork server looks at a running check's time and memory
MAX_PRINTED_BYTES = 64 * 1024  # of what a check prints, kept for the report (which shows a few lines)
READ_BYTES = 64 * 1024  # one pipeful
CHECK_FILE_BYTES = 512 * 2**20  # RLIMIT_FSIZE: twice what the grader reads of a check's outputs
# RLIMIT_NOFILE: a solution's check holds fewer than 10 descriptors. Unix socket buffers are charged to no
# cgroup v1, so this bounds them: each socket queues at most twice net.core.wmem_max (212 KB by default),
# and the sockets in flight in SCM_RIGHTS messages count against the same limit: at most 2 x 64 sockets,
# queueing at most 2 x 64 x 2 x wmem_max bytes (about 54 MB; 1 GB where wmem_max is raised to 4 MB).
CHECK_DESCRIPTORS = 64
STACKS_AT = 0.9  # of its time, the preflight writes its stacks: before the fork server ends it (runner.preflight)
_check_numbers = itertools.count()


def run_check(request: Request, forked: bool, policy: sandbox.Policy | None = None) -> None:
    """One check in this process, start to finish: its reply and outputs land in its scratch directory.
    In a fork of its own it is also capped in memory and, given a policy, confined."""
    from safetensors import safe_open

    if request.preflight:
        return import_each(request, policy)
    package_path = Path(request.package).resolve()
    scratch = Path(request.scratch)
    try:
        # Opened before confinement: the check reads the reference only through these two files.
        with (
            safe_open(request.weights, "pt") as handle,
            contextlib.closing(WeightsFile(request.weights, handle)) as weights,
            safe_open(request.inputs, "pt") as inputs,
        ):
            if forked:  # counts each module's mapping of the weights, made later, not safetensors' own of the file
                limit_memory(request.memory_bytes)
            if policy is not None:  # given to a fork only
                sandbox.confine(policy)
            package = guarded(package_path, request)
            reply = run_request(package, request, weights, inputs)
    except BaseException as error:
        reply = failure_reply(error, package_path)
    write_reply(scratch, reply.to_json())


def guarded(package_path: Path, request: Request) -> LearnerPackage:
    """The learner's package, imported once the guards are on (the solutions unreadable, but to themselves)."""
    solutions = REPO_ROOT / "solutions"
    install_guards([] if package_path == solutions else [solutions])
    return LearnerPackage(package_path, request.unfinished)


def import_each(request: Request, policy: sandbox.Policy | None) -> None:
    """The preflight (`grader.host.runner.preflight`): each of the learner's files the checks grade imported once (and
    so each file it imports), confined as a check is; where one is still importing near the end of its time, every
    thread's stack is written to the scratch for the grader to find the file and line it was stopped at."""
    import faulthandler

    package_path = Path(request.package).resolve()
    with open(Path(request.scratch) / wire.IMPORT_STACK_FILE, "w") as stack:
        faulthandler.dump_traceback_later(request.timeout * STACKS_AT, file=stack)
        try:
            if policy is not None:
                sandbox.confine(policy)
            package = guarded(package_path, request)
            for file in request.preflight:
                with contextlib.suppress(Exception):  # its error is its checks' to report (a missing file's too)
                    package.module(file)
            reply = wire.Reply("ran")
        except BaseException as error:
            reply = failure_reply(error, package_path)
        faulthandler.cancel_dump_traceback_later()
    write_reply(Path(request.scratch), reply.to_json())


def write_reply(scratch: Path, reply: str) -> None:
    """The reply into the scratch; where the learner's code filled it (ENOSPC), emptied first, so that
    the check's error still gets through."""
    try:
        (scratch / wire.REPLY_FILE).write_text(reply)
    except OSError:
        for entry in scratch.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        (scratch / wire.REPLY_FILE).write_text(reply)


def limit_memory(extra_bytes: int) -> int:
    """Cap this process's address space at what it uses now plus `extra_bytes` (0: no cap); the cap."""
    if not extra_bytes:
        return 0
    import resource

    with open("/proc/self/status") as status:
        in_use = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (in_use + extra_bytes, in_use + extra_bytes))
    return in_use + extra_bytes


def use_scratch_for_temporary_files(scratch: Path) -> None:
    """The one writable place of a confined check: temporary files and torch's compile caches go there."""
    import tempfile

    for variable in ("TMPDIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        os.environ[variable] = str(scratch)
    tempfile.tempdir = str(scratch)


def limit_files() -> None:
    """Cap the size of each file the check's processes write and the descriptors each may hold (see the
    constants); Python ignores SIGXFSZ, so a write past the cap is an OSError (EFBIG) in the check."""
    import resource

    resource.setrlimit(resource.RLIMIT_FSIZE, (CHECK_FILE_BYTES, CHECK_FILE_BYTES))
    resource.setrlimit(resource.RLIMIT_NOFILE, (CHECK_DESCRIPTORS, CHECK_DESCRIPTORS))


class PrintedOutput:
    """What a check's processes print, through a pipe the fork server drains: the first MAX_PRINTED_BYTES
    kept, the rest only counted, so that nothing they print reaches the disk or the fork server's memory."""

    def __init__(self):
        self.fd, self.write_end = os.pipe()
        os.set_blocking(self.fd, False)
        self.kept, self.beyond, self.open = bytearray(), 0, True

    def pending(self) -> list[int]:
        return [self.fd] if self.open else []

    def read(self, pipefuls: int = 16) -> bool:
        """Read what is there, at most `pipefuls` of it (a check printing without end still leaves the
        fork server its deadline to keep); whether more may be there."""
        for _ in range(pipefuls):
            try:
                data = os.read(self.fd, READ_BYTES)
            except BlockingIOError:
                return False
            if not data:
                self.open = False
                return False
            room = MAX_PRINTED_BYTES - len(self.kept)
            self.kept += data[:room]
            self.beyond += max(0, len(data) - room)
        return True

    def close(self) -> None:
        """Read what the check's ended processes left in the pipe, then close it."""
        while self.open and self.read():
            pass
        os.close(self.fd)

    def answered(self, answer: wire.WorkerAnswer) -> wire.WorkerAnswer:
        return replace(answer, printed=self.kept.decode("utf-8", errors="replace"), printed_beyond=self.beyond)


def check_process(answer_fd: int, printed: PrintedOutput, group: CheckGroup | None, request: Request) -> None:
    """The forked child: into its group, its output into the pipe, the caps; then the sandbox and the check; never
    returns."""
    try:
        if group is not None:
            group.join()  # first: everything the check allocates from here on is charged to its group
        os.close(answer_fd)  # the fork server's own channel to the grader
        os.close(printed.fd)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(printed.write_end, 1)
        os.dup2(printed.write_end, 2)
        os.close(printed.write_end)
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        limit_files()
        use_scratch_for_temporary_files(Path(request.scratch))
        run_check(request, forked=True, policy=policy_for(request))
    finally:
        os._exit(0)


def policy_for(request: Request) -> sandbox.Policy | None:
    """The check's sandbox, where it has one. The fork server works it out for each request, keeping the package's
    rules from one check to the next (`sandbox.allow_lists`, `sandbox.package_ruleset`); the check's process, forked
    after, finds them in its copy."""
    return sandbox.policy_for(Path(request.package).resolve(), Path(request.scratch)) if request.sandbox else None


def supervise(pid: int, request: Request, printed: PrintedOutput, group: CheckGroup | None) -> wire.WorkerAnswer:
    """Wait for the check's process to end, within its time and memory, reading what it prints; then
    end all it started."""
    import select

    deadline = time.monotonic() + request.timeout
    pidfd = os.pidfd_open(pid)
    over_memory = memory_watch(pid, request.memory_bytes, group)
    next_look = time.monotonic() + POLL_SECONDS
    answer = None
    try:
        while answer is None:
            ready = select.select([pidfd, *printed.pending()], [], [], POLL_SECONDS)[0]
            if printed.fd in ready:
                printed.read()
            if pidfd in ready:
                _, status = os.waitpid(pid, 0)
                answer = memory_answer(request) if over_memory() else ended_answer(status)
            elif time.monotonic() > deadline:
                answer = wire.WorkerAnswer("timeout", f"no answer within {request.timeout:g} s (an infinite loop?)")
            elif time.monotonic() >= next_look:
                next_look = time.monotonic() + POLL_SECONDS
                answer = memory_answer(request) if over_memory() else None
    finally:
        os.close(pidfd)
        sandbox.end_descendants()
        printed.close()
    return printed.answered(answer)


def ended_answer(status: int) -> wire.WorkerAnswer:
    return wire.WorkerAnswer("answered") if status == 0 else wire.WorkerAnswer("crashed", exit_reason(status))


def memory_answer(request: Request) -> wire.WorkerAnswer:
    return wire.WorkerAnswer("memory", f"the check's processes used more than {request.memory_bytes / 2**30:g} GB")


def memory_watch(pid: int, memory_bytes: int, group: CheckGroup | None) -> Callable[[], bool]:
    """Whether the check's processes have gone over their memory: the kernel's word where the check
    has a group of its own, else their memory, polled (`polled_memory`)."""
    if not memory_bytes:
        return lambda: False
    if group is not None:
        return group.ran_out_of_memory
    baseline, others = anonymous_memory(os.getpid()), check_processes_apart_from(pid)
    return lambda: tree_memory(others, baseline) > baseline + memory_bytes


def exit_reason(status: int) -> str:
    import signal

    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        return f"the check's process was killed by {name}" + (" (out of memory?)" if name == "SIGKILL" else "")
    return f"the check's process exited with code {os.WEXITSTATUS(status)} before answering (sys.exit or os._exit?)"


def run_one(request: Request, answer_fd: int) -> wire.WorkerAnswer:
    """The check's answer: run here, or in a fork of its own, in its own cgroup where one can be made."""
    warm_imports(request)
    if not request.fork:  # the check runs here; the grader restarts this process for the next package
        run_check(request, forked=False)
        sandbox.end_descendants()
        return wire.WorkerAnswer("answered")
    policy_for(request)  # what this process keeps for the package: the check's fork inherits it
    group = CheckGroup.make(next(_check_numbers), request.memory_bytes, sandbox.CHECK_PROCESSES)
    printed = PrintedOutput()
    pid = os.fork()
    if pid == 0:
        check_process(answer_fd, printed, group, request)
    os.close(printed.write_end)
    try:
        return supervise(pid, request, printed, group)
    finally:
        if group is not None:
            group.remove()


def preload() -> None:
    """Import what nearly every exercise imports, once, before any fork."""
    with collection_paused():
        import psutil  # noqa: F401
        import torch  # noqa: F401

        for name in ("einops", "jaxtyping", "safetensors.torch"):
            with contextlib.suppress(ImportError):
                importlib.import_module(name)


def warm_imports(request: Request) -> None:
    """Import, once and before the fork, the check's driver and what the code it drives imports anyway
    (`Run.warm_imports`): paid in every check's process otherwise. Grader and library code only, never the
    learner's."""
    driver = (request.target.driver or "").partition(":")[0]
    missing = [name for name in [driver] * bool(driver) + request.warm_imports if name not in sys.modules]
    if missing:
        with collection_paused():
            for name in missing:
                importlib.import_module(name)


def answer_channel() -> TextIO:
    """This process's stdout, kept for the answers; fd 1 then joins stderr (the grader's log), so
    nothing printed here, by torch or by the learner's code run unforked, can pass for an answer."""
    sys.stdout.flush()
    answer_fd = os.dup(1)
    os.dup2(2, 1)
    return os.fdopen(answer_fd, "w")


def serve() -> None:
    answers = answer_channel()
    if sys.path and Path(sys.path[0] or ".").resolve() == Path.cwd():
        sys.path.pop(0)  # `python -m` put the grader's working directory first; the learner gets none of it
    sys.dont_write_bytecode = True  # the learner's files are read, never written beside
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the grader's to handle: it ends this process itself
    preload()
    answers = twin.split(answers)  # before becoming a subreaper, which would make the twin this process's own
    sandbox.become_subreaper()
    answers.write(wire.ready_line(os.getpid()) + "\n")
    answers.flush()
    for line in sys.stdin:
        answers.write(run_one(wire.parse_request(line), answers.fileno()).to_json() + "\n")
        answers.flush()
