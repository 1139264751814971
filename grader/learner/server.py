"""The fork server: one confined fork per check, supervised for time and memory; or checks in turn, unforked."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import sys
import time
from dataclasses import asdict
from pathlib import Path

from .. import sandbox, wire
from ..paths import REPO_ROOT
from ..wire import Request
from .cases import failure_reply, run_request
from .guards import install_guards
from .package import LearnerPackage
from .weights import WeightsFile

# What the code a driver runs imports on first use, beyond the driver itself: torch.optim's first
# optimizer imports torch._dynamo, about 2 s, in each training check that makes one.
DRIVER_IMPORTS = {"grader.drivers.training": ("torch._dynamo",)}


def run_check(request: Request, forked: bool) -> None:
    """One check in this process, start to finish: its reply and outputs land in its scratch directory.
    In a fork of its own it is also capped in memory and, when asked, confined."""
    from safetensors import safe_open

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
            if forked and request.sandbox:
                sandbox.confine(sandbox.policy_for(package_path, scratch))
            solutions = REPO_ROOT / "solutions"
            install_guards([] if package_path == solutions else [solutions])
            package = LearnerPackage(package_path)
            reply = run_request(package, request, weights, inputs)
    except BaseException as error:
        reply = failure_reply(error, package_path)
    (scratch / wire.REPLY_FILE).write_text(json.dumps(reply))


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


def check_process(request: Request, answer_fd: int) -> None:
    """The forked child: its own output file, the memory cap, the sandbox, the check; never returns."""
    try:
        os.close(answer_fd)  # the fork server's own channel to the grader
        printed = os.open(Path(request.scratch) / wire.PRINTED_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(printed, 1)
        os.dup2(printed, 2)
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        use_scratch_for_temporary_files(Path(request.scratch))
        run_check(request, forked=True)
    finally:
        os._exit(0)


def supervise(pid: int, request: Request) -> wire.WorkerAnswer:
    """Wait for the check's process to end, within its time and memory; then end all it started."""
    import select

    deadline = time.monotonic() + request.timeout
    pidfd = os.pidfd_open(pid)
    baseline = anonymous_memory(os.getpid())
    answer = None
    try:
        while answer is None:
            if select.select([pidfd], [], [], 0.1)[0]:
                _, status = os.waitpid(pid, 0)
                answer = (
                    wire.WorkerAnswer("answered") if status == 0 else wire.WorkerAnswer("crashed", exit_reason(status))
                )
            elif time.monotonic() > deadline:
                answer = wire.WorkerAnswer("timeout", f"no answer within {request.timeout:g} s (an infinite loop?)")
            elif request.memory_bytes and tree_memory(pid, baseline) > baseline + request.memory_bytes:
                answer = wire.WorkerAnswer(
                    "memory", f"the check's processes used more than {request.memory_bytes / 2**30:g} GB"
                )
    finally:
        os.close(pidfd)
        sandbox.end_descendants()
    return answer


def anonymous_memory(pid: int) -> int:
    import psutil

    info = psutil.Process(pid).memory_info()
    return info.rss - info.shared


def tree_memory(pid: int, baseline: int) -> int:
    """The memory of a check's process and its descendants: pages a fork shares with the fork server
    (about `baseline` in each) are counted once."""
    import psutil

    try:
        tree = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = baseline
    for process in tree:
        with contextlib.suppress(psutil.Error):
            info = process.memory_info()
            total += max(0, info.rss - info.shared - baseline)
    return total


def exit_reason(status: int) -> str:
    import signal

    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        return f"the check's process was killed by {name}" + (" (out of memory?)" if name == "SIGKILL" else "")
    return f"the check's process exited with code {os.WEXITSTATUS(status)} before answering (sys.exit or os._exit?)"


def run_one(request: Request, answer_fd: int) -> wire.WorkerAnswer:
    warm_imports(request)
    if not request.fork:  # the check runs here; the grader restarts this process for the next package
        run_check(request, forked=False)
        sandbox.end_descendants()
        return wire.WorkerAnswer("answered")
    if request.sandbox:
        sandbox.allow_lists(Path(request.package).resolve())  # worked out here, once per package
    pid = os.fork()
    if pid == 0:
        check_process(request, answer_fd)
    return supervise(pid, request)


def preload() -> None:
    """Import what nearly every exercise imports, once, before any fork."""
    import psutil  # noqa: F401
    import torch  # noqa: F401

    for name in ("einops", "jaxtyping", "safetensors.torch"):
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


def warm_imports(request: Request) -> None:
    """Import, once and before the fork, what a check's driver and the code it drives import anyway:
    paid in every check's process otherwise. Grader and library code only, never the learner's."""
    module_name = (request.target.driver or "").partition(":")[0]
    for name in (module_name, *DRIVER_IMPORTS.get(module_name, ())) if module_name else ():
        importlib.import_module(name)


def answer_channel() -> tuple[int, object]:
    """This process's stdout, kept for the answers; fd 1 then joins stderr (the grader's log), so
    nothing printed here, by torch or by the learner's code run unforked, can pass for an answer."""
    sys.stdout.flush()
    answer_fd = os.dup(1)
    os.dup2(2, 1)
    return answer_fd, os.fdopen(answer_fd, "w")


def serve() -> None:
    answer_fd, answers = answer_channel()
    if sys.path and Path(sys.path[0] or ".").resolve() == Path.cwd():
        sys.path.pop(0)  # `python -m` put the grader's working directory first; the learner gets none of it
    sys.dont_write_bytecode = True  # the learner's files are read, never written beside
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the grader's to handle: it ends this process itself
    sandbox.become_subreaper()
    preload()
    answers.write(wire.READY + "\n")
    answers.flush()
    for line in sys.stdin:
        answer = run_one(wire.parse_request(line), answer_fd)
        answers.write(json.dumps(asdict(answer)) + "\n")
        answers.flush()
